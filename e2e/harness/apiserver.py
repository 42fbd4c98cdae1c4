"""etcd + kube-apiserver + kube-controller-manager on loopback: RBAC on, a real
ServiceAccount token issuer, the real Job controller (see controllers.py).

The node (node/: containerd, a real kubelet and kube-scheduler) runs the pods.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from ipaddress import ip_network
from pathlib import Path
from typing import Any

import yaml

from e2e.harness.controllers import start_controller_manager
from e2e.harness.kube import Kube, KubeError
from e2e.harness.pki import CertAuthority, KeyPair, write_signing_key
from e2e.harness.procs import ManagedProcess, StartupError, free_port, wait_for
from e2e.harness.tools import tool

__all__ = ["AUDIT_POLICY", "ISSUER", "ControlPlane", "start_control_plane"]

ISSUER = "https://kubernetes.default.svc.cluster.local"
#: The Service range of a control plane that runs no node (TEST-NET-3, RFC 5737):
#: nothing connects to it. A plane with a node takes its slot's range
#: (``HostNetwork.service_cidr``), which the slot's rules redirect and fence.
NO_NODE_SERVICE_CIDR = "203.0.113.0/28"
#: The API server's audit policy: every request of a ServiceAccount outside
#: kube-system (the pods the tests run: the runner, its helm and kubectl), at
#: Metadata level, one line per request (when its response ended). The controllers
#: (kube-system ServiceAccounts), the node and the tests' admin are left out, so the
#: log stays small enough to keep on for every session (e2e/test_load.py counts a
#: run's requests from it).
AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [
        {"level": "None", "userGroups": ["system:serviceaccounts:kube-system"]},
        {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
        {"level": "None"},
    ],
}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass
class ControlPlane:
    host: str
    port: int
    workdir: Path
    ca_file: Path
    ca_pem: bytes
    kubeconfig: Path
    admin: Kube
    processes: list[ManagedProcess] = field(default_factory=list)
    startup_seconds: float = 0.0
    #: of which kube-controller-manager, from its start until its controllers acted
    controller_manager_seconds: float = 0.0
    #: the cluster CA (issues the node's kubelet and kube-scheduler certificates)
    ca: CertAuthority | None = None
    #: ``--service-cluster-ip-range``; its first address is the ``kubernetes`` Service's
    service_cidr: str = NO_NODE_SERVICE_CIDR

    @property
    def service_ip(self) -> str:
        return _first_address(self.service_cidr)

    #: the API server's audit log (JSON lines, ``AUDIT_POLICY``)
    audit_log: Path | None = None

    def audit_offset(self) -> int:
        """Where the audit log ends now: ``audit_events(since=...)`` reads what comes after."""
        assert self.audit_log is not None
        return self.audit_log.stat().st_size if self.audit_log.exists() else 0

    def audit_events(self, since: int = 0) -> list[dict[str, Any]]:
        """The audit events logged after byte ``since`` (``AUDIT_POLICY``:
        ServiceAccounts outside kube-system), oldest first; a line the API server
        is still writing is left out."""
        assert self.audit_log is not None
        if not self.audit_log.exists():
            return []
        with self.audit_log.open("rb") as log:
            log.seek(since)
            lines = log.read().split(b"\n")
        return [json.loads(line) for line in lines[:-1] if line.strip()]

    def audit_events_until_now(self, since: int = 0, *, timeout: float = 30.0) -> list[dict[str, Any]]:
        """``audit_events(since)`` once every request that ended before this call is
        in the log: a marker request (the ``default`` ServiceAccount of ``default``
        reading a ConfigMap that does not exist, refused) is waited for, and left out."""
        marker = f"audit-marker-{secrets.token_hex(4)}"
        with contextlib.suppress(KubeError):
            self.client(self.token("default", "default", seconds=600)).get(
                f"/api/v1/namespaces/default/configmaps/{marker}"
            )

        def logged() -> list[dict[str, Any]] | None:
            events = self.audit_events(since)
            names = [(event.get("objectRef") or {}).get("name") for event in events]
            return events[: names.index(marker)] if marker in names else None

        return wait_for(logged, timeout=timeout, what=f"the audit log's marker request {marker}")

    def cert_kubeconfig(self, path: Path, user: str, groups: list[str] | None = None) -> Path:
        """A kubeconfig for ``user`` (in ``groups``) with a client certificate from the cluster CA."""
        assert self.ca is not None
        return _cert_kubeconfig(path, self.url, self.ca_pem, self.ca.client(user, groups), user)

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    # -- identities ---------------------------------------------------------
    def token(
        self,
        namespace: str,
        service_account: str,
        *,
        seconds: int = 3600,
        audiences: list[str] | None = None,
    ) -> str:
        """A token for the ServiceAccount from the TokenRequest API (what a kubelet mounts)."""
        spec: dict[str, Any] = {"expirationSeconds": seconds}
        if audiences:
            spec["audiences"] = audiences
        review = self.admin.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        return str(review["status"]["token"])

    def client(self, token: str) -> Kube:
        """An API client that authenticates with ``token`` only."""
        return Kube(self.url, self.ca_file, token=token)

    def kubernetes_client(self, token: str) -> Any:
        """The Python ``kubernetes`` client the runtime uses, authenticating with
        ``token`` only (what the runner's in-cluster config amounts to)."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        configuration.ssl_ca_cert = str(self.ca_file)
        configuration.api_key = {"authorization": f"Bearer {token}"}
        return client.ApiClient(configuration)

    def write_kubeconfig(self, path: Path, *, token: str, user: str = "token-user") -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {"server": self.url, "certificate-authority-data": _b64(self.ca_pem)},
                }
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
            "current-context": "e2e",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    # -- objects scenarios need ---------------------------------------------
    def create_secret(
        self,
        namespace: str,
        name: str,
        *,
        string_data: dict[str, str],
        type: str = "Opaque",
    ) -> dict[str, Any]:
        return self.admin.create(
            f"/api/v1/namespaces/{namespace}/secrets",
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": type, "stringData": string_data},
        )

    def create_dockerconfig_secret(self, namespace: str, name: str, dockerconfigjson: str) -> dict[str, Any]:
        """A ``kubernetes.io/dockerconfigjson`` Secret (what ``kubectl create secret
        docker-registry`` makes), e.g. from ``Registry.dockerconfigjson()``."""
        return self.create_secret(
            namespace, name, string_data={".dockerconfigjson": dockerconfigjson}, type="kubernetes.io/dockerconfigjson"
        )

    def configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ConfigMap, or None when it does not exist."""
        try:
            return self.admin.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    # -- namespaces ---------------------------------------------------------
    def ensure_namespace(self, name: str, labels: dict[str, str] | None = None, *, timeout: float = 60.0) -> None:
        """Create the namespace (if needed) and wait for what kube-controller-manager
        adds to it: the ``default`` ServiceAccount and ``kube-root-ca.crt``."""
        with contextlib.suppress(KubeError):
            self.admin.create(
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}},
            )
        self.admin.get(f"/api/v1/namespaces/{name}")

        def furnished() -> bool | None:
            sa = self.admin.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default")
            return True if sa and self.admin.exists(f"/api/v1/namespaces/{name}/configmaps/kube-root-ca.crt") else None

        wait_for(furnished, timeout=timeout, what=f"namespace {name}: default ServiceAccount and kube-root-ca.crt")

    def create_namespace(self, name: str) -> None:
        """Create the namespace and return: for a control plane without controllers
        (nothing adds a ``default`` ServiceAccount or ``kube-root-ca.crt``)."""
        self.admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    # -- outages ------------------------------------------------------------
    def _apiserver(self) -> ManagedProcess:
        return next(proc for proc in self.processes if proc.name == "kube-apiserver")

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver only (etcd and the controller manager keep running),
        as an outage or an API server upgrade does."""
        self._apiserver().stop()

    @contextlib.contextmanager
    def apiserver_silent(self) -> Iterator[None]:
        """kube-apiserver SIGSTOPped for the block: its sockets stay open and its
        port keeps accepting connections (the kernel completes the handshake),
        but nothing answers, as a hung or overloaded API server. SIGCONT after,
        then wait until it answers and its controllers act again, so the next
        test meets a working control plane."""
        pid = self._apiserver().pid
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)
            self._recover_after_silence()

    def _recover_after_silence(self) -> None:
        self.admin.drop_connections()

        def ready() -> bool | None:
            status, _ = self.admin.raw_get("/readyz")
            return True if status == 200 else None

        wait_for(ready, timeout=60.0, what="kube-apiserver /readyz after SIGCONT")
        # As after a restart (start_apiserver): kube-controller-manager's watches may
        # have broken while the API server was stopped.
        self.ensure_namespace(f"after-silence-{secrets.token_hex(4)}", timeout=120.0)

    def start_apiserver(self, timeout: float = 60.0) -> None:
        """Start kube-apiserver again on the same port with the same flags and
        state (etcd); return once /readyz answers ok."""
        old = self._apiserver()
        if old.alive():
            raise RuntimeError("kube-apiserver is running; stop it first")
        new = ManagedProcess(old.name, old.argv, old.log_path)
        self.processes[self.processes.index(old)] = new
        self.admin.drop_connections()

        def ready() -> bool | None:
            status, _ = self.admin.raw_get("/readyz")  # refused while it starts: wait_for retries
            return True if status == 200 else None

        wait_for(ready, timeout=timeout, what="kube-apiserver /readyz after a restart", alive=new.alive)
        # kube-controller-manager's watches broke with the outage, and client-go
        # re-lists with a backoff that reaches 30 s: the next test's namespace would
        # wait for it. Wait here, where the outage is, until its controllers act again.
        self.ensure_namespace(f"after-outage-{secrets.token_hex(4)}", timeout=120.0)

    def stop(self) -> None:
        for proc in reversed(self.processes):
            proc.stop()
        self.processes.clear()


