"""`buildtools ci status`: the status job: the run's verdict and final summary (published,
held back, failed).
"""

from __future__ import annotations

__all__ = ["add_parser", "cmd_status"]

import argparse
import os
from pathlib import Path
from typing import Any, TextIO

from ...ciplan import layout
from ...ciplan.shapes import (
    append_to,
    write_outputs,
)
from ...cisteps.verdict import (
    read_entries,
    reproduce_commands,
    run_status,
    status_markdown,
)
from ...errors import PlanError
from ...jsonfields import decode_json


def cmd_status(args: argparse.Namespace, out: TextIO) -> int:
    env = dict(os.environ)
    try:
        needs = decode_json(env.get(args.needs_env) or "{}", what=f"${args.needs_env}")
    except ValueError:
        raise PlanError(
            f"${args.needs_env}: not JSON (the workflow passes toJSON(needs))"
        ) from None
    path = args.entries or args.reports / "plan" / "entries.json"
    entries = read_entries(path) if path.is_file() else None
    status = run_status(workflow=args.workflow, needs=needs, entries=entries, reports=args.reports)
    text = status_markdown(status, reproduce=reproduce_commands(entries))
    append_to(env.get("GITHUB_STEP_SUMMARY"), text)
    failed = [j.job for j in status.jobs if not j.ok]
    description = (
        f"{len(status.published)} published, {len(status.failed)} failed"
        if status.ok
        else f"failed: {', '.join(failed)}"
    )[:140]
    write_outputs(
        env.get("GITHUB_OUTPUT"),
        {"state": "success" if status.ok else "failure", "description": description},
    )
    out.write(text)
    return 0 if status.ok else 1


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "status",
        help="the status job: the run's verdict and final summary (published, held back, failed)",
    )
    p.add_argument("--workflow", choices=layout.WORKFLOW_KINDS, required=True)
    p.add_argument(
        "--needs-env",
        default="NEEDS",
        metavar="VAR",
        help="the environment variable holding toJSON(needs) (default: NEEDS)",
    )
    p.add_argument(
        "--reports",
        type=Path,
        required=True,
        help="the downloaded reports: plan/, build-report-*/, smoke-*/, selection/",
    )
    p.add_argument(
        "--entries",
        type=Path,
        default=None,
        help="the plan's entries (default: REPORTS/plan/entries.json)",
    )
    p.set_defaults(handler=cmd_status)
