"""The host side of the e2e node: its slot, its bridge, its Service range and the
rules that keep test traffic on this machine, and the kernel settings the kubelet
changes, each undone at teardown.

Several test sessions may run on one machine at once, so every host-wide thing a
node owns is per slot (a lock file held for the session): the bridge
``aicre2e<slot>`` with the pod subnet ``10.244.<slot>.0/24``, the Service range
``198.51.100.<16*slot>/28``, the iptables chains ``AICR-E2E-<slot>`` (nat, filter,
mangle), the kubelet's cgroup root ``/aicr-e2e-<slot>``. The bridge's address is
the node's InternalIP and the address pods reach this host's test servers at (the
registry, the release mirror).

The Service range is a slice of TEST-NET-2 (RFC 5737: documentation only, never
routed on the internet). A packet to it would still follow this machine's default
route, so the slot's rules decide every packet sent there: the ``kubernetes``
Service address (the range's first address) port 443 is redirected to the test
API server on loopback, for pods on the bridge and for this host's own processes
(hostNetwork pods); everything else sent to the range is refused, and a last rule
on the way out drops and counts anything to the range that got past them (its
count must stay 0). A per-slot range is what lets the redirect of the host's own
traffic tell sessions apart: each session's API server has its own Service
address. What the bridge sends anywhere but the bridge itself is refused too
(this host's own addresses, the registry's among them, are delivered locally and
never forwarded).

The kubelet sets a few kernel sysctls when it starts (``kernel.panic`` and
friends) and creates ``KUBE-*`` iptables chains. Those are host-wide: the first
node of the machine records the old values, the last one to stop puts them back
and removes the chains.

The host's root mount is made shared (``mount --make-shared /``) when it is private,
as systemd makes it on every real node: containerd refuses a pod's
``mountPropagation: HostToContainer`` mount of a path on a private mount (``path "/"
is mounted on "/" but it is not a shared or slave mount``), and node-exporter's chart
mounts the node's ``/`` so. The first node of the machine records that it changed it,
and the last one to stop makes it private again.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from ipaddress import ip_address, ip_network
from pathlib import Path
from typing import IO

__all__ = ["KUBELET_SYSCTLS", "SERVICE_BLOCK", "STATE_DIR", "HostNetwork", "IsolationCheck", "claim_host_network"]

#: Machine-wide bookkeeping of the e2e nodes (slot locks, the recorded sysctls).
STATE_DIR = Path(os.environ.get("AICR_E2E_NODE_STATE", "/run/aicr-runner-e2e"))
SLOTS = 16
#: The slots' Service ranges: TEST-NET-2 cut into SLOTS /28s. Not TEST-NET-1
#: (192.0.2.0/24): a machine's own network may use it (this one's uplink does),
#: nor Kubernetes' usual 10.96.0.0/12, which a machine may route to a real cluster.
SERVICE_BLOCK = "198.51.100.0/24"
#: How the slot's rules are told apart in ``iptables -S`` (``HostNetwork.counters``).
RULES = ("redirected", "bridge-egress", "service-range", "escaped")
#: Written in STATE_DIR when a node made ``/`` shared (``HostNetwork.share_root_mount``).
ROOT_MADE_SHARED = "root-made-shared"
#: What the kubelet sets at start-up (pkg/kubelet/cm: setupKernelTunables).
KUBELET_SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
)
#: Chains the kubelet creates (pkg/kubelet/kubelet_network_linux.go).
KUBELET_CHAINS = (
    ("filter", "KUBE-FIREWALL"),
    ("filter", "KUBE-KUBELET-CANARY"),
    ("nat", "KUBE-KUBELET-CANARY"),
    ("mangle", "KUBE-KUBELET-CANARY"),
    ("mangle", "KUBE-IPTABLES-HINT"),
)


class HostSetupError(RuntimeError):
    """A host change the node needs failed (the message says which and why)."""


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise HostSetupError(f"{' '.join(argv)} (exit {proc.returncode}): {proc.stderr.strip()}")
    return proc


@dataclass(frozen=True)
class IsolationCheck:
    """What ``HostNetwork.probe_isolation`` saw from this host's own network
    namespace (where hostNetwork pods are)."""

    api_version: str  # /version's gitVersion read through the Service address ("" if not)
    api_error: str = ""  # why not
    refused: dict[str, str] = field(default_factory=dict)  # "ip:port" -> the connect's errno name
    before: dict[str, int] = field(default_factory=dict)  # HostNetwork.counters() before...
    after: dict[str, int] = field(default_factory=dict)  # ...and after

    def gained(self, rule: str) -> int:
        return self.after[rule] - self.before[rule]

    def problems(self) -> list[str]:
        """Each way the slot's Service range is not as it must be (empty: it is)."""
        found = [f"the kubernetes Service from this host: {self.api_error}"] if self.api_error else []
        if self.api_version and self.gained("redirected") < 1:
            found.append("the API server answered, but not through the slot's redirect")
        if any(result != "EHOSTUNREACH" for result in self.refused.values()):
            found.append(f"not refused by the range's rule: {self.refused}")
        if self.gained("service-range") < len(self.refused):
            found.append(f"the range's rule counted {self.gained('service-range')} of {len(self.refused)} refusals")
        if self.after["escaped"]:
            found.append(f"{self.after['escaped']} packet(s) to the range got as far as the way out (dropped there)")
        return found


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


