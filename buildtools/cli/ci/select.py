"""`buildtools ci select`: the smoke-passed wheels of the downloaded artifacts."""

from __future__ import annotations

__all__ = ["add_parser", "cmd_select"]

import argparse
import os
from pathlib import Path
from typing import Any, TextIO

from ...cisteps.assets import (
    built_wheels,
    read_selection,
    select_wheels,
    selection_lines,
)
from ...errors import ImmutableWheelError


def cmd_select(args: argparse.Namespace, out: TextIO) -> int:
    built = None
    if args.built_env:
        env = dict(os.environ)
        built = built_wheels(env.get(name, "") for name in args.built_env)
    selection = select_wheels(args.wheels, args.require_smoke, args.out, built=built)
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
        metavar="VAR",
        help="a variable holding toJSON(needs.<build job>.outputs): every wheel must be one a "
        "build job of this run reported (repeat per build job)",
    )
    p.set_defaults(handler=cmd_select)
