"""`buildtools dist up/down/status`: an sccache-dist scheduler and N sandboxed build servers
on loopback, for development, tests and benchmarks.

`up` writes every config and token into a state directory (0700; files 0600), starts the
scheduler and the servers as daemons (`SCCACHE_NO_DAEMON=1`, so the pid recorded is the
process itself, in a session of its own), pins server i to its CPUs (`--cores`: sccache
counts the CPUs a server may use, `available_parallelism`, and the scheduler gives it at most
twice as many jobs), waits until every server has registered, and records the pids in
`cluster.json`. The daemons outlive `up` (that is their point); `down` ends each process
group (TERM, then KILL after a grace period), checking by its command line that a recorded pid
is still the process it started. `tied=True` (tests, benchmarks) makes them die with the
process that started them (PR_SET_PDEATHSIG), so nothing outlives a crashed test.
"""

from __future__ import annotations

__all__ = [
    "STATE_FILE",
    "ClusterProcess",
    "ClusterState",
    "cluster_down",
    "cluster_up",
    "default_state_dir",
    "kill_server",
    "read_state",
]

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..cachedir import default_cache_dir
from ..errors import DistError
from ..files import write_atomic
from ..jsonfields import Fields, decode_json
from ..locks import file_lock
from ..process import ProcessRunner
from .config import ClusterLayout, plan_cluster, scheduler_config, server_config
from .scheduler import SchedulerStatus, scheduler_status
from .tools import find_bwrap, find_tool, version_of

STATE_FILE = "cluster.json"
STATE_SCHEMA = "torch-buildtools/dist-cluster/v1"
GRACE_SECONDS = 10.0
_PR_SET_PDEATHSIG = 1


def default_state_dir(env: Mapping[str, str]) -> Path:
    """Where `dist up` keeps its configs, tokens, logs and pids: <cache dir>/dist."""
    return default_cache_dir(env) / "dist"


@dataclass(frozen=True, kw_only=True)
class ClusterProcess:
    role: str  # "scheduler" or "server"
    pid: int
    config: Path
    log: Path
    addr: str
    cpus: tuple[int, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "role": self.role,
            "pid": self.pid,
            "config": str(self.config),
            "log": str(self.log),
            "addr": self.addr,
            "cpus": list(self.cpus),
        }


@dataclass(frozen=True, kw_only=True)
class ClusterState:
    """What `up` recorded: enough for `down`, `status` and a build's client token."""

    state_dir: Path
    scheduler_url: str
    client_token: str
    processes: tuple[ClusterProcess, ...]

    @property
    def servers(self) -> tuple[ClusterProcess, ...]:
        return tuple(p for p in self.processes if p.role == "server")

    def to_json(self) -> dict[str, object]:
        return {
            "schema": STATE_SCHEMA,
            "scheduler_url": self.scheduler_url,
            "client_token": self.client_token,
            "processes": [p.to_json() for p in self.processes],
        }


def read_state(state_dir: Path) -> ClusterState | None:
    """The recorded cluster, or None when none was started here; DistError when the record
    is not one this buildtools wrote."""
    path = state_dir / STATE_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        fields = Fields(decode_json(raw, what=str(path)), str(path))
        if fields.text("schema") != STATE_SCHEMA:
            raise ValueError(f"{path}: not {STATE_SCHEMA}")
        processes = []
        for item in fields.objects("processes"):
            pid, cpus = item.data.get("pid"), item.items("cpus")
            if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
                raise ValueError(f"{item.path}.pid: not a process id")
            if not all(isinstance(c, int) and not isinstance(c, bool) for c in cpus):
                raise ValueError(f"{item.path}.cpus: not a list of CPU numbers")
            processes.append(
                ClusterProcess(
                    role=item.choice("role", ("scheduler", "server")),
                    pid=pid,
                    config=Path(item.text("config")),
                    log=Path(item.text("log")),
                    addr=item.text("addr"),
                    cpus=tuple(int(str(c)) for c in cpus),
                )
            )
        return ClusterState(
            state_dir=state_dir,
            scheduler_url=fields.text("scheduler_url"),
            client_token=fields.text("client_token"),
            processes=tuple(processes),
        )
    except ValueError as exc:
        raise DistError(
            f"{exc}; remove {path} if no cluster of this buildtools runs from {state_dir}"
        ) from None


