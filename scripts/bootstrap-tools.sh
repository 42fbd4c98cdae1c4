#!/usr/bin/env bash
# Builds the pinned test tools (tools/versions.env) into .tools/bin.
#
# Idempotent: a tool whose stamp matches its pinned version (and build recipe) is
# left alone. Builds are also cached outside the clone (AICR_RUNNER_TOOLS_CACHE,
# default ~/.cache/aicr-runner-tools), so a fresh clone on the same machine copies
# them instead of compiling again. Go's own module and build caches make a rebuild
# after a version bump incremental. Tools build BOOTSTRAP_JOBS at a time (default
# 2); a lock per tool in the cache directory lets concurrent runs (the test
# script's lanes, parallel test sessions) wait for a tool another is building
# instead of building it twice. --base names the tools every suite but the
# end-to-end one needs, --e2e the rest, --recipe the programs only the whole
# recipe's e2e test runs (as images under their published names).
#
# Usage: scripts/bootstrap-tools.sh [--base|--e2e|helm|helm3|oras|actionlint|cosign|etcd|kube-apiserver|
#        kube-apiserver-floor|kube-controller-manager|kubectl|kubelet|kube-scheduler|pause|source-controller|helm-controller|flux-crds|argocd-crds|report-crds|
#        sveltos-crds|kube-state-metrics|promtool|npm|aicr|debian|
#        --recipe|node-exporter|nfd-master|nfd-worker|nfd-gc|nfd-config|prometheus-operator|
#        prometheus-config-reloader|prometheus|alertmanager|amtool|prometheus-adapter|image-tools ...]
#        (no argument: every test tool; image-tools, the image's binary, only when named)
#
# IMAGE_TOOLS_ARCH (amd64 or arm64; default this machine's) picks the architecture
# image-tools is built for, into .tools/image/linux-<arch>/.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source-path=SCRIPTDIR/.. source=tools/versions.env
source "$root/tools/versions.env"

bin="$root/.tools/bin"
cache="${AICR_RUNNER_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/aicr-runner-tools}"
mkdir -p "$bin" "$cache"
export GOFLAGS="${GOFLAGS:--mod=mod}"
export CGO_ENABLED="${CGO_ENABLED:-0}"

log() { printf 'bootstrap: %s\n' "$*" >&2; }

# BOOTSTRAP_JOBS tools build at once (default 2: a Go build keeps about one core and
# a half busy, and its module downloads and single-threaded link leave the rest
# idle). A lock per tool in the cache directory: two bootstraps (the test script's
# two lanes, parallel pytest sessions) never build the same tool twice, and one
# that needs only helm3 never waits for an API server to compile.
jobs=${BOOTSTRAP_JOBS:-2}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { log "BOOTSTRAP_JOBS must be a whole number from 1, not '$jobs'"; exit 2; }
# Debug information is stripped at link time (-s -w); not generating it at compile
# time saves the compiler that work.
gcflags="all=-dwarf=false"

# A build recipe id: empty for a plain `go build`, else a short hash of the extra
# linker flags. It is part of the cache file name and stamped next to the version,
# so changing how a tool is built rebuilds it even at the same version.
recipe_id() { [[ -z "$1" ]] || printf '%s' "$1" | sha256sum | cut -c1-12; }

have() { # have NAME VERSION [RECIPE]: the stamped binary is already in place
  [[ -x "$bin/$1" && -f "$bin/.$1.version" && "$(cat "$bin/.$1.version")" == "$2" ]] &&
    [[ "$(cat "$bin/.$1.recipe" 2>/dev/null || true)" == "${3:-}" ]]
}

stamp() { # NAME VERSION RECIPE
  printf '%s' "$2" >"$bin/.$1.version"
  if [[ -n "$3" ]]; then printf '%s' "$3" >"$bin/.$1.recipe"; else rm -f "$bin/.$1.recipe"; fi
}

cache_name() { printf '%s/%s-%s%s' "$cache" "$1" "$2" "${3:+-$3}"; }

install_from_cache() { # NAME VERSION RECIPE
  local cached
  cached=$(cache_name "$@")
  [[ -x "$cached" ]] || return 1
  cp "$cached" "$bin/$1.tmp" && mv "$bin/$1.tmp" "$bin/$1"
  stamp "$@"
  log "$1 $2 (from cache)"
}

