"""Reading several clusters: one ``ClientKubeApi`` per kubeconfig context.

``aicr-runner fleet`` lists the verdict reports (and status ConfigMaps) of every
release in every context it is given. The kubeconfig is read once
(``kube.kubeconfig``); each context gets a client of its own (its server, its
credentials, an exec plugin's credential obtained under the context's deadline)
whose every request ends by that deadline, so one cluster that hangs cannot
hold the table. The official client's loader turns one context's entries into
a client configuration, as kubectl would; nothing is written back to the file.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from aicr_runner import logs
from aicr_runner.errors import RunnerError
from aicr_runner.kube.api import ClientKubeApi
from aicr_runner.kube.exec_plugin import ExecPluginError, credential_user
from aicr_runner.kube.kubeconfig import Kubeconfig
from aicr_runner.masking import has_userinfo, mask_userinfo

__all__ = ["ClusterReadError", "client_for_context", "list_objects"]


class ClusterReadError(RunnerError):
    """A cluster could not be read; ``kind`` says why: unreachable, forbidden, error."""

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def client_for_context(config: Kubeconfig, context: str, deadline: float) -> ClientKubeApi:
    """A client for ``context`` whose requests all end by ``deadline`` (``time.monotonic``)."""
    from kubernetes import client
    from kubernetes.config.kube_config import KubeConfigLoader

    entries = _entries(config, context, deadline)
    configuration = client.Configuration()
    try:
        loader = KubeConfigLoader(config_dict=entries, active_context=context, config_base_path=config.base)
        loader.load_and_set(configuration)
    except Exception as exc:  # the loader raises whatever a malformed entry makes it raise
        raise ClusterReadError(f"kubeconfig context unusable: {_first_line(exc)}", kind="error") from exc
    configuration.retries = False
    return ClientKubeApi(client.ApiClient(configuration), write_budget_seconds=max(0.1, deadline - time.monotonic()))


def _entries(config: Kubeconfig, context: str, deadline: float) -> dict[str, Any]:
    """The context, its cluster and its user as a kubeconfig of their own (an exec
    plugin replaced by the credential it gave)."""
    body = config.contexts[context]
    cluster_name, user_name = str(body.get("cluster") or ""), str(body.get("user") or "")
    if cluster_name not in config.clusters:
        raise ClusterReadError(f"kubeconfig context names cluster {cluster_name!r}, which is not defined", kind="error")
    cluster = config.clusters[cluster_name]
    server = str(cluster.get("server") or "")
    if has_userinfo(server):
        # A password may hold any character (``/``, ``#``): no URL parser can be
        # trusted with it, and every error it raises would quote a piece.
        raise ClusterReadError(
            f"the server URL {mask_userinfo(server)} holds a user or password; give it in the kubeconfig's user entry",
            kind="error",
        )
    user = dict(config.users.get(user_name) or {})
    plugin = user.pop("exec", None)
    if isinstance(plugin, Mapping):
        try:
            user.update(credential_user(plugin, cluster, deadline=deadline))
        except ExecPluginError as exc:
            raise ClusterReadError(str(exc), kind="unreachable" if exc.timed_out else "error") from exc
    return {
        "clusters": [{"name": cluster_name, "cluster": cluster}],
        "users": [{"name": user_name, "user": user}],
        "contexts": [{"name": context, "context": body}],
        "current-context": context,
    }


def list_objects(
    api: ClientKubeApi, what: str, path: str, selector: str, *, deadline: float, timeout: float
) -> list[Any] | None:
    """The items of a list across all namespaces (each as the API gave it: the
    rows check them), by the context's ``deadline``; None when the API is not served (404)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise ClusterReadError(f"listing {what}: no answer within the {timeout:g}s --timeout", kind="unreachable")
    try:
        body = api.request(
            f"listing {what}",
            "GET",
            path,
            path_params={},
            query_params=[("labelSelector", selector)],
            response_type="object",
            missing_ok=True,
            budget_seconds=remaining,
            budget_words=f"{timeout:g}s --timeout",
        )
    except RunnerError as exc:
        raise ClusterReadError(exc.message, kind=_kind(exc)) from exc
    if body is None:
        return None
    items = body.get("items") if isinstance(body, Mapping) else None
    if not isinstance(items, list):
        raise ClusterReadError(f"listing {what}: the answer is not a list of objects", kind="error")
    return items


def _kind(exc: RunnerError) -> str:
    if exc.http_status in (401, 403):
        return "forbidden"
    if exc.out_of_budget:
        return "unreachable"
    return "error"


def _first_line(exc: BaseException) -> str:
    return logs.redact((str(exc).splitlines() or [type(exc).__name__])[0])[:200]
