"""`buildtools dist up|down|status`: a loopback sccache-dist cluster (scheduler + N sandboxed
build servers) for `buildtools build --distribute`, in development, tests and benchmarks."""

from __future__ import annotations

__all__ = ["add_dist_parser"]

import argparse
import json
import os
from pathlib import Path
from typing import Any, TextIO

from ..distcompile.client import DIST_TOKEN_ENV
from ..distcompile.cluster import (
    UpRequest,
    cluster_down,
    cluster_up,
    default_state_dir,
    read_state,
)
from ..distcompile.schedstatus import SchedulerStatus, scheduler_status
from ..errors import DistError
from ..process import SubprocessRunner
from ..untrusted import shown
from .common import positive_int, seconds


def add_dist_parser(sub: Any) -> None:
    """`buildtools dist`: start, stop and show a loopback sccache-dist cluster."""
    p = sub.add_parser(
        "dist",
        help="start/stop a loopback sccache-dist cluster (scheduler + sandboxed build servers)",
    )
    verbs = p.add_subparsers(dest="dist_verb", required=True, metavar="ACTION")
    up = verbs.add_parser("up", help="start a scheduler and N build servers on 127.0.0.1")
    up.add_argument("--servers", type=positive_int, default=2, help="build servers (default 2)")
    up.add_argument(
        "--cores",
        type=positive_int,
        default=1,
        help="CPUs each server is pinned to and offers the scheduler (default 1)",
    )
    up.add_argument(
        "--wait",
        type=seconds,
        default=60.0,
        metavar="SECONDS",
        help="how long the servers may take to register (default 60)",
    )
    down = verbs.add_parser("down", help="stop the cluster `dist up` started")
    status = verbs.add_parser("status", help="the recorded cluster and what its scheduler says")
    status.add_argument("--json", action="store_true", help="print it as JSON")
    for q in (up, down, status):
        q.add_argument(
            "--state-dir",
            type=Path,
            default=None,
            help="configs, tokens, logs and pids (default: <cache dir>/dist, "
            "~/.cache/torch-buildtools/dist)",
        )
    p.set_defaults(handler=cmd_dist)


def cmd_dist(args: argparse.Namespace, out: TextIO) -> int:
    env = dict(os.environ)
    state_dir = (args.state_dir or default_state_dir(env)).resolve()
    if args.dist_verb == "up":
        state = cluster_up(
            UpRequest(
                state_dir=state_dir,
                servers=args.servers,
                cores=args.cores,
                wait_seconds=args.wait,
            ),
            env=env,
            runner=SubprocessRunner(default_timeout=60),
        )
        out.write(f"scheduler: {state.scheduler_url} (pid {state.processes[0].pid})\n")
        for proc in state.servers:
            cpus = ",".join(str(c) for c in proc.cpus)
            out.write(f"server:    {proc.addr} (pid {proc.pid}, CPUs {cpus}) log {proc.log}\n")
        out.write(
            f"build through it: buildtools build --distribute {state.scheduler_url} "
            f"(its client token is in {state_dir}; elsewhere set ${DIST_TOKEN_ENV})\n"
            "stop it: buildtools dist down\n"
        )
        return 0
    if args.dist_verb == "down":
        for stopped in cluster_down(state_dir):
            out.write(f"stopped {stopped}\n")
        return 0
    recorded = read_state(state_dir)
    if recorded is None:
        raise DistError(
            f"no cluster is recorded in {state_dir}; start one with `buildtools dist up`"
        )
    said = scheduler_status(recorded.scheduler_url, recorded.client_token, env=env)
    up = isinstance(said, SchedulerStatus)
    if args.json:
        report = {
            "scheduler_url": recorded.scheduler_url,
            "state_dir": str(state_dir),
            "processes": [p.to_json() for p in recorded.processes],
            "status": said.__dict__ if isinstance(said, SchedulerStatus) else {"error": said},
        }
        out.write(json.dumps(report, indent=2) + "\n")
    else:
        answer = (  # the scheduler's words: shown printable, its URL redacted
            f"{said.num_servers} server(s), {said.num_cpus} core(s), {said.in_progress} job(s) "
            "in progress"
            if isinstance(said, SchedulerStatus)
            else f"not answering ({said})"
        )
        out.write(shown(f"scheduler: {recorded.scheduler_url}: {answer}", newlines=False) + "\n")
    if not up:
        raise DistError(f"the cluster recorded in {state_dir} does not answer")
    return 0
