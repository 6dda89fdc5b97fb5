"""`buildtools dist up/down/status`: an sccache-dist scheduler and N sandboxed build servers
on loopback, for development, tests and benchmarks.

`up` writes every config and token into a state directory (0700; files 0600), starts the
scheduler and the servers as daemons (`SCCACHE_NO_DAEMON=1`, so the pid recorded is the
process itself, in a session of its own), pins server i to its CPUs (`--cores`: sccache
counts the CPUs a server may use, `available_parallelism`, and the scheduler gives it at most
twice as many jobs), waits until every server has registered, and records the pids in
`cluster.json`. The daemons outlive `up` (that is their point); `down` ends each process
group (TERM, then KILL after a grace period), only when a recorded pid is still the process
it started: the same start time (a pid the kernel gave to another process since differs),
the same executable (`/proc/<pid>/exe`) and its config on its command line. `tied=True`
(tests, benchmarks) makes them die with the process that started them (PR_SET_PDEATHSIG), so
nothing outlives a crashed test.

The state directory holds a token and names processes to kill, so it must be this user's
own (`files.private_dir`: not a link, not another user's, not writable by others) and
`cluster.json` is read without following a link (`files.read_private`); its URL and token
are checked as `--distribute` and `$BUILDTOOLS_DIST_TOKEN` are.
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
from ..errors import ConfigError, DistError
from ..files import private_dir, read_private, write_atomic
from ..jsonfields import Fields, decode_json
from ..locks import file_lock
from ..process import ProcessRunner
from .clusterconfig import (
    ClusterLayout,
    check_token,
    parse_scheduler_url,
    plan_cluster,
    scheduler_config,
    server_config,
)
from .schedstatus import SchedulerStatus, scheduler_status
from .tools import find_bwrap, find_tool, version_of

STATE_FILE = "cluster.json"
# v2: each process recorded with its start time and executable (what `down` verifies)
STATE_SCHEMA = "torch-buildtools/dist-cluster/v2"
_STATE_MAX_BYTES = 1 << 20
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
    # who the pid was when it was started: its start time (clock ticks after boot,
    # /proc/<pid>/stat field 22) and its executable; `down` kills only that process
    started: int = 0
    exe: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "role": self.role,
            "pid": self.pid,
            "config": str(self.config),
            "log": str(self.log),
            "addr": self.addr,
            "cpus": list(self.cpus),
            "started": self.started,
            "exe": self.exe,
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
    path = private_dir(state_dir) / STATE_FILE
    try:
        raw = read_private(path, max_bytes=_STATE_MAX_BYTES)
    except FileNotFoundError:
        return None
    try:
        fields = Fields(decode_json(raw, what=str(path)), str(path))
        if fields.text("schema") != STATE_SCHEMA:
            raise ValueError(f"{path}: not {STATE_SCHEMA}")
        processes = tuple(_read_process(item) for item in fields.objects("processes"))
        return ClusterState(
            state_dir=state_dir,
            scheduler_url=parse_scheduler_url(
                fields.text("scheduler_url"), what=f"{path}: scheduler_url"
            ),
            client_token=check_token(fields.text("client_token"), what=f"{path}: client_token"),
            processes=processes,
        )
    except (ValueError, ConfigError) as exc:
        raise DistError(
            f"{exc}; remove {path} if no cluster of this buildtools runs from {state_dir}"
        ) from None


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _read_process(item: Fields) -> ClusterProcess:
    pid, started, cpus = item.data.get("pid"), item.data.get("started"), item.items("cpus")
    if not _whole(pid) or int(str(pid)) <= 1:
        raise ValueError(f"{item.path}.pid: not a process id")
    if not _whole(started) or int(str(started)) <= 0:
        raise ValueError(f"{item.path}.started: not a process start time")
    if not all(_whole(c) for c in cpus):
        raise ValueError(f"{item.path}.cpus: not a list of CPU numbers")
    return ClusterProcess(
        role=item.choice("role", ("scheduler", "server")),
        pid=int(str(pid)),
        config=Path(item.text("config")),
        log=Path(item.text("log")),
        addr=item.text("addr"),
        cpus=tuple(int(str(c)) for c in cpus),
        started=int(str(started)),
        exe=item.text("exe"),
    )


def _reap(pid: int) -> None:
    """Collect `pid` if it is a child of this process that has exited (a test's cluster)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _identity(pid: int) -> tuple[int, str] | None:
    """(start time, executable) of a running process, None when it is gone or a zombie
    (or its executable cannot be read: then it is not provably ours)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        exe = str(Path(f"/proc/{pid}/exe").readlink())
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after "pid (comm)": field 3 on
    if len(fields) < 20 or fields[0] == "Z" or not fields[19].isdigit():
        return None
    return int(fields[19]), exe


def _is_ours(proc: ClusterProcess) -> bool:
    """Whether `proc.pid` runs and is still the sccache-dist `up` started: its start time
    and executable as recorded (a reused pid has another start time), its config on its
    command line."""
    _reap(proc.pid)
    if _identity(proc.pid) != (proc.started, proc.exe):
        return False
    try:
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
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
) -> tuple[int, int, str]:
    """Start one daemon in its own session, its output appended to `log`; (its pid, start
    time, executable), read once Popen has seen it exec."""
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
    identity = _identity(proc.pid)
    if identity is None:  # it exited at once: recorded as nothing `down` could ever kill
        return proc.pid, 0, ""
    return proc.pid, *identity


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
    state_dir = private_dir(request.state_dir)
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
        pid, started, exe = _spawn(
            [str(dist), "scheduler", "--config", str(layout.scheduler_config)],
            env=daemon_env,
            log=layout.scheduler_log,
            cpus=(),
            tied=request.tied,
        )
        processes = [
            ClusterProcess(
                role="scheduler",
                pid=pid,
                config=layout.scheduler_config,
                log=layout.scheduler_log,
                addr=layout.scheduler_addr,
                started=started,
                exe=exe,
            )
        ]
        for server in layout.servers:
            pid, started, exe = _spawn(
                [str(dist), "server", "--config", str(server.config)],
                env=daemon_env,
                log=server.log,
                cpus=server.cpus,
                tied=request.tied,
            )
            processes.append(
                ClusterProcess(
                    role="server",
                    pid=pid,
                    config=server.config,
                    log=server.log,
                    addr=server.addr,
                    cpus=server.cpus,
                    started=started,
                    exe=exe,
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
    private_dir(state_dir)  # before the lock is created in it
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
