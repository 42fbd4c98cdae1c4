#!/usr/bin/env bash
# Makes the Dockerfile's build context: everything the aicr-runner image is built
# from, per target architecture, from the pins in tools/versions.env and
# requirements.lock. The local build (scripts/build-image.sh) and the release
# workflow both run it; the Dockerfile itself downloads nothing.
#
#   scripts/image-inputs.sh --out DIR [--arch amd64,arm64] [base] [tools] [wheels]
#
# (no part named: all three)
#
#   base    DIR/base-<arch>.tar: mmdebstrap --variant=essential of Debian
#           IMAGE_DEBIAN_SUITE with python3 (and its venv module), bash,
#           ca-certificates, jq and tini; merged /usr without the usrmerge
#           package (which would pull in perl); no apt, documentation, manuals,
#           translations or gconv modules. Cached by recipe in
#           AICR_RUNNER_IMAGE_CACHE (default ~/.cache/aicr-runner-image): made once
#           per recipe, so Debian's security updates arrive when the recipe
#           changes or the cache is cleared (the release runner starts empty).
#           A foreign architecture needs binfmt (qemu) on the host.
#   tools   DIR/tools/<arch>/image-tools: helm, kubectl, cosign and oras in one binary
#           (scripts/bootstrap-tools.sh image-tools; Go cross-compiles, no qemu).
#   wheels  DIR/wheels/<arch>/: every wheel of requirements.lock for CPython
#           IMAGE_PYTHON on manylinux <arch>, downloaded with --require-hashes,
#           and the aicr-runner wheel built from this checkout; DIR/requirements.lock.
#
# Network: the Debian archive (base), the Go module proxy and checksum database
# (tools, unless the Go module cache already holds every module), PyPI (wheels,
# unless pip's cache holds them). Nothing else.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source-path=SCRIPTDIR/.. source=tools/versions.env
source tools/versions.env

log() { printf 'image-inputs: %s\n' "$*" >&2; }
usage() {
  log "usage: scripts/image-inputs.sh --out DIR [--arch amd64[,arm64]] [base] [tools] [wheels]"
  exit 2
}

host_arch=$(dpkg --print-architecture 2>/dev/null || go env GOARCH)
arches=$host_arch out="" parts=()
while (($#)); do
  case "$1" in
    --out) out=${2:-}; shift 2 || usage ;;
    --arch) arches=${2:-}; shift 2 || usage ;;
    base | tools | wheels) parts+=("$1"); shift ;;
    *) log "unknown argument '$1'"; usage ;;
  esac
