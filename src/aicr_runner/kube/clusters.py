"""Reading several clusters: one ``ClientKubeApi`` per kubeconfig context.

``aicr-runner fleet`` lists the verdict reports (and status ConfigMaps) of every
release in every context it is given. Each context gets a client of its own
(its server, its credentials) whose every request is bounded by the fleet's
timeout, so one cluster that hangs cannot hold the table. The kubeconfig is
read with the official client's loader, as kubectl reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aicr_runner.errors import ConfigError, RunnerError
from aicr_runner.kube.api import ClientKubeApi

__all__ = ["ClusterReadError", "client_for_context", "context_names", "list_objects"]


class ClusterReadError(RunnerError):
    """A cluster could not be read; ``kind`` says why: unreachable, forbidden, error."""

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Contexts:
    names: tuple[str, ...]
    current: str


def context_names(kubeconfig: str | None) -> Contexts:
    """The kubeconfig's context names and its current context; ConfigError when
    it cannot be read (the flag and the file named, no contents quoted)."""
    from kubernetes import config

    try:
        contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)
    except (config.ConfigException, OSError) as exc:
        where = kubeconfig or "the default kubeconfig (KUBECONFIG or ~/.kube/config)"
        raise ConfigError([f"--kubeconfig={where}: cannot be read ({_first_line(exc)})"]) from exc
    names = tuple(str(c["name"]) for c in contexts or ())
    return Contexts(names, str((current or {}).get("name", "")))


def client_for_context(kubeconfig: str | None, context: str, timeout: float) -> ClientKubeApi:
    """A client for ``context`` whose requests all end within ``timeout`` seconds."""
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    except (config.ConfigException, OSError) as exc:
        raise ClusterReadError(f"kubeconfig context unusable: {_first_line(exc)}", kind="error") from exc
    configuration.retries = False
    return ClientKubeApi(client.ApiClient(configuration), write_budget_seconds=timeout)


def list_objects(api: ClientKubeApi, what: str, path: str, selector: str) -> list[dict[str, Any]] | None:
    """The items of a list across all namespaces; None when the API is not served (404)."""
    try:
        body = api.request(
            f"listing {what}",
            "GET",
            path,
            path_params={},
            query_params=[("labelSelector", selector)],
            response_type="object",
            missing_ok=True,
        )
    except RunnerError as exc:
        # ``request`` words its budget for the run's writes; here it is fleet's --timeout.
        message = exc.message.replace("API write budget", "--timeout")
        raise ClusterReadError(message, kind=_kind(message)) from exc
    if body is None:
        return None
    return [dict(item) for item in body.get("items") or ()]


def _kind(message: str) -> str:
    if "HTTP 403" in message or "HTTP 401" in message:
        return "forbidden"
    if "gave up after" in message:
        return "unreachable"
    return "error"


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]
