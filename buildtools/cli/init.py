"""`buildtools init [PATH]`: adopt buildtools in an existing extension's repository.

Inspects the repository, writes a commented matrix.yaml (release, pr and local profiles, a
smoke command that runs its tests) and a noxfile.py with the sessions the generated
workflows call, never overwriting a file (`--dry-run` prints them instead), reports the
source-level risks with their remedies, and prints the next three commands.
"""

from __future__ import annotations

__all__ = ["add_init_parser"]

import argparse
import ast
import os
import tempfile
from pathlib import Path
from typing import Any, TextIO

from ..adopt import (
    choose_matrix,
    cuda_headers_in_cpu_build,
    find_risks,
    inspect_project,
    origin,
    render_matrix,
    render_noxfile,
)
from ..adopt.render import INSTALL_ENV
from ..errors import ConfigError
from ..files import write_atomic
from ..knowledge import load_knowledge
from ..matrix.config import is_range, load_matrix
from ..planner.ranges import resolve_range
from ..planning import served_torch

_SESSIONS = ("plan", "build", "smoke", "index", "ci")


def add_init_parser(sub: Any) -> None:
    """`buildtools init`: matrix.yaml and noxfile.py for an existing extension."""
    p = sub.add_parser(
        "init",
        help="inspect an existing extension and write matrix.yaml and noxfile.py for it",
    )
    p.add_argument("path", nargs="?", type=Path, default=Path(), help="the repository")
    p.add_argument("--dry-run", action="store_true", help="print the files instead of writing")
    p.add_argument(
        "--torch",
        action="append",
        default=None,
        metavar="VERSION",
        help="torch releases of axes.torch (repeatable; default: the newest confirmed one "
        "and the one two minors before it)",
    )
    p.set_defaults(handler=cmd_init)


def _sessions_of(noxfile: Path) -> set[str]:
    try:
        tree = ast.parse(noxfile.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return set()
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def _validated(text: str, root: Path) -> None:
    """Load the proposed matrix.yaml through the ordinary validation (a bug here, not theirs)."""
    with tempfile.TemporaryDirectory(dir=root if root.is_dir() else None) as tmp:
        path = Path(tmp) / "matrix.yaml"
        path.write_text(text.replace("path: .", f"path: {root}"), encoding="utf-8")
        load_matrix(path)


def _where(source: str) -> str:
    """Where the noxfile installs buildtools from, in words."""
    if source[:1].isdigit():
        return f"the package index (torch-buildtools=={source}; {INSTALL_ENV} overrides)"
    if "://" in source:
        return f"{source}, where this buildtools came from ({INSTALL_ENV} overrides)"
    return (
        f"{source}, where this buildtools came from; a CI runner has no such path: set "
        f"{INSTALL_ENV} there to a version or a URL (git+https://…@TAG)"
    )


def cmd_init(args: argparse.Namespace, out: TextIO) -> int:
    """Inspect, propose, write what is missing, report risks, print the next commands."""
    root: Path = args.path.resolve()
    if not root.is_dir():
        raise ConfigError(f"{args.path}: not a directory")
    project = inspect_project(root)
    if not project.build_files:
        raise ConfigError(
            f"{root}: no setup.py, pyproject.toml or CMakeLists.txt: not an extension's "
            "repository (run init at its root)"
        )
    kb = load_knowledge()
    out.write(f"{root}: {project.describe()}\n")
    if project.cuda_gate:
        out.write(f"  CUDA decided by: {project.cuda_gate}\n")
    out.write(f"  tests: {project.tests_dir or 'none found'}; import: {project.module or '?'}\n")

    matrix_path = root / "matrix.yaml"
    if matrix_path.is_file():
        existing = load_matrix(matrix_path, knowledge=kb).matrix
        torch_axis = tuple(
            v
            for t in existing.axes.torch
            if t != "current"
            for v in (resolve_range(t, kb, None).versions if is_range(t) else (t,))
        )
        rocm = any(a.startswith("rocm") for a in existing.axes.accelerator)
        cpu = "cpu" in existing.axes.accelerator
        out.write(f"matrix.yaml exists: kept as it is (its torch: {', '.join(torch_axis)})\n")
        oldest = min(torch_axis, key=lambda v: tuple(int(x) for x in v.split(".")[:3]))
    else:
        # CUDA headers outside any #if in the CPU build's sources: a CUDA-only project
        cpu_blockers = cuda_headers_in_cpu_build(project) if project.has_cuda else []
        served, why = (None, "asked for a given torch") if args.torch else served_torch(os.environ)
        choice = choose_matrix(
            project,
            kb,
            tuple(args.torch or ()),
            cpu_build=not cpu_blockers,
            served=served.versions if served else None,
        )
        out.write(
            f"  torch: {', '.join(choice.torch)} ("
            + (
                f"the newest the knowledge base confirms and {served.source} serves"
                if served
                else f"the knowledge base alone: {why}"
            )
            + ")\n"
        )
        if cpu_blockers:
            out.write(
                f"  CUDA-only, so the proposed matrix has no CPU cell (accelerators: "
                f"{', '.join(choice.accelerators)}): {cpu_blockers[0].message}\n"
            )
        text = render_matrix(project, choice)
        _validated(text, root)
        oldest, rocm = choice.torch[0], False
        cpu = "cpu" in choice.accelerators
        if args.dry_run:
            out.write(f"--- would write {matrix_path}:\n{text}")
        else:
            write_atomic(matrix_path, text)
            out.write(f"wrote {matrix_path}\n")

    noxfile = root / "noxfile.py"
    if noxfile.is_file():
        missing = [s for s in _SESSIONS if s not in _sessions_of(noxfile)]
        if missing:
            out.write(
                f"noxfile.py exists: kept; add the sessions the workflows call: "
                f"{', '.join(missing)} (`buildtools init --dry-run` prints them)\n"
            )
        else:
            out.write("noxfile.py exists and has every session the workflows call\n")
    else:
        source = origin.running_source()
        text = render_noxfile(source)
        if args.dry_run:
            out.write(f"--- would write {noxfile}:\n{text}")
        else:
            write_atomic(noxfile, text)
            out.write(f"wrote {noxfile}\n")
        out.write(f"  noxfile.py installs buildtools from {_where(source)}\n")

    risks = find_risks(project, oldest_torch=oldest, rocm=rocm, cpu=cpu)
    if risks:
        out.write(f"\n{len(risks)} source-level risk(s), before any build:\n")
        for risk in risks:
            where = f" ({', '.join(risk.where[:3])}{' …' if len(risk.where) > 3 else ''})"
            out.write(f"  risk   {risk.code}: {risk.message}{where if risk.where else ''}\n")
            out.write(f"         remedy: {risk.remedy}\n")
    else:
        out.write("\nno source-level risk found\n")
    out.write(
        "\nnext:\n"
        "  nox -s plan -- --profile release   # every cell the release builds\n"
        "  nox -s build                       # the local profile's cell: build, repair, check\n"
        "  nox -s smoke                       # install that wheel and run project.smoke\n"
    )
    return 0