# go_build NAME MODULE VERSION PACKAGE [REPLACE_MAP [LDFLAGS [PINS [TAGS]]]]
# Builds PACKAGE from MODULE@VERSION in a throwaway wrapper module. Modules whose
# go.mod replaces sibling modules with local paths (kubernetes staging, etcd) cannot
# be built with `go install pkg@version`; REPLACE_MAP says how to turn each local
# replacement into a published module version:
#   k8s-staging  ./staging/src/k8s.io/X  -> k8s.io/X v0.<minor>.<patch>
#   siblings     ../api                  -> go.etcd.io/etcd/api/v3 at the same version
# LDFLAGS are extra linker flags (version stamps the upstream Makefiles set).
# PINS ("module=version ...") replace dependency versions the module proxy does not
# serve with the nearest one it does (tools/versions.env says which and why).
# TAGS are Go build tags (upstream's own switches, such as Prometheus' remove_all_sd).
go_build() {
  local name=$1 module=$2 version=$3 package=$4 map=${5:-} xflags=${6:-} pins=${7:-} tags=${8:-}
  local recipe
  recipe=$(recipe_id "$xflags${pins:+ pins: $pins}${tags:+ tags: $tags} gcflags: $gcflags")
  have "$name" "$version" "$recipe" && { log "$name $version (up to date)"; return 0; }
  install_from_cache "$name" "$version" "$recipe" && return 0
  log "building $name $version from $package (this takes a while the first time)"
  (
    started=$SECONDS
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    cd "$work"
    go mod init aicr-runner-tools/"$name" >/dev/null 2>&1
    if [[ -n "$map" ]]; then
      gomod=$(go mod download -json "$module@$version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
      case "$map" in
        k8s-staging)
          staging="v0.${version#v1.}"
          sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/.*#\1#p' "$gomod" |
            while read -r m; do echo "replace $m => $m $staging"; done >>go.mod
          ;;
        siblings)
          sed -n 's#^\s*\(go.etcd.io/etcd/[a-z0-9/]*\) => \.\./.*#\1#p' "$gomod" |
            while read -r m; do echo "replace $m => $m $version"; done >>go.mod
          ;;
        replaces)
          # Every replace directive of the module, as its own build would apply it
          # (a dependency's replaces are ignored by Go): ./sub becomes the published
          # MODULE/sub at the same version; the others are copied as they are.
          go mod edit -json "$gomod" | python3 -c '
import json, sys
module, version = sys.argv[1], sys.argv[2]
for r in json.load(sys.stdin).get("Replace") or []:
    old, new = r["Old"], r["New"]
    lhs = old["Path"] + (" " + old["Version"] if old.get("Version") else "")
    if new["Path"].startswith("./"):
        rhs = module + "/" + new["Path"][2:] + " " + version
    elif new["Path"].startswith("../"):
        continue
    else:
        rhs = new["Path"] + (" " + new["Version"] if new.get("Version") else "")
    print(f"replace {lhs} => {rhs}")
' "$module" "$version" >>go.mod
          ;;
        *) log "unknown replace map '$map'"; exit 2 ;;
      esac
    fi
    local pin
    for pin in $pins; do echo "replace ${pin%%=*} => ${pin%%=*} ${pin#*=}" >>go.mod; done
    go get "$module@$version" >/dev/null
    go build -trimpath -gcflags "$gcflags" ${tags:+-tags "$tags"} -ldflags "-s -w $xflags" -o "$work/$name" "$package"
    cached=$(cache_name "$name" "$version" "$recipe")
    cp "$work/$name" "$cached.tmp" && mv "$cached.tmp" "$cached"
    mv "$work/$name" "$bin/$name"
    stamp "$name" "$version" "$recipe"
    log "$name $version built in $((SECONDS - started))s"
  )
}

