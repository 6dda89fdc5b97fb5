"""What several verbs share: the plan options and the plan they select; numeric options."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from ..planner import Plan
from ..planning import PlanRequest, load_plan

MAX_SECONDS = 7 * 24 * 3600.0  # a week: beyond any build, smoke or probe
MAX_COUNT = 4096  # jobs, compilers at once


def positive_int(text: str) -> int:
    """argparse type: a whole number from 1 to MAX_COUNT."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    if value > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"{value} is more than {MAX_COUNT}")
    return value


def seconds(text: str) -> float:
    """argparse type: a duration in seconds, finite, above 0, at most a week (`nan`, `inf`,
    `1e400` and `-5` would each disable a deadline or make it meaningless)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0 or value > MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds above 0 and at most {MAX_SECONDS:g} (a week)"
        )
    return value


def release(text: str) -> str:
    """argparse type: a torch release or minor (`2.14`, `2.16.0`): a PEP 440 public version
    of at most 32 characters (a 5,000-digit one would pass PEP 440 and then exceed Python's
    integer-length limit)."""
    from packaging.version import InvalidVersion, Version

    try:
        if len(text) > 32:
            raise ValueError(text)
        version = Version(text)
    except (InvalidVersion, ValueError):
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r}{'…' if len(text) > 40 else ''} is not a torch release, e.g. 2.14 "
            "or 2.16.0"
        ) from None
    if version.local is not None or version.is_prerelease or version.is_devrelease:
        raise argparse.ArgumentTypeError(f"{text!r} is not a final torch release, e.g. 2.14")
    return text


def add_plan_args(p: argparse.ArgumentParser) -> None:
    """The options of every verb that plans (plan, build, ci matrix)."""
    p.add_argument(
        "--matrix", type=Path, default=None, help="matrix.yaml to read (default: ./matrix.yaml)"
    )
    p.add_argument(
        "--profile", default=None, help="named profile to select (default: default_profile)"
    )
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="GLOB",
        help="select cells by id glob (repeatable)",
    )
    p.add_argument("--strict", action="store_true", help="fail when a requested cell never existed")
    p.add_argument(
        "--torch",
        dest="torch_axis",
        action="append",
        default=None,
        metavar="VERSION",
        help="replace axes.torch (repeatable): a release, or 'current' for the torch of the "
        "running environment (then the default profile is not applied)",
    )
    p.add_argument(
        "--torch-python",
        type=Path,
        default=None,
        metavar="PYTHON",
        help="the interpreter whose torch 'current' means (default: $BUILDTOOLS_TORCH_PYTHON, "
        "else the one running buildtools)",
    )


def plan_request(args: argparse.Namespace) -> PlanRequest:
    """The PlanRequest of parsed `add_plan_args` options."""
    torch_axis = getattr(args, "torch_axis", None)
    return PlanRequest(
        matrix=args.matrix,
        profile=args.profile,
        only=tuple(args.only),
        strict=args.strict,
        torch_axis=tuple(torch_axis) if torch_axis is not None else None,
        torch_python=getattr(args, "torch_python", None),
    )


def plan_from_args(args: argparse.Namespace) -> tuple[Plan, Path]:
    """The plan the options select, and the project directory."""
    return load_plan(plan_request(args))
