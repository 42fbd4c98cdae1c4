#!/usr/bin/env bash
# Builds the aicr-runner image for this machine's architecture with podman: the
# release path (scripts/image-inputs.sh, then the Dockerfile on the directory it
# makes), with no container registry and nothing downloaded during the build.
#
#   base    Debian IMAGE_DEBIAN_SUITE made with mmdebstrap (cached per recipe)
#   tools   helm, kubectl, cosign and oras in one binary, built from their pinned Go
#           modules (tools/versions.env) by scripts/bootstrap-tools.sh image-tools
#   wheels  requirements.lock's wheels (PyPI or pip's cache, sha256-checked) and
#           the aicr-runner wheel of this checkout
#
# The image is tagged localhost/aicr-runner:ci-<hash of every input>; when that
# tag exists nothing is built. The image reference is the last line on stdout
# (progress goes to stderr):
#
#   image=$(bash scripts/build-image.sh | tail -n 1)
#   podman --runtime runc --cgroup-manager cgroupfs run --rm --read-only \
#     --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$image" version
#
# runc, not crun (crun fails on hybrid cgroup hosts), and cgroupfs (no systemd
# needed). Docker image format: the OCI format drops the Dockerfile's SHELL.
# Release images are built by .github/workflows/release.yaml from the same inputs.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source-path=SCRIPTDIR/.. source=tools/versions.env
source tools/versions.env

log() { printf 'build-image: %s\n' "$*" >&2; }
podman_cmd=(podman --runtime runc --cgroup-manager cgroupfs)

for program in podman runc mmdebstrap; do
  command -v "$program" >/dev/null 2>&1 || { bash scripts/bootstrap-tools.sh debian >&2; break; }
done
bash scripts/setup.sh --python-only >&2

# One build at a time on this machine: podman's image store is machine-wide.
lock_dir=${XDG_CACHE_HOME:-$HOME/.cache}
mkdir -p "$lock_dir"
exec 9>"$lock_dir/aicr-runner-image.lock"
if ! flock -n 9; then
  log "another image build is running; waiting for it"
  flock 9
fi

arch=$(dpkg --print-architecture)
started=$SECONDS
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# -- the cache key: every input of the build ------------------------------------------
# The base and the tools first (both cached, so this is quick when nothing changed);
# the wheels are fixed by requirements.lock and this checkout's sources.
bash scripts/image-inputs.sh --arch "$arch" --out "$work" base tools
version=$(sed -n 's/^appVersion: *//p' chart/Chart.yaml | tr -d '"')
key=$(
  {
    printf 'version %s\n' "$version"
    # relative names: the scratch directory's name must not change the key
    (cd "$work" && sha256sum "base-$arch.tar" "tools/$arch/image-tools")
    find Dockerfile requirements.lock pyproject.toml README.md src -type f \
      ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-16
)
image="localhost/aicr-runner:ci-$key"
if "${podman_cmd[@]}" image exists "$image"; then
  log "$image is up to date"
  printf '%s\n' "$image"
  exit 0
fi

bash scripts/image-inputs.sh --arch "$arch" --out "$work" wheels
log "building $image"
"${podman_cmd[@]}" build --pull=never --layers --format docker --platform "linux/$arch" \
  --build-arg "VERSION=$version" \
  --build-arg "BASE_NAME=debian:$IMAGE_DEBIAN_SUITE (mmdebstrap, scripts/image-inputs.sh)" \
  --tag "$image" --file Dockerfile "$work" >&2
log "image built in $((SECONDS - started))s ($("${podman_cmd[@]}" image inspect --format '{{.Size}}' "$image") bytes)"
printf '%s\n' "$image"
