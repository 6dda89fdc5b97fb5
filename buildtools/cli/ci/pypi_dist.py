"""`buildtools ci pypi-dist`: the ci.pypi variant's wheels without the local label."""

from __future__ import annotations

__all__ = ["add_parser", "cmd_pypi_dist"]

import argparse
from pathlib import Path
from typing import Any, TextIO

from ...cisteps.assets import (
    read_selection,
)
from ...errors import PlanError, PublishError
from ...matrix.config import load_matrix
from ...planning import default_matrix_path
from ...wheel.meta import public_wheel


def cmd_pypi_dist(args: argparse.Namespace, out: TextIO) -> int:
    mf = load_matrix(args.matrix or default_matrix_path())
    pypi = mf.matrix.ci.pypi
    if pypi is None:
        raise PlanError("ci.pypi is not set in matrix.yaml: no variant goes to PyPI")
    selection = read_selection(args.selection)
    prefix = f"torch{pypi.torch}-{pypi.accelerator}-"
    wanted = {w: sha for w, sha, job in selection.published if job.startswith(prefix)}
    if not wanted:
        raise PublishError(
            f"no published wheel of torch {pypi.torch} {pypi.accelerator} in {args.selection}: "
            "nothing goes to PyPI"
        )
    written = []
    for path in sorted(args.wheels.rglob("*.whl")):
        if path.name in wanted:
            written.append(public_wheel(path, out_dir=args.out))
    if len(written) != len(wanted):
        raise PublishError(f"{args.wheels}: not every selected wheel was downloaded")
    for path in written:
        out.write(f"  {path}\n")
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("pypi-dist", help="the ci.pypi variant's wheels without the local label")
    p.add_argument("wheels", type=Path)
    p.add_argument("--selection", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--matrix", type=Path, default=None)
    p.set_defaults(handler=cmd_pypi_dist)
