"""`buildtools ci select`: the smoke-passed wheels of the downloaded artifacts."""

from __future__ import annotations

__all__ = ["add_parser", "cmd_select"]

import argparse
import os
from pathlib import Path
from typing import Any, TextIO

from ...cisteps.assets import (
    SmokeBinding,
    built_wheels,
    read_selection,
    reported_smoke,
    select_wheels,
    selection_lines,
)
from ...errors import ImmutableWheelError, PublishError


def _family_var(value: str, flag: str, *, required: bool) -> tuple[str | None, str]:
    """`FAMILY=VAR` (or `VAR` where the family may be left out) → (family, VAR)."""
    family, sep, var = value.rpartition("=")
    if not sep and not required:
        return None, var
    if not family or not var:
        raise PublishError(f"{flag} {value!r}: expected FAMILY=VAR (cuda=BT_BUILT_BUILD_CUDA)")
    return family, var


def cmd_select(args: argparse.Namespace, out: TextIO) -> int:
    env = dict(os.environ)
    built_vars = [_family_var(v, "--built-env", required=False) for v in args.built_env]
    smoked_vars = [_family_var(v, "--smoked-env", required=True) for v in args.smoked_env]
    built = built_wheels(env.get(var, "") for _, var in built_vars) if built_vars else None
    binding = None
    if smoked_vars:
        if built is None or any(family is None for family, _ in built_vars):
            raise PublishError(
                "--smoked-env binds smoke reports to families: give every --built-env as "
                "FAMILY=VAR, so each wheel's family is known"
            )
        families = {}
        for family, var in built_vars:
            for name in built_wheels([env.get(var, "")]):
                families[name] = str(family)
        binding = SmokeBinding(
            reports=reported_smoke((str(f), env.get(var, "")) for f, var in smoked_vars),
            wheels=families,
        )
    selection = select_wheels(
        args.wheels, args.require_smoke, args.out, built=built, binding=binding
    )
    args.selection.write_text(selection.to_json(), encoding="utf-8")
    for line in selection_lines(selection):
        out.write(line + "\n")
    out.write(
        f"{len(selection.published)} wheel(s) selected, {len(selection.held_back)} held back\n"
    )
    if args.expect is not None:
        expected = {(w, s) for w, s, _ in read_selection(args.expect).published}
        got = {(w, s) for w, s, _ in selection.published}
        if expected != got:
            raise ImmutableWheelError(
                f"the wheels differ from the selection {args.expect} the publish job made "
                f"(only here: {sorted(w for w, _ in got - expected)}, only there: "
                f"{sorted(w for w, _ in expected - got)}); nothing is published"
            )
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("select", help="the smoke-passed wheels of the downloaded artifacts")
    p.add_argument("wheels", type=Path, help="the downloaded wheels-<job> artifacts")
    p.add_argument("--out", type=Path, required=True, help="where the selected wheels go")
    p.add_argument("--selection", type=Path, required=True, help="write selection.json here")
    p.add_argument("--require-smoke", action="append", type=Path, default=[], metavar="REPORT")
    p.add_argument(
        "--expect", type=Path, default=None, help="fail unless the same as this selection.json"
    )
    p.add_argument(
        "--built-env",
        action="append",
        default=[],
        metavar="[FAMILY=]VAR",
        help="a variable holding toJSON(needs.<build job>.outputs): every wheel must be one a "
        "build job of this run reported (repeat per build job; FAMILY: that job's family)",
    )
    p.add_argument(
        "--smoked-env",
        action="append",
        default=[],
        metavar="FAMILY=VAR",
        help="a variable holding toJSON(needs.<smoke job>.outputs) of a FAMILY smoke job: a "
        "report counts only when a smoke leg reported its sha256 (report_<leg>), and only for "
        "the wheels of that family (repeat per smoke job)",
    )
    p.set_defaults(handler=cmd_select)