# The version stamps upstream release builds carry. Without them kube-apiserver
# reports v0.0.0-master (which fails every chart's kubeVersion constraint and
# .Capabilities checks) and `helm version` says v4.3 instead of the patch release.
# Helm 3 also takes the Kubernetes version of `helm template` and `helm lint` from
# its Makefile (client-go's minor; without it both assume v1.20.0 and refuse every
# chart with a newer kubeVersion floor). Helm 4 reads it from its build info.
helm_ldflags() { # MAJOR VERSION
  printf -- '-X helm.sh/helm/%s/internal/version.version=%s -X helm.sh/helm/%s/internal/version.gitTreeState=clean' \
    "$1" "$2" "$1"
  if [[ $1 == v3 ]]; then
    local gomod client_go minor pkg
    gomod=$(go mod download -json "helm.sh/helm/v3@$2" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    client_go=$(sed -n 's#^\s*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$gomod")
    [[ -n $client_go ]] || { log "helm3: no k8s.io/client-go in $gomod"; exit 1; }
    for pkg in lint/rules chartutil; do
      printf -- ' -X helm.sh/helm/v3/pkg/%s.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/%s.k8sVersionMinor=%s' \
        "$pkg" "$pkg" "$client_go"
    done
  fi
}

kube_ldflags() { # [VERSION] (default KUBERNETES_VERSION)
  local version=${1:-$KUBERNETES_VERSION}
  local v=${version#v} out="" pkg
  local major=${v%%.*} rest=${v#*.}
  local minor=${rest%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    out+="-X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor "
    out+="-X $pkg.gitTreeState=clean "
  done
  printf '%s' "${out% }"
}

# helm, kubectl, cosign and oras as one binary for the image (tools/image-tools/main.go):
# the four share most of their code, which one binary holds once. One wrapper
# module requires the four pinned modules (go.sum-verified against the checksum
# database, as every build here); kubectl's staging modules are pinned to its
# release as for the API server, and Go's minimal version selection picks one
# version of every shared dependency (the newest any of the four requires). The
# version stamps are those of each tool's release build.
image_tools() {
  local arch=${IMAGE_TOOLS_ARCH:-$(go env GOARCH)}
  case "$arch" in
    amd64 | arm64) ;;
    *) log "image-tools: IMAGE_TOOLS_ARCH must be amd64 or arm64, not '$arch'"; exit 2 ;;
  esac
  local version="helm-$HELM_VERSION.kubectl-$KUBERNETES_VERSION.cosign-$COSIGN_VERSION.oras-$ORAS_VERSION"
  local xflags
  xflags="$(helm_ldflags v4 "$HELM_VERSION") $(kube_ldflags) -X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION"
  local recipe
  recipe=$(recipe_id "$xflags $(sha256sum "$root/tools/image-tools/main.go" | cut -c1-64) linux/$arch")
  local dest="$root/.tools/image/linux-$arch" cached
  cached=$(cache_name image-tools "$version" "$recipe")
  # helm, kubectl, cosign and oras's links and the image build all ask for it: one build.
  exec 7>"$cache/.lock.image-tools-$arch"
  flock 7
  if [[ -x "$dest/image-tools" && "$(cat "$dest/.image-tools.recipe" 2>/dev/null || true)" == "$version $recipe" ]]; then
    log "image-tools linux/$arch (up to date)"
    return 0
  fi
  mkdir -p "$dest"
  if [[ ! -x "$cached" ]]; then
    log "building image-tools ($version) for linux/$arch (this takes a while the first time)"
    (
      started=$SECONDS
      work=$(mktemp -d)
      trap 'rm -rf "$work"' EXIT
      cd "$work"
      cp "$root/tools/image-tools/main.go" .
      go mod init aicr-runner-tools/image-tools >/dev/null 2>&1
      gomod=$(go mod download -json "$KUBERNETES_MODULE@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
      sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/.*#\1#p' "$gomod" |
        while read -r m; do echo "replace $m => $m v0.${KUBERNETES_VERSION#v1.}"; done >>go.mod
      go get "$HELM_MODULE@$HELM_VERSION" "$KUBERNETES_MODULE@$KUBERNETES_VERSION" "$COSIGN_MODULE@$COSIGN_VERSION" \
        "$ORAS_MODULE@$ORAS_VERSION" >/dev/null
      GOOS=linux GOARCH=$arch go build -trimpath -ldflags "-s -w $xflags" -o "$work/image-tools" .
      cp "$work/image-tools" "$cached.tmp" && mv "$cached.tmp" "$cached"
      log "image-tools linux/$arch built in $((SECONDS - started))s"
    )
  fi
  cp "$cached" "$dest/image-tools.tmp" && mv "$dest/image-tools.tmp" "$dest/image-tools"
  printf '%s' "$version $recipe" >"$dest/.image-tools.recipe"
}

# helm, kubectl, cosign and oras for the tests are the image's own binary (image-tools
# for this machine's architecture), hard-linked under each name: the tests run
# exactly the tools the image ships, and a cold bootstrap compiles their shared
# code once instead of four times (about 13 minutes on 2 cores).
image_tool() { # NAME VERSION
  local arch version_recipe
  arch=$(go env GOARCH)
  IMAGE_TOOLS_ARCH=$arch image_tools
  version_recipe=$(cat "$root/.tools/image/linux-$arch/.image-tools.recipe")
  have "$1" "$2" "image-tools $version_recipe" && { log "$1 $2 (image-tools, up to date)"; return 0; }
  ln -f "$root/.tools/image/linux-$arch/image-tools" "$bin/$1.tmp" && mv -f "$bin/$1.tmp" "$bin/$1"
  stamp "$1" "$2" "image-tools $version_recipe"
  log "$1 $2 (image-tools linux/$arch)"
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
  # Stop it through its own init script (pidfile), never by process name.
  if command -v systemctl >/dev/null 2>&1 && [[ -d /run/systemd/system ]]; then
    systemctl disable --now docker-registry >/dev/null 2>&1 || true
  elif [[ -x /etc/init.d/docker-registry ]] && /etc/init.d/docker-registry status >/dev/null 2>&1; then
    /etc/init.d/docker-registry stop >/dev/null 2>&1 || true
  fi
  ln -sf "$(command -v docker-registry)" "$bin/docker-registry"
}

aicr() {
  have aicr "$AICR_VERSION" && return 0
  install_from_cache aicr "$AICR_VERSION" "" && return 0
  local m
  for m in $AICR_MODULES; do
    if GOFLAGS='' GOBIN="$bin" go install "$m@$AICR_VERSION" 2>"$cache/aicr-install.err"; then
      stamp aicr "$AICR_VERSION" ""
      cp "$bin/aicr" "$(cache_name aicr "$AICR_VERSION" "")"
      log "aicr $AICR_VERSION built from $m"
      return 0
    fi
    log "aicr: go install $m@$AICR_VERSION failed: $(tail -n 1 "$cache/aicr-install.err")"
  done
  log "aicr: no module path is served for the pin; tests use the contract-faithful fake (tests/fake_aicr) for it and the prebuilt real v0.11.1 from AICR_TEST_RELEASES_DIR"
}

# Flux's CRDs, from the same module versions as the controllers.
flux_crds() {
  local dest="$root/.tools/flux-crds"
  local stamp_value="$SOURCE_CONTROLLER_VERSION $HELM_CONTROLLER_VERSION $KUSTOMIZE_CONTROLLER_VERSION"
  [[ -f "$dest/.version" && "$(cat "$dest/.version")" == "$stamp_value" ]] && { log "flux CRDs (up to date)"; return 0; }
  rm -rf "$dest" && mkdir -p "$dest"
  local m dir
  for m in "$SOURCE_CONTROLLER_MODULE@$SOURCE_CONTROLLER_VERSION" "$HELM_CONTROLLER_MODULE@$HELM_CONTROLLER_VERSION" \
    "$KUSTOMIZE_CONTROLLER_MODULE@$KUSTOMIZE_CONTROLLER_VERSION"; do
    dir=$(go mod download -json "$m" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
    cp "$dir"/config/crd/bases/*.yaml "$dest/"
  done
  chmod u+w "$dest"/*.yaml
  printf '%s' "$stamp_value" >"$dest/.version"
  log "flux CRDs copied ($(find "$dest" -name '*.yaml' | wc -l) files)"
}

# module_dir MODULE VERSION WHAT: the directory of the module's source in Go's module
# cache (downloaded from the module proxy when missing), for copying files of it.
module_dir() {
  local dir
  dir=$(go mod download -json "$1@$2" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [[ -n "$dir" ]] || { log "$3: go mod download $1@$2 gave no directory"; return 1; }
  printf '%s' "$dir"
}

# Argo CD's CRDs (Application, AppProject, ApplicationSet) from its Go module:
# only the YAML files of manifests/crds are copied; nothing is built from it.
# The module proxy's copy in the Go module cache is the cache, as for Flux's.
argocd_crds() {
  local dest="$root/.tools/argocd-crds" dir
  [[ -f "$dest/.version" && "$(cat "$dest/.version")" == "$ARGOCD_VERSION" ]] && { log "argo cd CRDs (up to date)"; return 0; }
  rm -rf "$dest" && mkdir -p "$dest"
  dir=$(module_dir "$ARGOCD_MODULE" "$ARGOCD_VERSION" "argo cd CRDs") || exit 1
  cp "$dir"/manifests/crds/*-crd.yaml "$dest/"
  chmod u+w "$dest"/*.yaml
  printf '%s' "$ARGOCD_VERSION" >"$dest/.version"
  log "argo cd CRDs copied ($(find "$dest" -name '*.yaml' | wc -l) files)"
}

# The report CRDs (docs/reports.md): OpenReports' from its Go module's config/crd,
# wgpolicyk8s.io/v1alpha2's from Kyverno's config/crds/policyreport; only the YAML
# files are copied, into openreports/ and wgpolicy/; nothing is built.
report_crds() {
  local dest="$root/.tools/report-crds" stamp_value="$OPENREPORTS_VERSION $KYVERNO_VERSION" dir
  [[ -f "$dest/.version" && "$(cat "$dest/.version")" == "$stamp_value" ]] && { log "report CRDs (up to date)"; return 0; }
  rm -rf "$dest" && mkdir -p "$dest/openreports" "$dest/wgpolicy"
  dir=$(module_dir "$OPENREPORTS_MODULE" "$OPENREPORTS_VERSION" "report CRDs") || exit 1
  cp "$dir"/config/crd/openreports.io_*.yaml "$dest/openreports/"
  dir=$(module_dir "$KYVERNO_MODULE" "$KYVERNO_VERSION" "report CRDs") || exit 1
  cp "$dir"/config/crds/policyreport/wgpolicyk8s.io_*.yaml "$dest/wgpolicy/"
  chmod u+w "$dest"/*/*.yaml
  printf '%s' "$stamp_value" >"$dest/.version"
  log "report CRDs copied ($(find "$dest" -name '*.yaml' | wc -l) files)"
}

# Sveltos' HealthCheck CRD from libsveltos' Go module (config/crd/bases); only
# that YAML file is copied; nothing is built.
sveltos_crds() {
  local dest="$root/.tools/sveltos-crds" dir
  [[ -f "$dest/.version" && "$(cat "$dest/.version")" == "$LIBSVELTOS_VERSION" ]] && { log "sveltos CRDs (up to date)"; return 0; }
  rm -rf "$dest" && mkdir -p "$dest"
  dir=$(module_dir "$LIBSVELTOS_MODULE" "$LIBSVELTOS_VERSION" "sveltos CRDs") || exit 1
  cp "$dir"/config/crd/bases/lib.projectsveltos.io_healthchecks.yaml "$dest/"
  chmod u+w "$dest"/*.yaml
  printf '%s' "$LIBSVELTOS_VERSION" >"$dest/.version"
  log "sveltos CRDs copied ($(find "$dest" -name '*.yaml' | wc -l) files)"
}

# Prometheus v3.X.Y is published as its module's v0.3XX.Y: prometheus_release v0.310.0 says 3.10.0.
prometheus_release() {
  local minor=${1#v0.} patch=${1##*.}
  minor=${minor%%.*}
  printf '%s.%s.%s' "${minor:0:1}" "$((10#${minor:1}))" "$patch"
}

# NFD's worker configuration example, which its published image carries at
# /etc/kubernetes/node-feature-discovery/nfd-worker.conf (the chart mounts its own there).
nfd_config() {
  local dest="$root/.tools/nfd-config" dir
  [[ -f "$dest/.version" && "$(cat "$dest/.version")" == "$NFD_VERSION" ]] && { log "nfd-config (up to date)"; return 0; }
  rm -rf "$dest" && mkdir -p "$dest"
  dir=$(module_dir "$NFD_MODULE" "$NFD_VERSION" "nfd-config") || exit 1
  cp "$dir"/deployment/components/worker-config/nfd-worker.conf.example "$dest/nfd-worker.conf"
  chmod u+w "$dest/nfd-worker.conf"
  printf '%s' "$NFD_VERSION" >"$dest/.version"
  log "nfd-config copied"
}

# npm packages used as test material (not code): cached tarballs in .tools/npm.
npm_material() {
  local dest="$root/.tools/npm" spec=$SIGSTORE_NPM_PACKAGE
  local file="$dest/${spec%@*}-${spec##*@}.tgz"
  [[ -f "$file" ]] && { log "$spec (up to date)"; return 0; }
  mkdir -p "$dest"
  if [[ -f "$cache/${file##*/}" ]]; then
    cp "$cache/${file##*/}" "$file"
  else
    (cd "$dest" && npm pack --silent "$spec" >/dev/null)
    cp "$file" "$cache/"
  fi
  log "$spec (npm tarball)"
}

etcd() {
  if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "$KUBEBUILDER_ASSETS/kube-apiserver" && -x "$KUBEBUILDER_ASSETS/etcd" ]]; then
    log "using etcd from KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
    return 0
  fi
  go_build etcd "$ETCD_MODULE" "$ETCD_VERSION" "$ETCD_PACKAGE" siblings
}

# kube-apiserver, kube-controller-manager, kubelet and kube-scheduler: one module at
# one version, so one `go build` of the four packages compiles their shared code
# once and links them side by side (envtest convention: KUBEBUILDER_ASSETS, when it
# holds the API server and etcd, wins over the API server and controller-manager
# builds). Each binary is cached and stamped on its own, as go_build does.
kube_family() {
  local xflags recipe name missing=() packages=()
  xflags=$(kube_ldflags)
  recipe=$(recipe_id "$xflags gcflags: $gcflags")
  local -A package_of=([kube-apiserver]=$KUBE_APISERVER_PACKAGE [kube-controller-manager]=$KUBE_CONTROLLER_MANAGER_PACKAGE
    [kubelet]=$KUBELET_PACKAGE [kube-scheduler]=$KUBE_SCHEDULER_PACKAGE)
  for name in kube-apiserver kube-controller-manager kubelet kube-scheduler; do
    if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "$KUBEBUILDER_ASSETS/$name" && -x "$KUBEBUILDER_ASSETS/etcd" ]]; then
      log "using $name from KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
      continue
    fi
    have "$name" "$KUBERNETES_VERSION" "$recipe" && { log "$name $KUBERNETES_VERSION (up to date)"; continue; }
    install_from_cache "$name" "$KUBERNETES_VERSION" "$recipe" && continue
    missing+=("$name")
    packages+=("${package_of[$name]}")
  done
  ((${#missing[@]})) || return 0
  log "building ${missing[*]} $KUBERNETES_VERSION in one go build (this takes a while the first time)"
  (
    started=$SECONDS
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    cd "$work"
    go mod init aicr-runner-tools/kube >/dev/null 2>&1
    gomod=$(go mod download -json "$KUBERNETES_MODULE@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/.*#\1#p' "$gomod" |
      while read -r m; do echo "replace $m => $m v0.${KUBERNETES_VERSION#v1.}"; done >>go.mod
    go get "$KUBERNETES_MODULE@$KUBERNETES_VERSION" >/dev/null
    mkdir out
    go build -trimpath -gcflags "$gcflags" -ldflags "-s -w $xflags" -o out/ "${packages[@]}"
    for name in "${missing[@]}"; do
      cached=$(cache_name "$name" "$KUBERNETES_VERSION" "$recipe")
      cp "out/$name" "$cached.tmp" && mv "$cached.tmp" "$cached"
      mv "out/$name" "$bin/$name"
      stamp "$name" "$KUBERNETES_VERSION" "$recipe"
    done
    log "${missing[*]} $KUBERNETES_VERSION built in $((SECONDS - started))s"
  )
}

# The API server of the oldest Kubernetes minor the chart supports (the floor of
# IMAGE_KUBERNETES_MINORS), built like the current one, under a name carrying its
# minor (kube-apiserver-1.33): the e2e floor tests run the chart's install and a
# whole run against it. Only the API server: controllers and a node of the image's
# minor would be outside their skew against it, and the floor tests need neither.
kube_apiserver_floor() {
  local v=${KUBE_APISERVER_FLOOR_VERSION#v} minor
  minor=${v%.*}
  go_build "kube-apiserver-$minor" "$KUBERNETES_MODULE" "$KUBE_APISERVER_FLOOR_VERSION" "$KUBE_APISERVER_PACKAGE" \
    k8s-staging "$(kube_ldflags "$KUBE_APISERVER_FLOOR_VERSION")"
}

# The sandbox ("pause") image's program: public registries are unreachable, so
# the node's sandbox image is this static binary (tools/pause/main.go) in an
# image the e2e harness builds.
pause() {
  local recipe
  recipe=$(sha256sum "$root/tools/pause/main.go" | cut -c1-12)
  have pause "$PAUSE_VERSION" "$recipe" && { log "pause (up to date)"; return 0; }
  (
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    cp "$root/tools/pause/main.go" "$work/"
    cd "$work"
    go mod init aicr-runner-tools/pause >/dev/null 2>&1
    go build -trimpath -ldflags "-s -w" -o "$bin/pause" .
  )
  stamp pause "$PAUSE_VERSION" "$recipe"
  log "pause $PAUSE_VERSION (built)"
}

# Named sets, so the test script can start the tools only the end-to-end suite
# needs in a lane of their own while the rest of the suite runs.
base_set=(debian helm helm3 oras actionlint cosign kubectl aicr promtool npm flux-crds argocd-crds report-crds sveltos-crds)
e2e_set=(kube-apiserver kube-apiserver-floor kube-controller-manager kubelet kube-scheduler etcd pause source-controller
  helm-controller kube-state-metrics)
recipe_set=(node-exporter nfd-master nfd-worker nfd-gc nfd-config prometheus-operator prometheus-config-reloader
  prometheus alertmanager amtool prometheus-adapter)
all_targets="${base_set[*]} ${e2e_set[*]} ${recipe_set[*]} image-tools"

want=()
for t in "$@"; do
  case "$t" in
    --base) want+=("${base_set[@]}") ;;
    --e2e) want+=("${e2e_set[@]}") ;;
    --recipe) want+=("${recipe_set[@]}") ;;
    *) want+=("$t") ;;
  esac
done
((${#want[@]})) || want=("${base_set[@]}" "${e2e_set[@]}")

# job_of TARGET: the job that provides it (several targets share one build).
job_of() {
  case "$1" in
    helm | kubectl | cosign | oras) echo image-tool-links ;;
    kube-apiserver | kube-controller-manager | kubelet | kube-scheduler) echo kube ;;
    nfd-master | nfd-worker | nfd-gc) echo nfd ;;
    prometheus-operator | prometheus-config-reloader) echo prometheus-operator ;;
    alertmanager | amtool) echo alertmanager ;;
    *) echo "$1" ;;
  esac
}

