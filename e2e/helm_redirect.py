"""What the real aicr's deploy.sh needs on this machine, shared by the scenarios
that run it in a pod (test_real_aicr, test_real_validators, test_revalidate,
test_kubernetes_floor): a helm wrapper that sends its chart requests to a local
chart repository, and the template of the stand-in charts that repository serves.
"""

from __future__ import annotations

__all__ = ["HELM_REDIRECT", "HELM_REDIRECT_DIR", "STAND_IN_TEMPLATE"]

#: Where the chart-redirecting helm sits in the pod (first on its PATH).
HELM_REDIRECT_DIR = "/opt/e2e-helm"
HELM_REDIRECT = r"""#!/usr/bin/env bash
# e2e only: aicr v0.11.1's deploy.sh installs charts from public repositories this
# machine cannot reach. Send each chart request to the local chart repository
# ($E2E_CHART_REPO: same chart names and versions), then run the image's helm.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The image's helm: the first one on PATH after this directory (what comes before
# it, e.g. the runner's helm guard, calls this script).
real="" after=false
IFS=: read -ra dirs <<< "${PATH}"
for dir in "${dirs[@]}"; do
  if [[ "${dir}" == "${here}" ]]; then after=true; continue; fi
  if ${after} && [[ -x "${dir}/helm" ]]; then real="${dir}/helm"; break; fi
done
[[ -n "${real}" ]] || { echo "e2e-helm: no helm after ${here} on PATH" >&2; exit 127; }
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --repo)
      echo "e2e-helm: chart repository $2 -> ${E2E_CHART_REPO}" >&2
      args+=(--repo "${E2E_CHART_REPO}"); shift 2 ;;
    oci://*)
      echo "e2e-helm: chart $1 -> ${E2E_CHART_REPO} (${1##*/})" >&2
      args+=("${1##*/}" --repo "${E2E_CHART_REPO}"); shift ;;
    *) args+=("$1"); shift ;;
  esac
done
exec "${real}" "${args[@]}"
"""
STAND_IN_TEMPLATE = """apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-stand-in
data:
  chart: "{{ .Chart.Name }}-{{ .Chart.Version }}"
  valuesKeys: {{ keys .Values | sortAlpha | join "," | quote }}
"""