done
[[ -n $out ]] || usage
((${#parts[@]})) || parts=(base tools wheels)
IFS=, read -r -a arch_list <<<"$arches"
for arch in "${arch_list[@]}"; do
  case "$arch" in
    amd64 | arm64) ;;
    *) log "--arch: '$arch' is not a supported architecture (amd64, arm64)"; exit 2 ;;
  esac
done
mkdir -p "$out"

#: What the base holds besides Debian's Essential packages (libstdc++6: hyperscan, the relay's matcher, links it).
base_packages=python3,bash,ca-certificates,jq,tini,libstdc++6
mirrors=(
  "deb http://deb.debian.org/debian $IMAGE_DEBIAN_SUITE main"
  "deb http://deb.debian.org/debian $IMAGE_DEBIAN_SUITE-updates main"
  "deb http://deb.debian.org/debian-security $IMAGE_DEBIAN_SUITE-security main"
)
# Documentation, manuals, translations and glibc's iconv modules are left out
# (licences stay); nothing in the image reads them. (Python's standard library
# stays whole: python3.11's postinst compiles every file it lists.)
dpkg_opts=(
  path-exclude=/usr/share/doc/* path-include=/usr/share/doc/*/copyright
  path-exclude=/usr/share/man/* path-exclude=/usr/share/info/* path-exclude=/usr/share/locale/*
  path-exclude=/usr/share/lintian/* path-exclude=/usr/lib/*/gconv/*
)
# Packages only installing and logging in need go once every package is set up:
# perl-base (dpkg's maintainer scripts), openssl (update-ca-certificates; the
# bundle it wrote stays) and login (su, login; the image runs as 65532 and nobody
# logs in). Nothing at run time uses them: deploy.sh and its install scripts run
# bash, coreutils, grep, sed, awk, jq, helm and kubectl. dpkg removes them and
# records that, so the package list a scanner reads stays true. Python's own test
# suite and pydoc's help topics go too, as the official Python images drop them
# (after python3.11's postinst, which compiles every file it lists, has run).
purged_packages="perl-base openssl login"
cleanup_hook="chroot \"\$1\" dpkg --purge --force-remove-essential --force-depends $purged_packages >/dev/null
rm -rf \"\$1\"/var/cache/* \"\$1\"/var/log/* \"\$1\"/var/lib/apt/lists/* \"\$1\"/usr/lib/python3*/test \"\$1\"/usr/lib/python3*/pydoc_data"
#: What deploy.sh and the runner run; the check hook fails the base when one is missing.
runtime_commands="bash awk cat date dirname env grep jq ls mktemp python3 sed seq sleep sort tini tr"
check_hook="chroot \"\$1\" sh -c 'for c in $runtime_commands; do command -v \"\$c\" >/dev/null || { echo \"base: \$c is missing\" >&2; exit 1; }; done'"
merged_usr_hooks=/usr/share/mmdebstrap/hooks/merged-usr

make_base() { # ARCH
  local arch=$1 cache recipe target
  cache=${AICR_RUNNER_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aicr-runner-image}
  mkdir -p "$cache"
  recipe=$(printf '%s\n' essential "$base_packages" "${mirrors[@]}" "${dpkg_opts[@]}" merged-usr \
    "$cleanup_hook" "$runtime_commands" | sha256sum | cut -c1-12)
  target="$cache/base-$IMAGE_DEBIAN_SUITE-$arch-$recipe.tar"
  if [[ ! -f $target ]]; then
    command -v mmdebstrap >/dev/null || bash scripts/bootstrap-tools.sh debian >&2
    log "making the base for linux/$arch (mmdebstrap $IMAGE_DEBIAN_SUITE: $base_packages)"
    local started=$SECONDS sudo=()
    # Root mode: unprivileged user namespaces are refused on some runners.
    [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    "${sudo[@]}" mmdebstrap --quiet --mode=root --format=tar --keyring=/usr/share/keyrings/debian-archive-keyring.gpg --variant=essential --architectures="$arch" --include="$base_packages" \
      --hook-dir="$merged_usr_hooks" --skip=output/dev \
      "${dpkg_opts[@]/#/--dpkgopt=}" \
      --customize-hook="$cleanup_hook" \
      --customize-hook="$check_hook" \
      "$IMAGE_DEBIAN_SUITE" "$target.tmp" "${mirrors[@]}" >&2
    "${sudo[@]}" chown "$(id -u):$(id -g)" "$target.tmp"
    mv "$target.tmp" "$target"
    log "base for linux/$arch made in $((SECONDS - started))s"
  fi
  cp "$target" "$out/base-$arch.tar"
  printf '%s\n' "$target" >"$out/base-$arch.source"
}

make_tools() { # ARCH
  local arch=$1
  IMAGE_TOOLS_ARCH=$arch bash scripts/bootstrap-tools.sh image-tools >&2
  mkdir -p "$out/tools/$arch"
  cp ".tools/image/linux-$arch/image-tools" "$out/tools/$arch/image-tools"
}

# manylinux tags a wheel for Debian's glibc may carry (bookworm: 2.36); pip takes
# the list as given, so every level a locked wheel uses is named.
manylinux_tags() { # ARCH
  local machine level
  machine=$([[ $1 == arm64 ]] && echo aarch64 || echo x86_64)
  printf -- '--platform=manylinux2014_%s\n' "$machine"
  for level in 17 24 26 27 28 31 34 35 36; do printf -- '--platform=manylinux_2_%s_%s\n' "$level" "$machine"; done
}

make_wheels() { # ARCH
  local arch=$1 abi="cp${IMAGE_PYTHON/./}" platforms
  mapfile -t platforms < <(manylinux_tags "$arch")
  rm -rf "$out/wheels/$arch"
  mkdir -p "$out/wheels/$arch"
  log "downloading the locked wheels for CPython $IMAGE_PYTHON linux/$arch"
  .venv/bin/python -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
    --only-binary=:all: --implementation=cp --python-version="$IMAGE_PYTHON" --abi="$abi" --abi=abi3 --abi=none \
    "${platforms[@]}" --dest "$out/wheels/$arch" -r requirements.lock >&2
  if [[ -z $app_wheel ]]; then
    app_wheel=$(mktemp -d)
    .venv/bin/python -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$app_wheel" . >&2
  fi
  cp "$app_wheel"/aicr_runner-*.whl "$out/wheels/$arch/"
}

[[ -x .venv/bin/python ]] || bash scripts/setup.sh --python-only >&2
app_wheel=""
trap 'if [[ -n $app_wheel ]]; then rm -rf "$app_wheel"; fi' EXIT
for part in "${parts[@]}"; do
  for arch in "${arch_list[@]}"; do
    case "$part" in
      base) make_base "$arch" ;;
      tools) make_tools "$arch" ;;
      wheels) make_wheels "$arch" ;;
    esac
  done
done
[[ " ${parts[*]} " != *" wheels "* ]] || cp requirements.lock "$out/requirements.lock"
log "inputs for ${arch_list[*]} in $out: ${parts[*]}"
