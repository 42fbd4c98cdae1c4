#!/usr/bin/env bash
# Builds the aicr-runner image from the Dockerfile with podman, from local inputs
# only (no container registry, nothing downloaded during the build):
#
#   base    a Debian root file system made with mmdebstrap from this machine's
#           Debian suite (python3, python3-venv, bash, ca-certificates, jq, tini),
#           imported as localhost/aicr-runner-base:<suite>-<recipe>; made once,
#           when missing                      -> --build-arg PYTHON_IMAGE=...
#   tools   helm, kubectl and cosign as the tool bootstrap builds them (tools/versions.env)
#                                             -> --build-context tools=<dir>
#   wheels  aicr-runner and its dependencies as wheels, at the versions the test
#           venv holds (pip wheel on this machine, from PyPI or pip's cache)
#                                             -> --build-context wheels=<dir>
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
# needed). Docker image format: the OCI format drops the Dockerfile's SHELL. Release images are built by .github/workflows/release.yaml instead.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source-path=SCRIPTDIR/.. source=tools/versions.env
source tools/versions.env

log() { printf 'build-image: %s\n' "$*" >&2; }
podman_cmd=(podman --runtime runc --cgroup-manager cgroupfs)

#: Binaries the image carries: NAME:VERSIONS_ENV_KEY (bootstrap target = NAME).
#: A new one is added here and to the Dockerfile's tools-download stage.
image_tools=(helm:HELM_VERSION kubectl:KUBERNETES_VERSION cosign:COSIGN_VERSION)
#: What the local base holds besides Debian's minbase.
base_packages=python3,python3-venv,bash,ca-certificates,jq,tini

# -- prerequisites: the Debian packages and the pinned tools ---------------------------
needed=()
for program in podman runc mmdebstrap; do
  command -v "$program" >/dev/null 2>&1 || { needed+=(debian); break; }
done
for entry in "${image_tools[@]}"; do
  name=${entry%%:*} key=${entry#*:}
  stamp=".tools/bin/.$name.version"
  if [[ ! -x .tools/bin/$name || ! -f $stamp || "$(cat "$stamp")" != "${!key}" ]]; then needed+=("$name"); fi
done
if ((${#needed[@]})); then
  log "bootstrapping ${needed[*]}"
  bash scripts/bootstrap-tools.sh "${needed[@]}" >&2
fi
bash scripts/setup.sh --python-only >&2

# One build at a time on this machine: podman's image store is machine-wide.
lock_dir=${XDG_CACHE_HOME:-$HOME/.cache}
mkdir -p "$lock_dir"
exec 9>"$lock_dir/aicr-runner-image.lock"
if ! flock -n 9; then
  log "another image build is running; waiting for it"
  flock 9
fi

# -- the base -------------------------------------------------------------------------
# shellcheck source=/dev/null
read -r distro suite < <(. /etc/os-release && printf '%s %s\n' "${ID:-}" "${VERSION_CODENAME:-}")
if [[ $distro != debian || -z $suite ]]; then
  log "the local base is made with mmdebstrap from this machine's Debian suite; this is ${distro:-unknown} ${suite:-}"
  exit 2
fi
mirrors=(
  "deb http://deb.debian.org/debian $suite main"
  "deb http://deb.debian.org/debian $suite-updates main"
  "deb http://deb.debian.org/debian-security $suite-security main"
)
# Documentation, manuals and translations are left out (licences stay).
dpkg_opts=(
  path-exclude=/usr/share/doc/* path-include=/usr/share/doc/*/copyright
  path-exclude=/usr/share/man/* path-exclude=/usr/share/info/* path-exclude=/usr/share/locale/*
)
base_recipe=$(printf '%s\n' "$base_packages" "${mirrors[@]}" "${dpkg_opts[@]}" | sha256sum | cut -c1-12)
base="localhost/aicr-runner-base:$suite-$base_recipe"
if ! "${podman_cmd[@]}" image exists "$base"; then
  log "making the base $base (mmdebstrap $suite: $base_packages)"
  started=$SECONDS
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mmdebstrap --quiet --variant=minbase --include="$base_packages" \
    "${dpkg_opts[@]/#/--dpkgopt=}" "$suite" "$work/base.tar" "${mirrors[@]}" >&2
  "${podman_cmd[@]}" import --quiet --change 'CMD ["/bin/bash"]' \
    --message "mmdebstrap --variant=minbase --include=$base_packages $suite" "$work/base.tar" "$base" >/dev/null
  rm -rf "$work"
  trap - EXIT
  log "base made in $((SECONDS - started))s"
fi
base_id=$("${podman_cmd[@]}" image inspect --format '{{.Id}}' "$base")

# -- the cache key: every input of the build ------------------------------------------
# The test venv's versions, so the image runs the dependency versions the tests ran.
constraints=$(.venv/bin/python -m pip freeze --exclude-editable --disable-pip-version-check)
version=$(sed -n 's/^appVersion: *//p' chart/Chart.yaml | tr -d '"')
key=$(
  {
    printf 'base %s\nversion %s\n%s\n' "$base_id" "$version" "$constraints"
    for entry in "${image_tools[@]}"; do sha256sum ".tools/bin/${entry%%:*}"; done
    find Dockerfile .dockerignore pyproject.toml README.md src -type f \
      ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-16
)
image="localhost/aicr-runner:ci-$key"
if "${podman_cmd[@]}" image exists "$image"; then
  log "$image is up to date"
  printf '%s\n' "$image"
  exit 0
fi

# -- the local build contexts and the build ---------------------------------------------
started=$SECONDS
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tools" "$work/wheels"
for entry in "${image_tools[@]}"; do
  cp ".tools/bin/${entry%%:*}" "$work/tools/"
done
printf '%s\n' "$constraints" >"$work/constraints.txt"
log "building wheels (aicr-runner and its dependencies)"
.venv/bin/python -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$work/wheels" \
  --constraint "$work/constraints.txt" . >&2
log "building $image"
"${podman_cmd[@]}" build --pull=never --layers --format docker \
  --build-arg "PYTHON_IMAGE=$base" \
  --build-arg "VERSION=$version" \
  --build-context "tools=$work/tools" \
  --build-context "wheels=$work/wheels" \
  --tag "$image" --file Dockerfile . >&2
log "image built in $((SECONDS - started))s ($("${podman_cmd[@]}" image inspect --format '{{.Size}}' "$image") bytes)"
printf '%s\n' "$image"
