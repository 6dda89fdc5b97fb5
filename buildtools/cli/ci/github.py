"""`buildtools ci github`: write the GitHub Actions workflows of matrix.yaml under .github/
(or --check).
"""

from __future__ import annotations

__all__ = ["add_parser", "cmd_github"]

import argparse
from pathlib import Path
from typing import Any, TextIO

from ...errors import CiDriftError
from ...planning import default_matrix_path
from ...workflows.generate import check_command, check_files, generate, regen_command, write_files


def cmd_github(args: argparse.Namespace, out: TextIO) -> int:
    ci = generate(args.matrix or default_matrix_path(), root=args.root)
    regen = regen_command(ci.matrix)
    paths = [g.path for g in ci.files]
    if args.check:
        problems = check_files(ci)
        if problems:
            raise CiDriftError(
                f"the GitHub Actions workflows no longer match {ci.matrix}:\n"
                + "\n".join(problems)
                + f"\nregenerate them with `{regen}` (or `buildtools ci github`) and commit "
                + ", ".join(paths)
            )
        out.write(f"{len(ci.files)} file(s) match {ci.matrix}: " + ", ".join(paths) + "\n")
        return 0
    for path, what in write_files(ci, force=args.force):
        out.write(f"  {what:9}  {path}\n")
    out.write(f"commit them; `{check_command(ci.matrix)}` checks they stay current\n")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "github",
        help="write the GitHub Actions workflows of matrix.yaml under .github/ (or --check)",
    )
    p.add_argument("--matrix", type=Path, default=None, help="matrix.yaml (default: ./matrix.yaml)")
    p.add_argument(
        "--root",
        type=Path,
        default=None,
        help="repository root the workflows go under (default: the nearest parent of "
        "matrix.yaml with .git)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 14 when the files in the repository differ",
    )
    p.add_argument("--force", action="store_true", help="replace files that were not generated")
    p.set_defaults(handler=cmd_github)
