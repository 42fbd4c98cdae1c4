"""Running a container: podman, or the bwrap / rewrite fallbacks (sandbox.py), and watching it."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from e2e.harness import podman
from e2e.harness.kubelet.model import (
    FALLBACK_LOG_BYTES,
    FALLBACK_LOG_LINES,
    MAX_TERMINATION_MESSAGE,
    SERVICE_ACCOUNT_DIR,
    ContainerRun,
    PodSpecUnsupported,
    _PodStartFailure,
    expand,
)
from e2e.harness.kubelet.status import _PodLifecycle
from e2e.harness.procs import set_pdeathsig
from e2e.harness.sandbox import Identity, Mount, bwrap_argv, rewrite_paths
from e2e.tools import REPO_ROOT


class _LaunchMixin:
    """Runs one container of a pod in the chosen sandbox and collects its result."""

    def _run_container(
        self,
        pod: Mapping[str, Any],
        container: Mapping[str, Any],
        *,
        init: bool,
        volumes: Mapping[str, tuple[Path, bool]],
        pod_dir: Path,
        deadline: float,
        lifecycle: _PodLifecycle,
        terminate_when: Callable[[str], bool] | None,
        terminate_after: float | None,
    ) -> ContainerRun:
        name = container["name"]
        try:
            env = self.container_env(pod, container)
            identity, read_only_root = self._identity(pod, container)
        except _PodStartFailure as exc:
            return ContainerRun(name, init, None, exc.reason, "", "", "", "", detail=exc.message)
        # Kubernetes: command replaces ENTRYPOINT (and drops CMD); args replaces CMD.
        if container.get("command"):
            argv = [*container["command"], *(container.get("args") or [])]
        else:
            argv = [*self.image_entrypoint, *(container.get("args") or self.image_cmd)]
        argv = [expand(a, env) for a in argv]
        argv[0] = self.commands.get(argv[0], argv[0])
        cwd = container.get("workingDir") or self.image_workdir
        full_env = {**self.image_env, **env, "HOSTNAME": pod["metadata"]["name"]}
        term_file = pod_dir / f"{name}.termination-log"
        term_file.touch()
        term_file.chmod(0o666)
        mounts = [Mount(path, source) for path, source in self.image_files.items()]
        mounts += self._mounts(container, volumes, term_file)
        if self.sandbox != "podman":  # the checkout standing in for the image needs these
            mounts += self._image_paths_under_volumes(mounts)
            mounts += self._image_dirs(mounts, pod_dir)

        started = time.monotonic()
        kill_container: Callable[[str], None] | None = None
        if self.sandbox == "podman":
            container_name = f"{pod['metadata']['name']}-{name}"
            proc = self._start_in_podman(
                pod,
                container,
                env=env,
                identity=identity,
                mounts=mounts,
                container_name=container_name,
                pod_dir=pod_dir,
            )

            def container_pid() -> int | None:
                return None

            def kill_container(signal_name: str) -> None:
                podman.kill(container_name, signal_name)
        elif self.sandbox == "bwrap":
            read_fd, info_fd = os.pipe()
            cmd = bwrap_argv(
                argv,
                mounts,
                identity=identity,
                hostname=pod["metadata"]["name"][:63],
                cwd=cwd,
                read_only_root=read_only_root,
                expose=self.expose,
                info_fd=info_fd,
                as_pid_1=not self.image_init,
            )
            try:
                proc = _spawn(cmd, full_env, "/", pass_fds=(info_fd,))
            finally:
                os.close(info_fd)
            sandbox_pid = _read_child_pid(read_fd, proc)
            os.close(read_fd)

            def container_pid() -> int | None:
                if sandbox_pid is None:
                    return None
                return sandbox_pid if not self.image_init else _first_child(sandbox_pid)
        else:
            mapping = {m.target: str(m.source) for m in mounts if m.source is not None}
            full_env = {k: rewrite_paths(v, mapping) for k, v in full_env.items()}
            full_env.update(self._rewrite_extra_env(env, mounts, term_file, pod_dir / f"{name}.kubeconfig"))
            cmd = [rewrite_paths(a, mapping) for a in argv]
            host_cwd = rewrite_paths(cwd, mapping)
            proc = _spawn(cmd, full_env, host_cwd if os.path.isdir(host_cwd) else str(pod_dir))

            def container_pid() -> int | None:
                return proc.pid

        watch = _Watch(proc, container_pid, pod_dir / f"{name}.log", terminate_when, kill_container=kill_container)
        reason_override = watch.wait(
            deadline=deadline,
            terminate_at=None if terminate_after is None else started + terminate_after,
            grace=float(pod["spec"].get("terminationGracePeriodSeconds", 30)),
            lifecycle=lifecycle,
            started=started,
        )
        if self.sandbox == "podman" and reason_override:
            podman.remove(container_name)  # --rm does not cover a container podman lost track of
        code = proc.returncode
        if code < 0:
            code = 128 - code  # killed by a signal, reported like a shell / the kubelet
        output = "".join(watch.merged)

        message = term_file.read_bytes()[:MAX_TERMINATION_MESSAGE].decode(errors="replace")
        policy = container.get("terminationMessagePolicy", "File")
        if not message and code != 0 and policy == "FallbackToLogsOnError":
            tail = "".join(watch.merged[-FALLBACK_LOG_LINES:]).encode()[-FALLBACK_LOG_BYTES:]
            message = tail.decode(errors="replace")
        reason = "Completed" if code == 0 else "Error"
        if reason_override == "DeadlineExceeded":
            reason = reason_override
        return ContainerRun(
            name=name,
            init=init,
            exit_code=code,
            reason=reason,
            output=output,
            stdout="".join(watch.streams["stdout"]),
            stderr="".join(watch.streams["stderr"]),
            termination_message=message,
            argv=tuple(argv),
            env=env,
            seconds=time.monotonic() - started,
        )

    def _start_in_podman(
        self,
        pod: Mapping[str, Any],
        container: Mapping[str, Any],
        *,
        env: Mapping[str, str],
        identity: Identity,
        mounts: Sequence[Mount],
        container_name: str,
        pod_dir: Path,
    ) -> subprocess.Popen[bytes]:
        """``podman run`` of the container from the built image (see podman.py)."""
        spec = podman.ContainerSpec(
            image=self.image,
            name=container_name,
            hostname=pod["metadata"]["name"][:63],
            identity=identity,
            security_context=container.get("securityContext") or {},
            mounts=mounts,
            env={**env, "HOSTNAME": pod["metadata"]["name"]},
            working_dir=container.get("workingDir"),
            command=[expand(a, env) for a in container["command"]] if container.get("command") else None,
            args=[expand(a, env) for a in container["args"]] if container.get("args") else None,
        )
        try:
            cmd, inherited = podman.run_argv(spec)
        except podman.PodSpecNotRunnable as exc:
            raise PodSpecUnsupported(str(exc)) from exc
        return _spawn(cmd, {**os.environ, **inherited}, str(pod_dir))

    def _image_dirs(self, mounts: Sequence[Mount], pod_dir: Path) -> list[Mount]:
        """Image directories the host lacks: an empty read-only directory there."""
        extra = []
        for i, path in enumerate(self.image_dirs):
            if os.path.lexists(path) or any(m.target == path for m in mounts):
                continue
            empty = pod_dir / "image-dirs" / str(i)
            empty.mkdir(parents=True, exist_ok=True)
            empty.chmod(0o755)
            extra.append(Mount(path, empty))
        return extra

    def _image_paths_under_volumes(self, mounts: Sequence[Mount]) -> list[Mount]:
        """The "image" here is this checkout and its Python. When a volume is mounted
        over a directory that holds them (the chart mounts an emptyDir at /work; a
        checkout may live under /work), bind them back on top, read-only, so the
        program still starts. The volume then shows one extra directory."""
        needed = [str(REPO_ROOT), *self.expose]
        extra: list[Mount] = []
        for path in needed:
            for mount in mounts:
                if mount.target == path:
                    raise PodSpecUnsupported(f"a volume is mounted at {path}, which holds the image's files")
                if path.startswith(mount.target.rstrip("/") + "/"):
                    extra.append(Mount(path, Path(path)))
                    break
        return extra

    def _rewrite_extra_env(
        self, env: Mapping[str, str], mounts: Sequence[Mount], term_file: Path, kubeconfig: Path
    ) -> dict[str, str]:
        """Without a sandbox, paths compiled into programs cannot be redirected; give
        the process what it needs to find them another way (see e2e/README.md)."""
        extra: dict[str, str] = {}
        sa = next((m for m in mounts if m.target == SERVICE_ACCOUNT_DIR and m.source), None)
        if sa is not None and sa.source is not None and "KUBECONFIG" not in env:
            token = (sa.source / "token").read_text()
            extra["KUBECONFIG"] = str(self.plane.write_kubeconfig(kubeconfig, token=token))
        if "AICR_RUNNER_TERMINATION_MESSAGE_PATH" not in env:  # the runtime's own setting
            extra["AICR_RUNNER_TERMINATION_MESSAGE_PATH"] = str(term_file)
        return extra

    @staticmethod
    def _mounts(container: Mapping[str, Any], volumes: Mapping[str, tuple[Path, bool]], term_file: Path) -> list[Mount]:
        term_path = container.get("terminationMessagePath") or "/dev/termination-log"
        mounts = [Mount(term_path, term_file, writable=True)]
        for vm in container.get("volumeMounts") or []:
            source, kind_ro = volumes[vm["name"]]
            if vm.get("subPath"):
                source = source / vm["subPath"]
                if not source.exists():
                    source.mkdir(parents=True)
            mounts.append(Mount(vm["mountPath"], source, writable=not (kind_ro or vm.get("readOnly"))))
        return mounts


def _spawn(
    cmd: Sequence[str], env: Mapping[str, str], cwd: str, *, pass_fds: tuple[int, ...] = ()
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        list(cmd),
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=pass_fds,
        start_new_session=True,
        preexec_fn=set_pdeathsig,  # noqa: PLW1509 - run from the main thread
    )


class _Watch:
    """Collects a container's output line by line and delivers SIGTERM/SIGKILL."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        container_pid: Callable[[], int | None],
        log_path: Path,
        terminate_when: Callable[[str], bool] | None,
        *,
        kill_container: Callable[[str], None] | None = None,
    ) -> None:
        self.proc = proc
        self._container_pid = container_pid
        #: signals the container through its runtime (podman) instead of by PID
        self._kill_container = kill_container
        self._killed = False
        self.merged: list[str] = []
        self.streams: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self._lock = threading.Lock()
        self._terminate_when = terminate_when
        self._sigterm = threading.Event()
        self._log = log_path.open("a")
        self._threads = [
            threading.Thread(target=self._pump, args=(proc.stdout, "stdout"), daemon=True),
            threading.Thread(target=self._pump, args=(proc.stderr, "stderr"), daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _pump(self, stream: Any, key: str) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace")
            with self._lock:
                self.merged.append(line)
                self.streams[key].append(line)
                self._log.write(line)
                self._log.flush()
            if self._terminate_when is not None and not self._sigterm.is_set() and self._terminate_when(line):
                self._sigterm.set()
        stream.close()

    def wait(
        self,
        *,
        deadline: float,
        terminate_at: float | None,
        grace: float,
        lifecycle: _PodLifecycle,
        started: float,
    ) -> str:
        """Wait for the exit; returns "DeadlineExceeded" (the pod's
        activeDeadlineSeconds or the harness timeout), "Deleted" or ""."""
        reason = ""
        end_requested = False
        term_sent_at: float | None = None
        while self.proc.poll() is None:
            now = time.monotonic()
            if not end_requested and (self._sigterm.is_set() or (terminate_at is not None and now >= terminate_at)):
                lifecycle.request_end()
                end_requested = True
            if lifecycle.cancelled:
                self._kill()
            elif term_sent_at is None:
                if now >= deadline:
                    reason = "DeadlineExceeded"
                elif (deletion := lifecycle.poll()) is not None:
                    reason, grace = "Deleted", deletion.grace_seconds
                    deletion.sigterm_after, deletion.sigterm_at = now - started, now
                if reason:  # like the kubelet: SIGTERM to the container's process only
                    self._terminate()
                    term_sent_at = now
            elif now - term_sent_at >= grace:
                if lifecycle.deletion is not None:
                    lifecycle.deletion.sigkill = True
                self._kill()
            time.sleep(0.02)
        if term_sent_at is not None and lifecycle.deletion is not None:
            lifecycle.deletion.exited_after_sigterm = time.monotonic() - term_sent_at
        for t in self._threads:
            t.join(timeout=10)
        self._log.close()
        return reason

    def _terminate(self) -> None:
        if self._kill_container is not None:
            self._kill_container("TERM")
            return
        pid = self._container_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _kill(self) -> None:
        if self._kill_container is not None and not self._killed:
            self._killed = True  # once: podman kill is a process of its own
            self._kill_container("KILL")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


def _read_child_pid(fd: int, proc: subprocess.Popen[bytes]) -> int | None:
    """bwrap --info-fd reports the sandboxed process's PID in our namespace."""
    data = b""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
            with contextlib.suppress(ValueError):
                return int(json.loads(data)["child-pid"])
        elif proc.poll() is not None:
            break
    return None


def _first_child(pid: int) -> int | None:
    """The oldest child of ``pid`` (the process under the sandbox's init)."""
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat_line = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat_line.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:  # fields: state, ppid, ...
            children.append((int(fields[19]), int(entry)))  # starttime
    return min(children)[1] if children else None
