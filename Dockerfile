# syntax=docker/dockerfile:1.7
#
# The aicr-runner image: the Python runtime plus what aicr's deploy.sh needs
# (bash, helm, kubectl, jq) and cosign (aicr's provenance). Non-root (65532), made
# for a read-only root file system: the chart mounts emptyDirs at /tmp, /work and
# /home/aicr.
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t ghcr.io/<owner>/aicr-runner:0.1.0 .
#
# Release builds pin every input: the base image by digest, helm, kubectl and cosign by
# version and per-architecture sha256 (checked with sha256sum -c while building),
# and the Python dependencies come from PyPI within pyproject.toml's ranges. The
# release workflow (.github/workflows/release.yaml) refuses to build when the base
# digest does not resolve to a linux/amd64 + linux/arm64 index.
#
# Every network input can be replaced by a local one, so the same file builds on a
# machine without registry access (scripts/build-image.sh does this with podman):
#   --build-arg PYTHON_IMAGE=<local base>   a base with python3 (3.11), python3-venv
#                                           and, to skip apt, bash ca-certificates jq tini
#   --build-context tools=<dir>             replaces the "tools" stage: a directory
#                                           holding the binaries (helm, kubectl, cosign)
#   --build-context wheels=<dir>            replaces the "wheels" stage: a wheelhouse
#                                           with aicr-runner and all its dependencies
# A named build context replaces the stage of the same name (BuildKit and buildah
# both), and a replaced stage is never built, so nothing is downloaded.

# python:3.11-slim-bookworm, pinned by its multi-arch index digest. The digest
# was taken from public build files, not pulled from this repository's CI (which
# has no registry access); the release workflow checks it before building, and
# it is refreshed on purpose (edit here, or --build-arg PYTHON_IMAGE=...).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

# --- wheels: aicr-runner and its dependencies as wheels (release: from PyPI) -------
FROM ${PYTHON_IMAGE} AS wheels-download
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN python3 -m pip wheel --no-cache-dir --wheel-dir /wheels .

FROM scratch AS wheels
COPY --from=wheels-download /wheels/ /

# --- builder: the runtime in a venv, installed from the wheelhouse only ------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
COPY --from=wheels / /wheels/
# Bytecode is compiled here, once: under the read-only root Python cannot cache
# it, and without it every Job start compiles every module again (seconds of CPU
# on a busy node). unchecked-hash: the sources never change inside the image.
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --no-index --find-links /wheels aicr-runner \
 && /opt/venv/bin/pip uninstall --yes pip \
 && find /opt/venv -name __pycache__ -type d -prune -exec rm -rf {} + \
 && /opt/venv/bin/python -m compileall -q --invalidation-mode unchecked-hash /opt/venv/lib \
 && /opt/venv/bin/aicr-runner version

