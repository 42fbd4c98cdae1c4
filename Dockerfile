# syntax=docker/dockerfile:1.7
#
# The aicr-runner image: the Python runtime plus what aicr's deploy.sh needs
# (bash, helm, kubectl, jq), cosign (aicr's provenance) and oras (`aicr-runner
# mirror` copies with it). Non-root (65532), made
# for a read-only root file system: the chart mounts emptyDirs at /tmp, /work and
# /home/aicr.
#
# Nothing is downloaded while building: the build context is the directory that
# scripts/image-inputs.sh makes from the pins in tools/versions.env, per target
# architecture (amd64, arm64):
#
#   base-<arch>.tar        Debian <IMAGE_DEBIAN_SUITE> made with mmdebstrap (python3,
#                          bash, ca-certificates, jq, tini; no apt, pip, perl, docs
#                          or locales)
#   tools/<arch>/image-tools  helm, kubectl, cosign and oras in one Go binary, built from
#                          their pinned Go modules (go.sum-verified), -trimpath, -s -w
#   wheels/<arch>/         the wheels of requirements.lock (sha256-pinned; pip among
#                          them) and of aicr-runner itself
#   requirements.lock
#
#   bash scripts/image-inputs.sh --arch amd64,arm64 --out build/image
#   docker buildx build --platform linux/amd64,linux/arm64 -f Dockerfile build/image
#
# scripts/build-image.sh does both for this machine's architecture with podman;
# .github/workflows/release.yaml does both for the release.

# --- base: the Debian root file system of the target architecture --------------------
FROM scratch AS base
ARG TARGETARCH
ADD base-${TARGETARCH}.tar /

# --- venv: the runtime in /opt/venv, from the locked wheels only ------------------------
FROM base AS venv
ARG TARGETARCH
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
COPY requirements.lock /build/requirements.lock
COPY wheels/${TARGETARCH}/ /build/wheels/
# The base has no pip: the venv is made without one, and pip runs from its own
# wheel, which requirements.lock pins like every other. The dependencies are
# installed from the lock with --require-hashes (a wheel whose sha256 is not in
# it is refused), aicr-runner from its own wheel (built from this commit's src/);
# then pip leaves the venv. Bytecode is compiled here, once: under the read-only
# root Python cannot cache it, and without it every Job start compiles every
# module again. unchecked-hash: the sources never change inside the image.
# The kubernetes client's generated API and model modules (about 700 files) ship
# as bytecode only, without docstrings (-o 2): the runner imports them but calls
# none (it sends plain dicts through ApiClient.call_api), and their sources and
# docstrings would more than double their size. pydantic, pydantic-core and
# pydantic-settings (the settings model) ship the same way, and without
# pydantic.v1, the pydantic 1 API nothing here imports: about 3.4 MB less.
# Every other dependency ships as bytecode only too, with its docstrings and
# asserts (about 5 MB less): nothing reads their sources, and the runner shows
# no tracebacks. The runner's own modules keep theirs.
# tzdata (python-dateutil's fallback time-zone database, 2.8 MB) is uninstalled
# the way pip is: nothing here asks for a named zone (every time is UTC, and the
# API server's timestamps parse to fixed offsets), and its record leaves with it.
# aicr-runner's own files then move to /app, a layer of their own: a release
# that changes only the runner re-pulls that layer, not the dependencies.
RUN python3 -m venv --without-pip /opt/venv \
 && pip_wheel=$(echo /build/wheels/pip-*.whl) \
 && /opt/venv/bin/python "${pip_wheel}/pip" install --no-index --no-deps --require-hashes --only-binary=:all: \
      --find-links /build/wheels -r /build/requirements.lock \
 && /opt/venv/bin/python -m pip install --no-index --no-deps /build/wheels/aicr_runner-*.whl \
 && /opt/venv/bin/python -m pip uninstall --yes tzdata pip \
 && find /opt/venv -name __pycache__ -type d -prune -exec rm -rf {} + \
 && site=$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
 && rm -rf "${site}/pydantic/v1" \
 && set -- "${site}/kubernetes/client/api" "${site}/kubernetes/client/models" \
      "${site}/pydantic" "${site}/pydantic_core" "${site}/pydantic_settings" \
 && /opt/venv/bin/python -m compileall -q -b -o 2 --invalidation-mode unchecked-hash "$@" \
 && find "$@" -name '*.py' -delete \
 && /opt/venv/bin/python -m compileall -q -b -x '/aicr_runner/' --invalidation-mode unchecked-hash "${site}" \
 && find "${site}" -name '*.py' -not -path '*/aicr_runner/*' -delete \
 && /opt/venv/bin/python -m compileall -q --invalidation-mode unchecked-hash /opt/venv/lib \
 && /opt/venv/bin/python -c 'import kubernetes.client' \
 && /opt/venv/bin/python -c 'from aicr_runner.settings.config import load; load({"AICR_RUNNER_CRITERIA__ACCELERATOR": "h100"})' \
 && /opt/venv/bin/aicr-runner version \
 && ! ls /opt/venv/bin/pip* "${site}"/pip "${site}"/setuptools "${site}"/tzdata 2>/dev/null \
 && mkdir -p "/app${site}" /app/opt/venv/bin \
 && mv "${site}/aicr_runner" "${site}"/aicr_runner-*.dist-info "/app${site}/" \
 && mv /opt/venv/bin/aicr-runner /app/opt/venv/bin/

# --- tools: the binary and its four names, as the runtime stage copies them -----------
FROM base AS tools
ARG TARGETARCH
COPY tools/${TARGETARCH}/image-tools /out/usr/local/bin/image-tools
RUN for tool in helm kubectl cosign oras; do ln /out/usr/local/bin/image-tools "/out/usr/local/bin/${tool}"; done

# --- runtime -------------------------------------------------------------------------
FROM base
ARG TARGETARCH
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
ARG BASE_NAME=unknown
LABEL org.opencontainers.image.title="aicr-runner" \
      org.opencontainers.image.description="Runs NVIDIA AI Cluster Runtime (aicr) end to end inside a Kubernetes Job" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="${BASE_NAME}"
# helm, kubectl and cosign for aicr's deploy.sh and the provenance check, oras for
# the mirror: hard links to the one binary that holds all four (it picks the tool by the name it
# runs as), one layer. Hard, not symbolic: a file mounted over /usr/local/bin/helm
# (a wrapper) then replaces helm alone, not the binary the others share.
COPY --from=tools /out/ /
# bash, jq (deploy.sh's webhook and APIService pre-flight checks) and tini (PID 1:
# forwards signals, reaps) come with the base; the check fails the build if not.
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN command -v bash jq tini python3 helm kubectl cosign oras >/dev/null \
 && mkdir -p /home/aicr /work \
 && chown 65532:65532 /home/aicr /work
COPY --from=venv /opt/venv /opt/venv
COPY --from=venv /app/ /
# Native extensions load against the base's libraries (hyperscan needs libstdc++):
# a missing one fails the build here, not the first deploy that floods the relay
# or the first release fetch (zlib-ng).
RUN /opt/venv/bin/python -c "import hyperscan, yaml._yaml, zlib_ng.zlib_ng"
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
