# syntax=docker/dockerfile:1.7
#
# The aicr-runner image: the Python runtime plus what aicr's deploy.sh needs
# (bash, helm, kubectl, jq). Non-root (65532), made for a read-only root file
# system: the chart mounts emptyDirs at /tmp, /work and /home/aicr.
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t ghcr.io/<owner>/aicr-runner:0.1.0 .
#
# Every input is pinned: the base image by digest, helm and kubectl by version
# and per-architecture sha256 (checked with sha256sum -c while building).
# The release workflow (.github/workflows/release.yaml) refuses to build when
# the base digest does not resolve to a linux/amd64 + linux/arm64 index.

# python:3.11-slim-bookworm, pinned by its multi-arch index digest. The digest
# was taken from public build files, not pulled from this repository's CI (which
# has no registry access); the release workflow checks it before building, and
# it is refreshed on purpose (edit here, or --build-arg PYTHON_IMAGE=...).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

# --- builder: the runtime and its dependencies in a venv --------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/venv
COPY pyproject.toml README.md ./
COPY src ./src
RUN /opt/venv/bin/pip install --no-cache-dir . \
 && find /opt/venv -name __pycache__ -type d -prune -exec rm -rf {} + \
 && /opt/venv/bin/aicr-runner version

# --- tools: helm and kubectl for the target architecture, checksummed -------------
FROM ${PYTHON_IMAGE} AS tools
ARG TARGETARCH
# helm 3.19 is what the replaced chart's runtime image and CI used with aicr's
# deploy.sh. The test suite installs with helm v4 (tools/versions.env); move the
# image to v4 together with its published per-arch checksums.
ARG HELM_VERSION=v3.19.0
ARG HELM_SHA256_AMD64=a7f81ce08007091b86d8bd696eb4d86b8d0f2e1b9f6c714be62f82f96a594496
ARG HELM_SHA256_ARM64=440cf7add0aee27ebc93fada965523c1dc2e0ab340d4348da2215737fc0d76ad
ARG KUBECTL_VERSION=v1.34.1
ARG KUBECTL_SHA256_AMD64=7721f265e18709862655affba5343e85e1980639395d5754473dafaadcaa69e3
ARG KUBECTL_SHA256_ARM64=420e6110e3ba7ee5a3927b5af868d18df17aae36b720529ffa4e9e945aa95450
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /download
RUN case "${TARGETARCH}" in \
      amd64) helm_sha="${HELM_SHA256_AMD64}"; kubectl_sha="${KUBECTL_SHA256_AMD64}" ;; \
      arm64) helm_sha="${HELM_SHA256_ARM64}"; kubectl_sha="${KUBECTL_SHA256_ARM64}" ;; \
      *) echo "unsupported TARGETARCH '${TARGETARCH}' (amd64 or arm64)" >&2; exit 1 ;; \
    esac \
 && curl -fsSL --proto '=https' --tlsv1.2 --retry 3 -o helm.tar.gz \
      "https://get.helm.sh/helm-${HELM_VERSION}-linux-${TARGETARCH}.tar.gz" \
 && curl -fsSL --proto '=https' --tlsv1.2 --retry 3 -o kubectl \
      "https://dl.k8s.io/release/${KUBECTL_VERSION}/bin/linux/${TARGETARCH}/kubectl" \
 && printf '%s  helm.tar.gz\n%s  kubectl\n' "${helm_sha}" "${kubectl_sha}" > SHA256SUMS \
 && sha256sum -c SHA256SUMS \
 && tar -xzf helm.tar.gz "linux-${TARGETARCH}/helm" \
 && mkdir -p /out \
 && install -m 0755 "linux-${TARGETARCH}/helm" /out/helm \
 && install -m 0755 kubectl /out/kubectl

# --- runtime -------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="aicr-runner" \
      org.opencontainers.image.description="Runs NVIDIA AI Cluster Runtime (aicr) end to end inside a Kubernetes Job" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11-slim-bookworm"
# bash, kubectl and helm for aicr's deploy.sh (jq enables its webhook and
# APIService pre-flight checks); tini as PID 1 to forward signals and reap.
RUN apt-get update \
 && apt-get install -y --no-install-recommends bash ca-certificates jq tini \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /home/aicr /work \
 && chown 65532:65532 /home/aicr /work
COPY --from=builder /opt/venv /opt/venv
COPY --from=tools /out/helm /out/kubectl /usr/local/bin/
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
