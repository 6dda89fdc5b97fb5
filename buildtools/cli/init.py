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
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from packaging.specifiers import InvalidSpecifier
from packaging.version import Version

from ..adopt import (
    choose_matrix,
    cuda_headers_in_cpu_build,
    find_risks,
    inspect_project,
    origin,
    render_matrix,
    render_noxfile,
)
from ..adopt.archflags import describe_flags
from ..adopt.inspect import SOURCE_BYTES, Inspection
from ..adopt.scaffold import INSTALL_ENV, choose_archs
from ..errors import ConfigError
from ..files import open_within, read_within, write_atomic
from ..knowledge import Knowledge, load_knowledge
from ..matrix.config import is_range, load_matrix
from ..model import Accelerator
from ..planner.ranges import resolve_range
from ..planning import served_torch

_SESSIONS = ("plan", "build", "smoke", "index", "ci")


@dataclass(frozen=True, kw_only=True)
class _Axes:
    """What the risks are measured against: the oldest torch, ROCm cells, CPU cells."""

    oldest: str
    rocm: bool
    cpu: bool


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
        type=_torch_releases,
        metavar="VERSION",
        help="torch releases of axes.torch: a release (2.11.0), a minor (2.11: its newest "
        "patch) or a range ('>=2.10': the newest patch of each minor in it); repeatable "
        "(default: the newest confirmed one and the one two minors before it)",
    )
    p.set_defaults(handler=cmd_init)


def _torch_releases(text: str) -> tuple[str, ...]:
    """--torch VALUE as the releases it names, from the knowledge base; anything else is
    argparse's one line and exit code 2 (never a KeyError)."""
    kb = load_knowledge()
    known = kb.torch_versions()
    hint = (
        f"known: {known[0]} … {known[-1]} (`buildtools knowledge` lists them); write a "
        "release (2.11.0), a minor (2.11) or a range ('>=2.10')"
    )
    if not re.fullmatch(r"[0-9A-Za-z.,<>=!~* ]{1,64}", text):
        raise argparse.ArgumentTypeError(f"{text[:80]!r} is not a torch release; {hint}")
    if is_range(text):
        try:
            versions = resolve_range(text, kb, None).versions
        except InvalidSpecifier:
            raise argparse.ArgumentTypeError(f"{text!r} is not a version range; {hint}") from None
        if not versions:
            raise argparse.ArgumentTypeError(f"{text!r} holds no torch release; {hint}")
        return versions
    if text in known:
        return (text,)
    if text in kb.torch:
        return (kb.torch[text].patches[-1],)
    raise argparse.ArgumentTypeError(f"{text!r} is not a torch release buildtools knows; {hint}")


def _sessions_of(root: Path) -> set[str]:
    """The functions of root/noxfile.py (read through `read_within`: no link out of it)."""
    try:
        text = read_within(root, "noxfile.py", max_bytes=SOURCE_BYTES).decode(errors="replace")
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def _refuse_links_out(root: Path, *names: str) -> None:
    """UnsafeArtefactError (one line, exit 15) when one of `names` is a symbolic link
    leading out of `root`: init reads and keeps these files as the repository's own."""
    for name in names:
        try:
            open_within(root, name).close()
        except OSError:
            continue  # missing or not a file: the reader of each says so


def _cudas(accelerators: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    parsed = [Accelerator.parse(a) for a in accelerators if a.startswith("cu")]
    versions = {a.version for a in parsed if a.kind == "cuda" and a.version}
    return tuple(sorted(versions, key=Version))


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


def _keep_matrix(path: Path, project: Inspection, kb: Knowledge, out: TextIO) -> _Axes:
    """matrix.yaml exists: kept; its axes for the risks, and what the arch flags compile."""
    existing = load_matrix(path, knowledge=kb).matrix
    torch_axis = tuple(
        v
        for t in existing.axes.torch
        if t != "current"
        for v in (resolve_range(t, kb, None).versions if is_range(t) else (t,))
    )
    out.write(f"matrix.yaml exists: kept as it is (its torch: {', '.join(torch_axis)})\n")
    for line in describe_flags(project.arch_flags, _cudas(existing.axes.accelerator)):
        out.write(line + "\n")
    if not torch_axis:  # `current` alone: the oldest a risk is measured against
        torch_axis = (kb.torch_versions()[-1],)
    return _Axes(
        oldest=min(torch_axis, key=Version),
        rocm=any(a.startswith("rocm") for a in existing.axes.accelerator),
        cpu="cpu" in existing.axes.accelerator,
    )


def _propose_matrix(
    args: argparse.Namespace, root: Path, project: Inspection, kb: Knowledge, out: TextIO
) -> _Axes:
    """No matrix.yaml: propose one (validated), written or printed."""
    # CUDA headers outside any #if in the CPU build's sources: a CUDA-only project
    cpu_blockers = cuda_headers_in_cpu_build(project) if project.has_cuda else []
    served, why = (None, "asked for a given torch") if args.torch else served_torch(os.environ)
    asked = tuple(dict.fromkeys(v for group in args.torch or () for v in group))
    choice = choose_matrix(
        project,
        kb,
        tuple(sorted(asked, key=Version)),
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
    for line in describe_flags(project.arch_flags, _cudas(choice.accelerators)):
        out.write(line + "\n")
    archs = choose_archs(project, choice, kb)
    for arch in archs:
        if arch.why_not:
            out.write(f"  {arch.accelerator}: arch_list not written: {arch.why_not}\n")
    text = render_matrix(project, choice, archs)
    _validated(text, root)
    path = root / "matrix.yaml"
    if args.dry_run:
        out.write(f"--- would write {path}:\n{text}")
    else:
        write_atomic(path, text)
        out.write(f"wrote {path}\n")
    return _Axes(oldest=choice.torch[0], rocm=False, cpu="cpu" in choice.accelerators)


def _noxfile(args: argparse.Namespace, root: Path, out: TextIO) -> None:
    """noxfile.py: kept when there is one (naming the sessions it lacks), else proposed."""
    noxfile = root / "noxfile.py"
    if noxfile.is_file():
        missing = [s for s in _SESSIONS if s not in _sessions_of(root)]
        if missing:
            out.write(
                f"noxfile.py exists: kept; add the sessions the workflows call: "
                f"{', '.join(missing)} (`buildtools init --dry-run` prints them)\n"
            )
        else:
            out.write("noxfile.py exists and has every session the workflows call\n")
        return
    source = origin.running_source()
    text = render_noxfile(source)
    if args.dry_run:
        out.write(f"--- would write {noxfile}:\n{text}")
    else:
        write_atomic(noxfile, text)
        out.write(f"wrote {noxfile}\n")
    out.write(f"  noxfile.py installs buildtools from {_where(source)}\n")


def cmd_init(args: argparse.Namespace, out: TextIO) -> int:
    """Inspect, propose, write what is missing, report risks, print the next commands."""
    root: Path = args.path.resolve()
    if not root.is_dir():
        raise ConfigError(f"{args.path}: not a directory")
    _refuse_links_out(root, "matrix.yaml", "noxfile.py")
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
    if project.smoke_requires:
        out.write(f"  the tests import at top level: {', '.join(project.smoke_requires)}\n")
    for note in project.notes:
        out.write(f"  note: {note}\n")
    if (root / "matrix.yaml").is_file():
        axes = _keep_matrix(root / "matrix.yaml", project, kb, out)
    else:
        axes = _propose_matrix(args, root, project, kb, out)
    _noxfile(args, root, out)
    risks = find_risks(project, oldest_torch=axes.oldest, rocm=axes.rocm, cpu=axes.cpu)
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