# --- tools: helm, kubectl and cosign for the target architecture, checksummed -----
FROM ${PYTHON_IMAGE} AS tools-download
ARG TARGETARCH
# helm v4, the line the test suite installs with (tools/versions.env HELM_VERSION).
# Its published per-architecture sha256 (get.helm.sh/helm-<version>-linux-<arch>.tar.gz.sha256sum)
# could not be read from where this file was last edited, so the pins are empty
# and the release build stops here until they are filled in: fail closed, never an
# unchecked download. Set them here or with --build-arg HELM_SHA256_AMD64=...
ARG HELM_VERSION=v4.3.1
ARG HELM_SHA256_AMD64=
ARG HELM_SHA256_ARM64=
# kubectl of the release line whose published checksums are pinned below; CI
# builds kubectl from k8s.io/kubernetes at the e2e API server's version instead.
ARG KUBECTL_VERSION=v1.34.1
ARG KUBECTL_SHA256_AMD64=7721f265e18709862655affba5343e85e1980639395d5754473dafaadcaa69e3
ARG KUBECTL_SHA256_ARM64=420e6110e3ba7ee5a3927b5af868d18df17aae36b720529ffa4e9e945aa95450
# cosign verifies aicr's Sigstore provenance offline before aicr runs
# (src/aicr_runner/provenance.py); the version is tools/versions.env COSIGN_VERSION.
# The sha256 of the release assets cosign-linux-<arch> were taken from public
# build files that pin them (several independent ones agree), not downloaded here.
ARG COSIGN_VERSION=v3.1.3
ARG COSIGN_SHA256_AMD64=4629c757b7618056f8ddd7e2625ae9fdd94c0372a65049520bc7d9df9efc7f71
ARG COSIGN_SHA256_ARM64=c5d324e091826b0d7a78eb16fef316450b4eb9aaec045611c08ba06f5e73220a
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /download
RUN case "${TARGETARCH}" in \
      amd64) helm_sha="${HELM_SHA256_AMD64}"; kubectl_sha="${KUBECTL_SHA256_AMD64}"; cosign_sha="${COSIGN_SHA256_AMD64}" ;; \
      arm64) helm_sha="${HELM_SHA256_ARM64}"; kubectl_sha="${KUBECTL_SHA256_ARM64}"; cosign_sha="${COSIGN_SHA256_ARM64}" ;; \
      *) echo "unsupported TARGETARCH '${TARGETARCH}' (amd64 or arm64)" >&2; exit 1 ;; \
    esac \
 && for pin in "helm ${HELM_VERSION} ${helm_sha}" "kubectl ${KUBECTL_VERSION} ${kubectl_sha}" "cosign ${COSIGN_VERSION} ${cosign_sha}"; do \
      read -r name version sha <<<"${pin}"; \
      if [[ ! "${sha}" =~ ^[0-9a-f]{64}$ ]]; then \
        echo "no sha256 pinned for ${name} ${version} linux/${TARGETARCH}: set --build-arg ${name^^}_SHA256_${TARGETARCH^^} to the published checksum" >&2; \
        exit 1; \
      fi; \
    done \
 && curl -fsSL --proto '=https' --tlsv1.2 --retry 3 -o helm.tar.gz \
      "https://get.helm.sh/helm-${HELM_VERSION}-linux-${TARGETARCH}.tar.gz" \
 && curl -fsSL --proto '=https' --tlsv1.2 --retry 3 -o kubectl \
      "https://dl.k8s.io/release/${KUBECTL_VERSION}/bin/linux/${TARGETARCH}/kubectl" \
 && curl -fsSL --proto '=https' --tlsv1.2 --retry 3 -o cosign \
      "https://github.com/sigstore/cosign/releases/download/${COSIGN_VERSION}/cosign-linux-${TARGETARCH}" \
 && printf '%s  helm.tar.gz\n%s  kubectl\n%s  cosign\n' "${helm_sha}" "${kubectl_sha}" "${cosign_sha}" > SHA256SUMS \
 && sha256sum -c SHA256SUMS \
 && tar -xzf helm.tar.gz "linux-${TARGETARCH}/helm" \
 && mkdir -p /out \
 && install -m 0755 "linux-${TARGETARCH}/helm" /out/helm \
 && install -m 0755 kubectl /out/kubectl \
 && install -m 0755 cosign /out/cosign

# The binaries at the root of a stage of their own, the layout a local
# "--build-context tools=<dir>" provides. A new tool is added here and there.
FROM scratch AS tools
COPY --from=tools-download /out/ /

# --- runtime -------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ARG PYTHON_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="aicr-runner" \
      org.opencontainers.image.description="Runs NVIDIA AI Cluster Runtime (aicr) end to end inside a Kubernetes Job" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# bash, kubectl and helm for aicr's deploy.sh (jq enables its webhook and
# APIService pre-flight checks); tini as PID 1 to forward signals and reap.
# Only what the base lacks is installed, so a base that already has them (the
# local one scripts/build-image.sh makes) needs no package download.
RUN packages=(bash ca-certificates jq tini) missing=() \
 && for package in "${packages[@]}"; do \
      [[ "$(dpkg-query -W -f='${Status}' "${package}" 2>/dev/null)" == "install ok installed" ]] || missing+=("${package}"); \
    done \
 && if ((${#missing[@]})); then \
      apt-get update \
      && apt-get install -y --no-install-recommends "${missing[@]}" \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && command -v bash jq tini >/dev/null \
 && mkdir -p /home/aicr /work \
 && chown 65532:65532 /home/aicr /work
COPY --from=builder /opt/venv /opt/venv
COPY --from=tools /helm /kubectl /cosign /usr/local/bin/
# Writable locations under a read-only root: HOME and every cache live in
# /home/aicr, scratch in /tmp, the run in /work (emptyDirs in the Job).
ENV PATH=/opt/venv/bin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/home/aicr \
    TMPDIR=/tmp \
    XDG_CACHE_HOME=/home/aicr/.cache \
    HELM_CACHE_HOME=/home/aicr/.cache/helm \
    HELM_CONFIG_HOME=/home/aicr/.config/helm \
    HELM_DATA_HOME=/home/aicr/.local/share/helm \
    KUBECACHEDIR=/home/aicr/.kube/cache \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    AICR_RUNNER_WORK_DIR=/work
# Numeric, so the kubelet can prove runAsNonRoot.
USER 65532:65532
WORKDIR /work
ENTRYPOINT ["tini", "--", "aicr-runner"]
CMD ["run"]
