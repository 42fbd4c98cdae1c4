"""Chart values to runtime settings, for ``aicr-runner plan --values``.

Users try the same values file they will give ``helm install``. This maps the keys
that mean something outside a cluster onto the ``AICR_RUNNER_*`` environment the
chart renders; a test renders every example through the real chart and checks the
two agree. Cluster-only keys (Secrets, image, Job scheduling) are ignored: a local
plan takes credentials from the environment (``AICR_RUNNER_PACK__CREDENTIALS_FILE``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from aicr_runner.config import ENV_PREFIX
from aicr_runner.errors import ConfigError

__all__ = ["VALUE_TO_ENV", "env_from_values", "load_values_file"]

#: chart value path -> runtime variable (without the prefix)
VALUE_TO_ENV: dict[str, str] = {
    "service": "CRITERIA__SERVICE",
    "accelerator": "CRITERIA__ACCELERATOR",
    "intent": "CRITERIA__INTENT",
    "os": "CRITERIA__OS",
    "platform": "CRITERIA__PLATFORM",
    "dataPack": "PACK__REF",
    "dataPackPlainHTTP": "PACK__PLAIN_HTTP",
    "dataPackInsecureTLS": "PACK__INSECURE_TLS",
    "dataPackPullBudgetSeconds": "PACK__PULL_BUDGET_SECONDS",
    "aicrVersion": "AICR__VERSION",
    "aicrArch": "AICR__ARCH",
    "aicrSha256.amd64": "AICR__SHA256__AMD64",
    "aicrSha256.arm64": "AICR__SHA256__ARM64",
    "aicrReleaseBaseUrl": "AICR__RELEASE_BASE_URL",
    "aicrBinary.path": "AICR__BINARY",
    "aicrBinary.sha256": "AICR__BINARY_SHA256",
    "aicrDownload.attempts": "AICR__DOWNLOAD_ATTEMPTS",
    "aicrDownload.timeoutSeconds": "AICR__DOWNLOAD_TIMEOUT_SECONDS",
    "aicrDownload.budgetSeconds": "AICR__DOWNLOAD_BUDGET_SECONDS",
    "aicrProvenance.mode": "AICR__PROVENANCE__MODE",
    "aicrProvenance.identity": "AICR__PROVENANCE__IDENTITY",
    "aicrProvenance.issuer": "AICR__PROVENANCE__ISSUER",
    "aicrProvenance.trustedRoot": "AICR__PROVENANCE__TRUSTED_ROOT",
    "recipeFlags": "RECIPE__FLAGS",
    "recipeArgs": "RECIPE__ARGS",
    "recipeConfigMap": "RECIPE__CONFIGMAP",
    "recipe.expect.minComponents": "RECIPE__EXPECT__MIN_COMPONENTS",
    "recipe.expect.components": "RECIPE__EXPECT__COMPONENTS",
    "recipe.expect.overlays": "RECIPE__EXPECT__OVERLAYS",
    "bundleFlags": "BUNDLE__FLAGS",
    "bundleArgs": "BUNDLE__ARGS",
    "storageClass": "BUNDLE__STORAGE_CLASS",
    "deploy.enabled": "DEPLOY__ENABLED",
    "deployFlags": "DEPLOY__FLAGS",
    "deployArgs": "DEPLOY__ARGS",
    "deploy.failOnComponentFailure": "DEPLOY__FAIL_ON_COMPONENT_FAILURE",
    "environment.preinstalledDriver": "ENVIRONMENT__PREINSTALLED_DRIVER",
    "validate.enabled": "VALIDATE__ENABLED",
    "validate.phases": "VALIDATE__PHASES",
    "validate.failOnError": "VALIDATE__FAIL_ON_ERROR",
    "validate.emitEvidence": "VALIDATE__EMIT_EVIDENCE",
    "validate.resultConfigMap": "VALIDATE__RESULT_CONFIGMAP",
    "validate.evidenceConfigMap": "VALIDATE__EVIDENCE_CONFIGMAP",
    "validateFlags": "VALIDATE__FLAGS",
    "validateArgs": "VALIDATE__ARGS",
    "validate.publish.enabled": "VALIDATE__PUBLISH__ENABLED",
    "validate.publish.mode": "VALIDATE__PUBLISH__MODE",
    "validate.publish.ref": "VALIDATE__PUBLISH__REF",
    "validate.publish.failOnError": "VALIDATE__PUBLISH__FAIL_ON_ERROR",
    "validate.publish.insecureTLS": "VALIDATE__PUBLISH__INSECURE_TLS",
    "validate.publish.plainHTTP": "VALIDATE__PUBLISH__PLAIN_HTTP",
    "statusConfigMap": "STATUS_CONFIGMAP",
    "logFormat": "LOG_FORMAT",
    "kubeWriteBudgetSeconds": "KUBE_WRITE_BUDGET_SECONDS",
}


def _lookup(values: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = values
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _as_env(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, list):
        # The chart drops empty phases (anchor V-17); lists are JSON arrays.
        return json.dumps([item for item in value if item != ""])
    return str(value)


def env_from_values(values: Mapping[str, Any]) -> dict[str, str]:
    """The ``AICR_RUNNER_*`` variables for the keys ``values`` sets."""
    env: dict[str, str] = {}
    for dotted, name in VALUE_TO_ENV.items():
        present, value = _lookup(values, dotted)
        if present:
            env[ENV_PREFIX + name] = _as_env(value)
    return env


def load_values_file(path: Path) -> dict[str, Any]:
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError([f"--values {path}: {exc.strerror or exc}"]) from exc
    except yaml.YAMLError as exc:
        raise ConfigError([f"--values {path}: not valid YAML ({exc})"]) from exc
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ConfigError([f"--values {path}: must be a mapping of chart values, found {type(document).__name__}"])
    return document