run_job() {
  case "$1" in
    image-tool-links)
      image_tool helm "$HELM_VERSION"
      image_tool kubectl "$KUBERNETES_VERSION"
      image_tool cosign "$COSIGN_VERSION"
      image_tool oras "$ORAS_VERSION"
      ;;
    kube) kube_family ;;
    helm3)
      flags=$(helm_ldflags v3 "$HELM3_VERSION") # its own statement: a failure stops the job
      go_build helm3 "$HELM3_MODULE" "$HELM3_VERSION" "$HELM3_PACKAGE" "" "$flags"
      ;;
    pause) pause ;;
    source-controller)
      go_build source-controller "$SOURCE_CONTROLLER_MODULE" "$SOURCE_CONTROLLER_VERSION" "$SOURCE_CONTROLLER_MODULE" \
        replaces "" "$SOURCE_CONTROLLER_PINS"
      ;;
    helm-controller)
      go_build helm-controller "$HELM_CONTROLLER_MODULE" "$HELM_CONTROLLER_VERSION" "$HELM_CONTROLLER_MODULE" replaces
      ;;
    flux-crds) flux_crds ;;
    argocd-crds) argocd_crds ;;
    report-crds) report_crds ;;
    sveltos-crds) sveltos_crds ;;
    npm) npm_material ;;
    actionlint) go_build actionlint "$ACTIONLINT_MODULE" "$ACTIONLINT_VERSION" "$ACTIONLINT_PACKAGE" ;;
    # The version its release build stamps (its Makefile): it is in the User-Agent
    # of every request and in `kube-state-metrics version`, as the published image's.
    kube-state-metrics)
      go_build kube-state-metrics "$KUBE_STATE_METRICS_MODULE" "$KUBE_STATE_METRICS_VERSION" "$KUBE_STATE_METRICS_MODULE" \
        "" "-X github.com/prometheus/common/version.Version=$KUBE_STATE_METRICS_VERSION"
      ;;
    # promtool needs none of Prometheus' service discovery: upstream's remove_all_sd
    # tag leaves out the cloud SDKs, most of its build.
    # The version stamps of their release builds (node_exporter's .promu.yml, NFD's
    # Makefile). NFD's published image is its "minimal" variant, whose build reads the
    # node's files under /host-<path> (the chart mounts them there).
    node-exporter)
      go_build node-exporter "$NODE_EXPORTER_MODULE" "$NODE_EXPORTER_VERSION" "$NODE_EXPORTER_MODULE" \
        "" "-X github.com/prometheus/common/version.Version=${NODE_EXPORTER_VERSION#v}"
      ;;
    nfd)
      local program
      for program in nfd-master nfd-worker nfd-gc; do
        go_build "$program" "$NFD_MODULE" "$NFD_VERSION" "$NFD_MODULE/cmd/$program" replaces \
          "-X $NFD_MODULE/pkg/version.version=$NFD_VERSION -X $NFD_MODULE/pkg/utils/hostpath.pathPrefix=/host-"
      done
      ;;
    nfd-config) nfd_config ;;
    prometheus-operator)
      local flags="-X github.com/prometheus/common/version.Version=${PROMETHEUS_OPERATOR_VERSION#v}"
      go_build prometheus-operator "$PROMETHEUS_OPERATOR_MODULE" "$PROMETHEUS_OPERATOR_VERSION" \
        "$PROMETHEUS_OPERATOR_MODULE/cmd/operator" replaces "$flags"
      go_build prometheus-config-reloader "$PROMETHEUS_OPERATOR_MODULE" "$PROMETHEUS_OPERATOR_VERSION" \
        "$PROMETHEUS_OPERATOR_MODULE/cmd/prometheus-config-reloader" replaces "$flags"
      ;;
    prometheus)
      local release
      release=$(prometheus_release "$PROMETHEUS_SERVER_VERSION")
      go_build prometheus "$PROMETHEUS_MODULE" "$PROMETHEUS_SERVER_VERSION" "$PROMETHEUS_MODULE/cmd/prometheus" \
        replaces "-X github.com/prometheus/common/version.Version=$release" "" "$PROMETHEUS_SERVER_TAGS"
      ;;
    # Its Makefile stamps no version.
    prometheus-adapter)
      go_build prometheus-adapter "$PROMETHEUS_ADAPTER_MODULE" "$PROMETHEUS_ADAPTER_VERSION" \
        "$PROMETHEUS_ADAPTER_MODULE/cmd/adapter"
      ;;
    alertmanager)
      local program
      for program in alertmanager amtool; do
        go_build "$program" "$ALERTMANAGER_MODULE" "$ALERTMANAGER_VERSION" "$ALERTMANAGER_MODULE/cmd/$program" "" \
          "-X github.com/prometheus/common/version.Version=${ALERTMANAGER_VERSION#v}"
      done
      ;;
    promtool) go_build promtool "$PROMETHEUS_MODULE" "$PROMETHEUS_VERSION" "$PROMTOOL_PACKAGE" "" "" "" remove_all_sd ;;
    etcd) etcd ;;
    kube-apiserver-floor) kube_apiserver_floor ;;
    aicr) aicr ;;
    debian) debian ;;
    image-tools) image_tools ;;
  esac
}