def _start_etcd(workdir: Path, timeout: float) -> tuple[ManagedProcess, str]:
    """etcd on two free loopback ports (retried if a port was taken meanwhile)."""
    for attempt in range(3):
        client, peer = free_port(), free_port()
        url = f"http://127.0.0.1:{client}"
        proc = ManagedProcess(
            "etcd",
            [
                tool("etcd"),
                "--name=e2e",
                f"--data-dir={workdir / f'etcd-data.{attempt}'}",
                f"--listen-client-urls={url}",
                f"--advertise-client-urls={url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=e2e=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
            workdir / f"etcd.{attempt}.log",
        )
        try:
            wait_for(partial(_http_ok, f"{url}/health"), timeout=timeout, what="etcd", alive=proc.alive)
        except StartupError:
            proc.stop()
            if "address already in use" not in proc.log_tail(200) or attempt == 2:
                raise StartupError(f"etcd did not become ready; log tail:\n{proc.log_tail()}") from None
            continue
        return proc, url
    raise AssertionError("unreachable")


def _first_address(cidr: str) -> str:
    return str(next(ip_network(cidr).hosts()))


def start_control_plane(
    workdir: Path,
    *,
    service_cidr: str = NO_NODE_SERVICE_CIDR,
    timeout: float = 60.0,
    apiserver_tool: str = "kube-apiserver",
    controllers: bool = True,
) -> ControlPlane:
    """Start etcd and kube-apiserver (the tool ``apiserver_tool``; Services in
    ``service_cidr``: a node's slot range, ``HostNetwork.service_cidr``); return once
    /readyz answers ok and, with ``controllers``, kube-controller-manager acts.

    Without ``controllers`` no controller runs: a namespace gets no ``default``
    ServiceAccount or ``kube-root-ca.crt`` (use ``create_namespace``) and no Job
    runs. That is how the floor's API server (an older minor, outside
    kube-controller-manager's skew) is started."""
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    pki_dir = workdir / "pki"
    pki_dir.mkdir(exist_ok=True)
    ca = CertAuthority()
    ca_file = pki_dir / "ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    serving_cert, serving_key = ca.serving(
        [
            "127.0.0.1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            _first_address(service_cidr),  # the `kubernetes` Service address
        ]
    ).write(pki_dir, "apiserver")
    admin_pair = ca.client("e2e-admin", ["system:masters"])
    admin_cert, admin_key = admin_pair.write(pki_dir, "admin")
    # How the API server reaches the kubelet (logs, exec): a client certificate the
    # node's kubelet accepts, and the node's InternalIP (no DNS for node names here).
    kubelet_client_cert, kubelet_client_key = ca.client("kube-apiserver-kubelet-client", ["system:masters"]).write(
        pki_dir, "apiserver-kubelet-client"
    )
    sa_key, sa_pub = write_signing_key(pki_dir)
    audit_policy = workdir / "audit-policy.yaml"
    audit_policy.write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))
    audit_log = workdir / "audit.log"

    etcd, etcd_url = _start_etcd(workdir, timeout)
    processes = [etcd]
    try:
        apiserver = None
        for attempt in range(3):  # a free port can be taken between probe and bind
            port = free_port()
            apiserver = ManagedProcess(
                "kube-apiserver",
                [
                    tool(apiserver_tool),
                    f"--etcd-servers={etcd_url}",
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--secure-port={port}",
                    f"--cert-dir={pki_dir}",
                    f"--tls-cert-file={serving_cert}",
                    f"--tls-private-key-file={serving_key}",
                    f"--client-ca-file={ca_file}",
                    "--authorization-mode=RBAC",
                    f"--service-account-issuer={ISSUER}",
                    f"--service-account-key-file={sa_pub}",
                    f"--service-account-signing-key-file={sa_key}",
                    f"--service-cluster-ip-range={service_cidr}",
                    "--allow-privileged=true",
                    "--profiling=false",
                    "--enable-priority-and-fairness=false",
                    "--endpoint-reconciler-type=none",
                    f"--kubelet-client-certificate={kubelet_client_cert}",
                    f"--kubelet-client-key={kubelet_client_key}",
                    "--kubelet-preferred-address-types=InternalIP",
                    f"--audit-policy-file={audit_policy}",
                    f"--audit-log-path={audit_log}",
                    "--audit-log-format=json",
                    "--v=1",
                ],
                workdir / f"kube-apiserver.{attempt}.log",
            )
            admin = Kube(f"https://127.0.0.1:{port}", ca_file, cert_file=admin_cert, key_file=admin_key)

            def ready(admin: Kube = admin) -> bool | None:
                status, _ = admin.raw_get("/readyz")
                return True if status == 200 else None

            try:
                wait_for(ready, timeout=timeout, what="kube-apiserver /readyz", alive=apiserver.alive)
                break
            except StartupError:
                apiserver.stop()
                if "address already in use" not in apiserver.log_tail(200) or attempt == 2:
                    raise StartupError(
                        f"kube-apiserver did not become ready; log tail:\n{apiserver.log_tail()}"
                    ) from None
        assert apiserver is not None
        processes.append(apiserver)
    except BaseException:
        for proc in reversed(processes):
            proc.stop()
        raise

    server = admin.server
    kubeconfig = _cert_kubeconfig(workdir / "admin.kubeconfig", server, ca.cert_pem, admin_pair, "e2e-admin")
    kcm_started = time.monotonic()
    if controllers:
        _start_controllers(
            processes,
            server=server,
            ca=ca,
            ca_file=ca_file,
            sa_key=sa_key,
            admin=admin,
            workdir=workdir,
            timeout=timeout,
        )
    kcm_seconds = time.monotonic() - kcm_started
    plane = ControlPlane(
        host="127.0.0.1",
        port=int(admin.server.rsplit(":", 1)[1]),
        workdir=workdir,
        ca_file=ca_file,
        ca_pem=ca.cert_pem,
        kubeconfig=kubeconfig,
        admin=admin,
        processes=processes,
        service_cidr=service_cidr,
    )
    plane.ca = ca
    plane.audit_log = audit_log
    plane.startup_seconds = time.monotonic() - started
    plane.controller_manager_seconds = kcm_seconds
    return plane


