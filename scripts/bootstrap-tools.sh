#!/usr/bin/env bash
# Builds the pinned test tools (tools/versions.env) into .tools/bin.
#
# Idempotent: a tool whose stamp matches its pinned version is left alone. Builds
# are also cached outside the clone (AICR_RUNNER_TOOLS_CACHE, default
# ~/.cache/aicr-runner-tools), so a fresh clone on the same machine copies them
# instead of compiling again. Go's own module and build caches make a rebuild
# after a version bump incremental.
#
# Usage: scripts/bootstrap-tools.sh [helm|oras|etcd|kube-apiserver|aicr|debian ...]
#        (no argument: everything)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../tools/versions.env
source "$root/tools/versions.env"

bin="$root/.tools/bin"
cache="${AICR_RUNNER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aicr-runner-tools}"
mkdir -p "$bin" "$cache"
export GOFLAGS="${GOFLAGS:--mod=mod}"
export CGO_ENABLED="${CGO_ENABLED:-0}"

log() { printf 'bootstrap: %s\n' "$*" >&2; }

have() { # have NAME VERSION: the stamped binary is already in place
  [[ -x "$bin/$1" && -f "$bin/.$1.version" && "$(cat "$bin/.$1.version")" == "$2" ]]
}

install_from_cache() { # NAME VERSION
  local cached="$cache/$1-$2"
  [[ -x "$cached" ]] || return 1
  cp "$cached" "$bin/$1.tmp" && mv "$bin/$1.tmp" "$bin/$1"
  printf '%s' "$2" >"$bin/.$1.version"
  log "$1 $2 (from cache)"
}

finish() { # NAME VERSION BUILT_PATH
  cp "$3" "$cache/$1-$2.tmp" && mv "$cache/$1-$2.tmp" "$cache/$1-$2"
  mv "$3" "$bin/$1"
  printf '%s' "$2" >"$bin/.$1.version"
}

# go_build NAME MODULE VERSION PACKAGE [REPLACE_MAP]
# Builds PACKAGE from MODULE@VERSION in a throwaway wrapper module. Modules whose
# go.mod replaces sibling modules with local paths (kubernetes staging, etcd) cannot
# be built with `go install pkg@version`; REPLACE_MAP says how to turn each local
# replacement into a published module version:
#   k8s-staging  ./staging/src/k8s.io/X  -> k8s.io/X v0.<minor>.<patch>
#   siblings     ../api                  -> <module>/../api at the same version
go_build() {
  local name=$1 module=$2 version=$3 package=$4 map=${5:-}
  have "$name" "$version" && { log "$name $version (up to date)"; return 0; }
  install_from_cache "$name" "$version" && return 0
  log "building $name $version from $package (this takes a while the first time)"
  local started=$SECONDS work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  (
    cd "$work"
    go mod init aicr-runner-tools/"$name" >/dev/null 2>&1
    if [[ -n "$map" ]]; then
      local gomod
      gomod=$(go mod download -json "$module@$version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
      case "$map" in
        k8s-staging)
          local staging="v0.${version#v1.}"
          sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/.*#\1#p' "$gomod" |
            while read -r m; do echo "replace $m => $m $staging"; done >>go.mod
          ;;
        siblings)
          local base=${module%/server/v3}
          sed -n 's#^\s*\(go.etcd.io/etcd/[a-z0-9/]*\) => \.\./.*#\1#p' "$gomod" |
            while read -r m; do echo "replace $m => $m $version"; done >>go.mod
          : "$base"
          ;;
      esac
    fi
    go get "$module@$version" >/dev/null
    go build -trimpath -ldflags "-s -w" -o "$work/$name" "$package"
  )
  finish "$name" "$version" "$work/$name"
  log "$name $version built in $((SECONDS - started))s"
}

debian() {
  local missing=()
  for p in $DEBIAN_PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "installing Debian packages: ${missing[*]}"
    local sudo=""
    [[ $(id -u) -eq 0 ]] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  # Debian's registry package starts a system service on install; the tests run
  # their own instances on loopback, so the packaged one must not hold port 5000.
  if command -v systemctl >/dev/null 2>&1; then systemctl disable --now docker-registry >/dev/null 2>&1 || true; fi
  pkill -f '^/usr/bin/docker-registry serve /etc/docker/registry/config.yml' 2>/dev/null || true
  ln -sf "$(command -v docker-registry)" "$bin/docker-registry"
}

aicr() {
  have aicr "$AICR_VERSION" && return 0
  install_from_cache aicr "$AICR_VERSION" && return 0
  local m
  for m in $AICR_MODULES; do
    if GOFLAGS= GOBIN="$bin" go install "$m@$AICR_VERSION" 2>"$cache/aicr-install.err"; then
      printf '%s' "$AICR_VERSION" >"$bin/.aicr.version"
      cp "$bin/aicr" "$cache/aicr-$AICR_VERSION"
      log "aicr $AICR_VERSION built from $m"
      return 0
    fi
    log "aicr: go install $m@$AICR_VERSION failed: $(tail -n 1 "$cache/aicr-install.err")"
  done
  log "aicr: no module path is served; tests use the contract-faithful fake (tests/fake_aicr)"
}

kube_apiserver() {
  if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "$KUBEBUILDER_ASSETS/kube-apiserver" && -x "$KUBEBUILDER_ASSETS/etcd" ]]; then
    log "using etcd and kube-apiserver from KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
    return 0
  fi
  go_build etcd "$ETCD_MODULE" "$ETCD_VERSION" "$ETCD_PACKAGE" siblings
  go_build kube-apiserver "$KUBERNETES_MODULE" "$KUBERNETES_VERSION" "$KUBE_APISERVER_PACKAGE" k8s-staging
}

want=("$@")
((${#want[@]})) || want=(debian helm oras actionlint aicr kube-apiserver)
for t in "${want[@]}"; do
  case "$t" in
    helm) go_build helm "$HELM_MODULE" "$HELM_VERSION" "$HELM_PACKAGE" ;;
    oras) go_build oras "$ORAS_MODULE" "$ORAS_VERSION" "$ORAS_PACKAGE" ;;
    actionlint) go_build actionlint "$ACTIONLINT_MODULE" "$ACTIONLINT_VERSION" "$ACTIONLINT_PACKAGE" ;;
    etcd | kube-apiserver) kube_apiserver ;;
    aicr) aicr ;;
    debian) debian ;;
    *) echo "bootstrap: unknown tool '$t' (allowed: debian helm oras actionlint aicr etcd kube-apiserver)" >&2; exit 2 ;;
  esac
done