@dataclass
class HostNetwork:
    """One node's slot on this machine and what it changed there."""

    slot: int
    _lock: IO[str]

    @property
    def bridge(self) -> str:
        return f"aicre2e{self.slot}"

    @property
    def subnet(self) -> str:
        return f"10.244.{self.slot}.0/24"

    @property
    def gateway(self) -> str:
        """The node's InternalIP, and where pods reach this host's servers."""
        return f"10.244.{self.slot}.1"

    @property
    def chain(self) -> str:
        return f"AICR-E2E-{self.slot}"

    @property
    def cgroup_root(self) -> str:
        return f"/aicr-e2e-{self.slot}"

    # -- the bridge -----------------------------------------------------------
    def _up(self) -> None:
        self._remove_bridge()  # a crashed session's leftover
        run("ip", "link", "add", self.bridge, "type", "bridge")
        run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")
        # DNAT to the API server's loopback address needs local routing from the bridge.
        _sysctl_path(f"net.ipv4.conf.{self.bridge}.route_localnet").write_text("1")

    def _remove_bridge(self) -> None:
        """The bridge and the pods' veths on it (deleting one end of a veth pair
        deletes both; without this a pod whose sandbox was never torn down keeps
        its interface after the bridge is gone)."""
        ports = run("ip", "-o", "link", "show", "master", self.bridge, check=False).stdout
        for line in ports.splitlines():
            run("ip", "link", "del", line.split(":", 2)[1].strip().split("@", 1)[0], check=False)
        run("ip", "link", "del", self.bridge, check=False)

    # -- the kubelet's cgroup root ---------------------------------------------
    def make_cgroup_root(self) -> None:
        """The kubelet wants its cgroup root to exist in every hierarchy (v1 here)."""
        for hierarchy in Path("/sys/fs/cgroup").iterdir():
            if not hierarchy.is_dir() or hierarchy.is_symlink():
                continue
            top = hierarchy / self.cgroup_root.lstrip("/")
            top.mkdir(exist_ok=True)
            for inherited in ("cpuset.cpus", "cpuset.mems"):  # an empty cpuset admits no task
                if (top / inherited).exists() and not (top / inherited).read_text().strip():
                    (top / inherited).write_text((hierarchy / inherited).read_text())

    def remove_cgroup_root(self, timeout: float = 30.0) -> None:
        """Remove the cgroup root and what the kubelet made under it, deepest first,
        in every hierarchy. A cgroup whose last task is still exiting refuses
        (EBUSY) until the kernel has released that task: wait for it."""
        deadline = time.monotonic() + timeout
        for hierarchy in Path("/sys/fs/cgroup").iterdir():
            top = hierarchy / self.cgroup_root.lstrip("/")
            if hierarchy.is_symlink() or not top.is_dir():
                continue
            nested = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
            for directory in [*nested, top]:
                _rmdir_once_released(directory, deadline)

    # -- the Service range and the rules that keep traffic on this machine -------
    @property
    def service_cidr(self) -> str:
        """This slot's ``--service-cluster-ip-range`` (a /28 of SERVICE_BLOCK)."""
        return str(list(ip_network(SERVICE_BLOCK).subnets(new_prefix=28))[self.slot])

    @property
    def service_ip(self) -> str:
        """The ``kubernetes`` Service address: the range's first (the API server's choice)."""
        return str(next(ip_network(self.service_cidr).hosts()))

    def _jumps(self) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
        """(table, built-in chain, match) of every jump to the slot's chains."""
        return (
            ("nat", "PREROUTING", ("-i", self.bridge)),
            ("nat", "OUTPUT", ("-d", self.service_cidr)),
            ("filter", "FORWARD", ("-i", self.bridge)),
            ("filter", "FORWARD", ("-d", self.service_cidr)),
            ("filter", "OUTPUT", ("-d", self.service_cidr)),
            ("mangle", "POSTROUTING", ("-d", self.service_cidr)),
        )

    def _rules(self, port: int, target_port: int) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
        """(table, name, rule) of the slot's chains, in order."""
        refuse = ("-j", "REJECT", "--reject-with", "icmp-admin-prohibited")
        service = ("-d", f"{self.service_ip}/32", "-p", "tcp", "--dport", str(port))
        return (
            ("nat", "redirected", (*service, "-j", "DNAT", "--to-destination", f"127.0.0.1:{target_port}")),
            ("filter", "bridge-egress", ("-i", self.bridge, "!", "-o", self.bridge, *refuse)),
            ("filter", "service-range", ("-d", self.service_cidr, *refuse)),
            ("mangle", "escaped", ("-d", self.service_cidr, "-j", "DROP")),
        )

    def route_service(self, target_port: int, port: int = 443) -> None:
        """The slot's chains: the ``kubernetes`` Service (``service_ip:port``) to the
        API server on loopback (``target_port``) from the bridge and from this host,
        everything else to the range refused, and the bridge's forwarded traffic
        refused. The refusals are in place before the redirect is."""
        self._remove_chain()
        for table in ("mangle", "filter", "nat"):
            run("iptables", "-t", table, "-N", self.chain)
            for rule_table, name, rule in self._rules(port, target_port):
                if rule_table == table:
                    comment = ("-m", "comment", "--comment", f"{self.chain} {name}")
                    run("iptables", "-t", table, "-A", self.chain, *comment, *rule)
            for jump_table, builtin, match in self._jumps():
                if jump_table == table:
                    run("iptables", "-t", table, "-I", builtin, *match, "-j", self.chain)

    def counters(self) -> dict[str, int]:
        """Packets each of the slot's rules has matched (RULES; the redirect counts
        connections: the nat table sees a connection's first packet only)."""
        counts: dict[str, int] = {}
        for table in ("nat", "filter", "mangle"):
            for line in run("iptables", "-t", table, "-S", self.chain, "-v").stdout.splitlines():
                for name in RULES:
                    if f'--comment "{self.chain} {name}"' in line:
                        counts[name] = int(line.split(" -c ", 1)[1].split()[0])
        return counts

    def probe_isolation(self, ca_file: Path) -> IsolationCheck:
        """From this host's own network namespace, where hostNetwork pods are:
        ``https://<service_ip>/version`` with TLS verified against ``ca_file`` for
        the Service address, then a connect to two other addresses of the range
        (safe: the slot's rules are in place), with the rules' counts around it."""
        before = self.counters()
        version, error = "", ""
        context = ssl.create_default_context(cafile=str(ca_file))
        try:
            with urllib.request.urlopen(f"https://{self.service_ip}/version", timeout=10, context=context) as resp:
                version = str(json.load(resp)["gitVersion"])
        except OSError as exc:
            error = str(exc)
        refused = {}
        for target in (f"{self.service_ip}:80", f"{ip_address(self.service_ip) + 1}:443"):
            host, port = target.split(":")
            try:
                socket.create_connection((host, int(port)), timeout=3).close()
                refused[target] = "connected"
            except TimeoutError:
                refused[target] = "timeout"
            except OSError as exc:
                refused[target] = errno.errorcode.get(exc.errno or 0, str(exc))
        return IsolationCheck(version, error, refused, before, self.counters())

    def check_isolation(self, ca_file: Path) -> IsolationCheck:
        """``probe_isolation``, raising HostSetupError naming every problem found:
        the node's start-up check, before any pod runs."""
        check = self.probe_isolation(ca_file)
        if check.problems():
            raise HostSetupError(
                f"slot {self.slot}'s Service range {self.service_cidr}: {'; '.join(check.problems())} ({check})"
            )
        return check

    def _remove_chain(self) -> None:
        for table in ("nat", "filter", "mangle"):
            jumps = [(builtin, *match) for t, builtin, match in self._jumps() if t == table]
            _remove_iptables_chain(table, self.chain, *jumps)

    # -- kernel settings ------------------------------------------------------
    def record_sysctls(self) -> None:
        """Record the kubelet's sysctls before the first node of the machine starts."""
        with _machine_lock():
            saved = STATE_DIR / "sysctls.json"
            if not saved.exists():  # a later node (or a crashed one) already recorded the originals
                values = {name: _sysctl_path(name).read_text().strip() for name in KUBELET_SYSCTLS}
                saved.write_text(json.dumps(values))

    def share_root_mount(self) -> None:
        """Make ``/`` a shared mount if it is private (recorded, made private again by the last node)."""
        with _machine_lock():
            if _root_propagation() != "private":
                return
            (STATE_DIR / ROOT_MADE_SHARED).write_text("/\n")
            run("mount", "--make-shared", "/")

    def teardown(self) -> None:
        """Undo this slot's changes; the last node of the machine also restores the
        sysctls and removes the kubelet's chains."""
        errors: list[str] = []
        for step in (self._remove_chain, self._remove_bridge, self.remove_cgroup_root):
            try:
                step()
            except HostSetupError as exc:
                errors.append(str(exc))
        with _machine_lock():
            if not _other_slots_busy(self.slot):
                errors.extend(_restore_machine())
        self._lock.close()
        if errors:
            raise HostSetupError("; ".join(errors))


