"""An upstream for a whole aicr recipe, on loopback, under the real names.

What ``aicr-runner mirror`` reads when a connected host runs it: the public chart
repositories (``https://helm.ngc.nvidia.com/nvidia``, ``https://charts.jetstack.io``
...), the registries (``nvcr.io``, ``ghcr.io``, ``quay.io`` ...) and the aicr
release folder on ``github.com``. Here they are two TLS servers on loopback
addresses of their own (``127.38.<slot>.1`` and ``.2``, port 443), and a
process that should reach them runs in a private mount namespace whose
``/etc/hosts`` names them (``UpstreamNetwork.argv``), with ``SSL_CERT_FILE`` the
test CA. Nothing in the command line under test names the loopback addresses:
the mirror runs as a user would run it, with no ``--resolve``, no
``--plain-http`` for the upstream and no helm wrapper.

- ``ChartHost``: one HTTPS server for every chart repository host (the ``Host``
  header picks ``<root>/<host>/``), serving ``index.yaml`` and the real chart
  archives as ``helm repo index`` lays them out, and the aicr release files
  under ``github.com/NVIDIA/aicr/releases/download/<tag>/``; every request kept.
- ``start_tls_registry``: the harness's registry (``e2e.harness.registry``), anonymous,
  over TLS with a certificate from the test CA (the upstream registry for every
  registry host, and the mirrors).
- ``stand_in_image()``: the ONE image that stands in for every image of the list
  this machine cannot build: a 1 KB static program that exits 0 whatever its
  arguments (so the charts' hook Jobs complete), labelled as a stand-in. Built once
  with podman, tagged by a hash of its inputs. ``/bin/sh`` and ``/bin/bash`` are the
  same program: kai-scheduler's pre-install hook Job runs ``/bin/bash <script>``. It
  runs as 65532 (cert-manager's pods set ``runAsNonRoot``).
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import ssl
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.harness.pki import CertAuthority
from e2e.harness.podman import image_exists, podman_build
from e2e.harness.registry import Registry, RegistryTls, start_registry

__all__ = [
    "STAND_IN_LABEL",
    "ChartHost",
    "UpstreamNetwork",
    "stand_in_image",
    "start_tls_registry",
]

#: The label (and manifest annotation) that marks the stand-in image.
STAND_IN_LABEL = "com.nvidia.aicr-runner.e2e.stand-in"
#: x86-64 Linux: exit(0), nothing else (no libc: the image holds this file alone).
_STAND_IN_C = """void _start(void) { __asm__ volatile("mov $60, %eax\\n xor %edi, %edi\\n syscall"); }\n"""
_STAND_IN_LAYOUT = f"""FROM scratch
COPY stand-in /stand-in
COPY stand-in /bin/sh
COPY stand-in /bin/bash
LABEL {STAND_IN_LABEL}="true" \\
  org.opencontainers.image.description="aicr-runner e2e stand-in: exits 0, whatever its arguments"
USER 65532:65532
ENTRYPOINT ["/stand-in"]
"""


def stand_in_image() -> str:
    """The stand-in image in podman's store (built once per input hash)."""
    digest = hashlib.sha256((_STAND_IN_C + _STAND_IN_LAYOUT).encode()).hexdigest()[:16]
    tag = f"localhost/aicr-e2e-stand-in:{digest}"
    if image_exists(tag):
        return tag
    with tempfile.TemporaryDirectory(prefix="e2e-stand-in-") as scratch:
        context = Path(scratch)
        (context / "stand-in.c").write_text(_STAND_IN_C)
        cc = ["gcc", "-nostdlib", "-static", "-Os", "-s", "-o", "stand-in", "stand-in.c"]
        subprocess.run(cc, cwd=context, check=True, capture_output=True, timeout=120)
        (context / "Containerfile").write_text(_STAND_IN_LAYOUT)
        podman_build(context, tag)
    return tag


def start_tls_registry(workdir: Path, ca: CertAuthority, names: Sequence[str], address: str, port: int = 0) -> Registry:
    """An anonymous registry on ``address:port`` (a free port when 0) presenting a
    certificate for ``names`` (and ``address``) signed by ``ca``."""
    workdir.mkdir(parents=True)
    cert, key = ca.serving([address, *names]).write(workdir, "registry")
    tls = RegistryTls(cert, key, ca.cert_pem)
    return start_registry(workdir, anonymous=True, tls=tls, address=address, port=port)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: Any, errors: list[str]) -> None:
        super().__init__(address, handler)
        self.errors = errors

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.errors.append(f"{client_address}: {sys.exc_info()[1]!r}")


@dataclass
class ChartHost:
    """HTTPS on ``address:443`` for every chart repository host: ``<root>/<Host>/<path>``."""

    root: Path
    address: str
    ca: CertAuthority
    names: Sequence[str]
    #: ``<Host><path>`` of every request, in order.
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        host = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def _route(self) -> None:
                name = (self.headers.get("Host") or "").split(":")[0]
                host.requests.append(f"{name}{self.path}")
                self.directory = str(host.root / name)

            def do_GET(self) -> None:
                self._route()
                super().do_GET()

            def do_HEAD(self) -> None:
                self._route()
                super().do_HEAD()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        keys = self.root.parent / "chart-host-tls"
        keys.mkdir(exist_ok=True)
        cert, key = self.ca.serving([self.address, *self.names]).write(keys, "charts")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._server = _Server((self.address, 443), functools.partial(Handler, directory=str(self.root)), self.errors)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass(frozen=True)
class UpstreamNetwork:
    """Where the upstream names resolve: a hosts file, and the CA that signed their certificates."""

    hosts_file: Path
    ca_file: Path

    @classmethod
    def write(cls, directory: Path, ca: CertAuthority, addresses: dict[str, Iterable[str]]) -> UpstreamNetwork:
        """``addresses``: loopback address -> the names it answers for."""
        lines = ["127.0.0.1 localhost", *(f"{a} {' '.join(sorted(names))}" for a, names in addresses.items())]
        hosts = directory / "hosts"
        hosts.write_text("\n".join(lines) + "\n")
        ca_file = directory / "upstream-ca.pem"
        ca_file.write_bytes(ca.cert_pem)
        return cls(hosts, ca_file)

    def argv(self, command: Sequence[str]) -> list[str]:
        """``command`` in a private mount namespace whose /etc/hosts is this one's."""
        script = 'mount --bind "$0" /etc/hosts && exec "$@"'
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            script,
            str(self.hosts_file),
            *command,
        ]
