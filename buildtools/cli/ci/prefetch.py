"""`buildtools ci prefetch`: download one group's wheels into the prefetch dir."""

from __future__ import annotations

__all__ = ["add_parser", "cmd_prefetch"]

import argparse
import os
import sys
from typing import Any, TextIO

from ...ciplan import layout
from ...ciplan.entries import matrix_entries
from ...cisteps.cache_jobs import prefetch
from ...context import RunContext
from ...errors import PlanError
from ...knowledge import load_knowledge
from ...planning import host_python
from ...process import SubprocessRunner
from ...toolchain.buildrequires import extra_build_requirements
from ...workflows.pins import load_pins
from ..common import add_plan_args, plan_from_args


def cmd_prefetch(args: argparse.Namespace, out: TextIO) -> int:
    full, project_dir = plan_from_args(args)
    extra = extra_build_requirements(project_dir)
    hosted = load_pins().hosted_runners.labels
    entries = matrix_entries(
        full,
        full,
        profile=args.profile or "",
        matrix=str(args.matrix or layout.DEFAULT_MATRIX),
        ci_python=host_python(),
        hosted=hosted,
        build_requires=extra,
    )
    ids = {e.id for e in entries if e.prefetch_key == args.group}
    if not ids:
        raise PlanError(f"prefetch: no job of this profile has the download group {args.group}")
    dest = prefetch(
        [j for j in full.jobs if j.id in ids],
        kb=load_knowledge(),
        ctx=RunContext(processes=SubprocessRunner(), env=dict(os.environ), log=sys.stdout),
        extra=extra,
    )
    out.write(f"downloads of {len(ids)} job(s) in {dest}\n")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("prefetch", help="download one group's wheels into the prefetch dir")
    add_plan_args(p)
    p.add_argument("--group", required=True, help="the download group (prefetch_key)")
    p.set_defaults(handler=cmd_prefetch)