def _start_controllers(
    processes: list[ManagedProcess],
    *,
    server: str,
    ca: CertAuthority,
    ca_file: Path,
    sa_key: Path,
    admin: Kube,
    workdir: Path,
    timeout: float,
) -> None:
    """kube-controller-manager, appended to ``processes``; on failure every process stops."""
    # kube-controller-manager as the user the API server's RBAC bootstrap expects.
    kcm_pair = ca.client("system:kube-controller-manager")
    kcm_kubeconfig = _cert_kubeconfig(
        workdir / "kube-controller-manager.kubeconfig", server, ca.cert_pem, kcm_pair, "system:kube-controller-manager"
    )
    try:
        processes.append(
            start_controller_manager(
                kubeconfig=kcm_kubeconfig,
                ca_file=ca_file,
                service_account_key=sa_key,
                admin=admin,
                workdir=workdir,
                timeout=timeout,
            )
        )
    except BaseException:
        for proc in reversed(processes):
            proc.stop()
        raise


def _cert_kubeconfig(path: Path, server: str, ca_pem: bytes, pair: KeyPair, user: str) -> Path:
    """A kubeconfig (mode 0600) that authenticates with a client certificate."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "e2e", "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}
                ],
                "users": [
                    {
                        "name": user,
                        "user": {
                            "client-certificate-data": _b64(pair.cert_pem),
                            "client-key-data": _b64(pair.key_pem),
                        },
                    }
                ],
                "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
                "current-context": "e2e",
            }
        )
    )
    path.chmod(0o600)
    return path


def _http_ok(url: str) -> bool | None:
    import urllib.request

    with urllib.request.urlopen(url, timeout=2) as resp:
        return True if resp.status == 200 else None