# The longest builds first, so the last job to start is a short one.
job_order=(kube image-tool-links image-tools kube-apiserver-floor source-controller prometheus nfd kube-state-metrics
  helm-controller helm3 promtool prometheus-operator prometheus-adapter alertmanager node-exporter etcd actionlint debian pause aicr npm flux-crds argocd-crds report-crds sveltos-crds
  nfd-config)
declare -A wanted=()
for t in "${want[@]}"; do
  if [[ " $all_targets " != *" $t "* ]]; then
    echo "bootstrap: unknown tool '$t' (allowed: --base --e2e --recipe $all_targets)" >&2
    exit 2
  fi
  wanted[$(job_of "$t")]=1
done

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
declare -A running=()
failed=()
reap() { # wait for one job; its log goes out whole, not interleaved with the others'
  local pid rc=0
  wait -n -p pid "${!running[@]}" || rc=$?
  cat "$logs/${running[$pid]}.log" >&2
  ((rc == 0)) || failed+=("${running[$pid]} (exit $rc)")
  unset "running[$pid]"
}
for job in "${job_order[@]}"; do
  [[ -n ${wanted[$job]:-} ]] || continue
  while ((${#running[@]} >= jobs)); do reap; done
  (
    exec 8>"$cache/.lock.$job"
    if ! flock -n 8; then
      log "$job: another bootstrap is providing it; waiting for it"
      flock 8
    fi
    run_job "$job"
  ) >"$logs/$job.log" 2>&1 &
  running[$!]=$job
done
while ((${#running[@]})); do reap; done
if ((${#failed[@]})); then
  log "failed: ${failed[*]}"
  exit 1
fi