def _rmdir_once_released(directory: Path, deadline: float) -> None:
    while True:
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                procs = directory / "cgroup.procs"
                held = procs.read_text().split() if procs.exists() else []
                raise HostSetupError(f"rmdir {directory}: {exc.strerror} (processes in it: {held or 'none'})") from None
        time.sleep(0.05)


@contextlib.contextmanager
def _machine_lock() -> Iterator[None]:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with (STATE_DIR / "machine.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _other_slots_busy(mine: int) -> bool:
    for slot in range(SLOTS):
        if slot == mine:
            continue
        path = STATE_DIR / f"slot-{slot}.lock"
        if not path.exists():
            continue
        with path.open("a") as probe:
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(probe, fcntl.LOCK_UN)
    return False


def _root_propagation() -> str:
    """``shared``, ``slave`` or ``private``: the propagation of the mount ``/`` is on
    (the topmost one), from its optional fields in /proc/self/mountinfo."""
    fields: list[str] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        words = line.split()
        if words[4] == "/":
            fields = words[6 : words.index("-")]
    if any(f.startswith("shared:") for f in fields):
        return "shared"
    return "slave" if any(f.startswith("master:") for f in fields) else "private"


def _restore_machine() -> list[str]:
    errors: list[str] = []
    made_shared = STATE_DIR / ROOT_MADE_SHARED
    if made_shared.exists():
        if (done := run("mount", "--make-private", "/", check=False)).returncode != 0:
            errors.append(f"mount --make-private /: {done.stderr.strip()}")
        made_shared.unlink()
    saved = STATE_DIR / "sysctls.json"
    if saved.exists():
        for name, value in json.loads(saved.read_text()).items():
            try:
                _sysctl_path(name).write_text(value)
            except OSError as exc:
                errors.append(f"restore {name}={value}: {exc}")
        saved.unlink()
    for table, chain in KUBELET_CHAINS:
        _remove_iptables_chain(table, chain, *((builtin,) for builtin in _BUILTIN_CHAINS))
    return errors


_BUILTIN_CHAINS = ("INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING")


def _remove_iptables_chain(table: str, chain: str, *jumps_from: tuple[str, ...]) -> None:
    """Remove ``chain`` from ``table``: every jump to it (each ``jumps_from`` is a
    built-in chain and the match of the jump, as many times as it was added),
    then its rules, then the chain. What is not there is skipped."""
    for jump in jumps_from:
        builtin, *match = jump
        while run("iptables", "-t", table, "-D", builtin, *match, "-j", chain, check=False).returncode == 0:
            pass
    run("iptables", "-t", table, "-F", chain, check=False)
    run("iptables", "-t", table, "-X", chain, check=False)


def claim_host_network() -> HostNetwork:
    """Take a free slot (its lock is held until teardown) and bring its bridge up."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    for slot in range(SLOTS):
        lock = (STATE_DIR / f"slot-{slot}.lock").open("a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        host = HostNetwork(slot, lock)
        try:
            host._up()
        except BaseException:
            host.teardown()
            raise
        return host
    raise HostSetupError(f"all {SLOTS} e2e node slots are taken (locks in {STATE_DIR})")