def _reap(pid: int) -> None:
    """Collect `pid` if it is a child of this process that has exited (a test's cluster)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _is_ours(proc: ClusterProcess) -> bool:
    """Whether `proc.pid` runs and is still the sccache-dist started with its config."""
    _reap(proc.pid)
    try:
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        stat = Path(f"/proc/{proc.pid}/stat").read_text()
    except OSError:
        return False
    if stat.rpartition(")")[2].split()[:1] == ["Z"]:
        return False
    return os.fsencode(str(proc.config)) in cmdline


def _free_ports(count: int, host: str) -> list[int]:
    """`count` ports nothing listens on now (bound once by the kernel's choice, released)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


def _preexec(cpus: tuple[int, ...], tied: bool) -> Callable[[], None]:
    def setup() -> None:
        if cpus:
            os.sched_setaffinity(0, cpus)
        if tied:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return setup


def _spawn(
    argv: list[str], *, env: Mapping[str, str], log: Path, cpus: tuple[int, ...], tied: bool
) -> int:
    """Start one daemon in its own session, its output appended to `log`; its pid."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_preexec(cpus, tied),  # noqa: PLW1509 (affinity before exec)
        )
    return proc.pid


def _write_private(path: Path, text: str) -> None:
    write_atomic(path, text)
    path.chmod(0o600)


def _write_layout(layout: ClusterLayout, bwrap: Path) -> None:
    layout.state_dir.mkdir(parents=True, exist_ok=True)
    layout.state_dir.chmod(0o700)
    _write_private(layout.scheduler_config, scheduler_config(layout))
    for server in layout.servers:
        for sub in ("toolchains", "build"):
            (server.directory / sub).mkdir(parents=True, exist_ok=True)
        _write_private(server.config, server_config(layout, server, bwrap=bwrap))


@dataclass(frozen=True, kw_only=True)
class UpRequest:
    """What `dist up` was asked for."""

    state_dir: Path
    servers: int = 2
    cores: int = 1
    host: str = "127.0.0.1"
    wait_seconds: float = 60.0
    tied: bool = False  # the daemons die with this process (tests, benchmarks)


def cluster_up(
    request: UpRequest, *, env: Mapping[str, str], runner: ProcessRunner
) -> ClusterState:
    """Start the cluster; DistError when one is up already or it does not come up in time
    (then nothing it started is left running)."""
    state_dir = request.state_dir
    state_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(state_dir / ".lock", waiting=f"another `dist` command uses {state_dir}"):
        previous = read_state(state_dir)
        if previous is not None:
            alive = [p for p in previous.processes if _is_ours(p)]
            if alive:
                raise DistError(
                    f"a cluster is up already ({previous.scheduler_url}, pids "
                    f"{', '.join(str(p.pid) for p in alive)}, state in {state_dir}); "
                    "stop it with `buildtools dist down` first"
                )
            (state_dir / STATE_FILE).unlink()
        if os.geteuid() != 0:
            raise DistError(
                "sccache-dist build servers must run as root (the overlay builder's "
                "bubblewrap sandbox; sccache's docs/DistributedQuickstart.md); run "
                "`buildtools dist up` as root, or in a container"
            )
        dist = find_tool("sccache-dist", env)
        version_of(dist, runner, env)
        bwrap = find_bwrap(env)
        layout = plan_cluster(
            state_dir=state_dir,
            servers=request.servers,
            cores=request.cores,
            allowed_cpus=sorted(os.sched_getaffinity(0)),
            ports=_free_ports(request.servers + 1, request.host),
            host=request.host,
        )
        _write_layout(layout, bwrap)
        daemon_env = {
            **env,
            "SCCACHE_NO_DAEMON": "1",
            "SCCACHE_LOG": env.get("SCCACHE_LOG", "info"),
        }
        processes = [
            ClusterProcess(
                role="scheduler",
                pid=_spawn(
                    [str(dist), "scheduler", "--config", str(layout.scheduler_config)],
                    env=daemon_env,
                    log=layout.scheduler_log,
                    cpus=(),
                    tied=request.tied,
                ),
                config=layout.scheduler_config,
                log=layout.scheduler_log,
                addr=layout.scheduler_addr,
            )
        ]
        for server in layout.servers:
            processes.append(
                ClusterProcess(
                    role="server",
                    pid=_spawn(
                        [str(dist), "server", "--config", str(server.config)],
                        env=daemon_env,
                        log=server.log,
                        cpus=server.cpus,
                        tied=request.tied,
                    ),
                    config=server.config,
                    log=server.log,
                    addr=server.addr,
                    cpus=server.cpus,
                )
            )
        state = ClusterState(
            state_dir=state_dir,
            scheduler_url=layout.scheduler_url,
            client_token=layout.client_token,
            processes=tuple(processes),
        )
        _write_private(state_dir / STATE_FILE, json.dumps(state.to_json(), indent=2) + "\n")
        try:
            _wait_registered(state, request, env)
        except BaseException:
            _stop(state)
            (state_dir / STATE_FILE).unlink(missing_ok=True)
            raise
        return state


def _wait_registered(state: ClusterState, request: UpRequest, env: Mapping[str, str]) -> None:
    """Until the scheduler counts every server (DistError at the deadline, or when a daemon
    exits: its log's last lines say why)."""
    deadline = time.monotonic() + request.wait_seconds
    said: SchedulerStatus | str = "not asked yet"
    while time.monotonic() < deadline:
        for proc in state.processes:
            if not _is_ours(proc):
                raise DistError(
                    f"the {proc.role} at {proc.addr} exited at start; its log "
                    f"({proc.log}) ends: {_tail(proc.log)}"
                )
        said = scheduler_status(state.scheduler_url, state.client_token, env=env, seconds=2.0)
        if isinstance(said, SchedulerStatus) and said.num_servers >= request.servers:
            return
        time.sleep(0.3)
    raise DistError(
        f"the cluster did not come up within {request.wait_seconds:g} s (scheduler: {said}); "
        f"scheduler log ends: {_tail(state.processes[0].log)}"
    )


def _signal_group(proc: ClusterProcess, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _stop(state: ClusterState) -> list[str]:
    """TERM every recorded process group still ours, KILL what outlives the grace period;
    what was stopped, one entry each."""
    running = [p for p in state.processes if _is_ours(p)]
    for proc in running:
        _signal_group(proc, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while time.monotonic() < deadline and any(_is_ours(p) for p in running):
        time.sleep(0.1)
    for proc in running:
        if _is_ours(proc):
            _signal_group(proc, signal.SIGKILL)
    for proc in running:
        _reap(proc.pid)
    return [f"{p.role} {p.addr} (pid {p.pid})" for p in running]


def cluster_down(state_dir: Path) -> list[str]:
    """Stop the recorded cluster; what was stopped (DistError when none is recorded)."""
    with file_lock(state_dir / ".lock", waiting=f"another `dist` command uses {state_dir}"):
        state = read_state(state_dir)
        if state is None:
            raise DistError(f"no cluster is recorded in {state_dir}; nothing to stop")
        stopped = _stop(state)
        (state_dir / STATE_FILE).unlink(missing_ok=True)
        return stopped


def kill_server(state: ClusterState, index: int) -> ClusterProcess:
    """SIGKILL build server `index` (a server dying mid-build, for tests and benchmarks)."""
    proc = state.servers[index]
    if _is_ours(proc):
        _signal_group(proc, signal.SIGKILL)
        _reap(proc.pid)
    return proc
