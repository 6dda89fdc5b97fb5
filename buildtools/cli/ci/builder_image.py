"""`buildtools ci builder-image`: build one job's builder image; save or push it."""

from __future__ import annotations

__all__ = ["add_parser", "cmd_builder_image"]

import argparse
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from ...cisteps.cache_jobs import build_image
from ...context import RunContext
from ...errors import PlanError
from ...knowledge import load_knowledge
from ...process import SubprocessRunner
from ..common import add_plan_args, plan_from_args


def _jobs(args: argparse.Namespace) -> list[Any]:
    selected, _ = plan_from_args(args)
    return list(selected.jobs)


def cmd_builder_image(args: argparse.Namespace, out: TextIO) -> int:
    jobs = _jobs(args)
    if len(jobs) != 1:
        raise PlanError(f"builder-image: --only selects {len(jobs)} jobs; select one job")
    tag = build_image(
        jobs[0],
        kb=load_knowledge(),
        ctx=RunContext(processes=SubprocessRunner(), env=dict(os.environ), log=sys.stdout),
        save=args.save,
        push=args.push,
    )
    out.write(f"builder image {tag}\n")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("builder-image", help="build one job's builder image; save or push it")
    add_plan_args(p)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--save", type=Path, default=None, help="`docker save` archive")
    where.add_argument("--push", default=None, help="registry reference to push to")
    p.set_defaults(handler=cmd_builder_image)
