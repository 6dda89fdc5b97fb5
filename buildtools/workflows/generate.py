"""`buildtools ci github`: write the workflows of matrix.yaml, or check they are current.

Generation is deterministic: the plans are made with the CI interpreter's Python (the
pinned one, not the machine's), so the same matrix.yaml and buildtools give the same bytes
everywhere. `--check` compares the files in the repository with what would be written and
fails (exit code 14) naming each stale file and the command that regenerates it; a file
the generator wrote once but no longer writes (`self-hosted.yml` after the last self-hosted
runner went) is stale too, and is removed on the next write. Generation (and so the drift
check) fails when a family's jobs outgrow what the workflows split them into.
"""

from __future__ import annotations

__all__ = ["CiFiles", "check_files", "generate", "repo_root"]

import difflib
from dataclasses import dataclass
from pathlib import Path

from ..ciplan import layout
from ..errors import CiDriftError, ConfigError
from ..knowledge import Knowledge, load_knowledge
from ..matrix.config import MatrixFile, load_matrix
from ..planner import Plan, Selection, plan
from .pins import CiPins, load_pins
from .render import GENERATED_FILES, Generated, render_workflows

_DIFF_LINES = 40


@dataclass(frozen=True, kw_only=True)
class CiFiles:
    """What `buildtools ci github` writes for one matrix, under `root`."""

    root: Path
    matrix: str  # matrix.yaml relative to root (as the workflows pass it)
    files: tuple[Generated, ...]
    obsolete: tuple[str, ...] = ()  # generated once, no longer: removed when writing


def repo_root(matrix_path: Path) -> Path:
    """The repository holding matrix.yaml (the nearest parent with `.git`), else its dir."""
    start = matrix_path.resolve().parent
    for candidate in (start, *start.parents):
        if (candidate / ".git").exists():
            return candidate
    return start


def _profile_plan(mf: MatrixFile, kb: Knowledge, profile: str, python: str) -> Plan:
    if profile not in mf.matrix.profiles:
        example = (
            "release: {description: every cell}"
            if profile == layout.RELEASE_PROFILE
            else 'pr: {select: [{torch: "2.13.0", accelerator: cpu}]}'
        )
        raise ConfigError(
            f"{mf.source.where(('profiles',))}: profiles: the CI workflows build the "
            f"profile {profile!r}, which is not defined; add e.g. `{example}` under profiles"
        )
    return plan(mf, kb, host_python=python, selection=Selection(profile=profile))


def generate(
    matrix_path: Path,
    *,
    root: Path | None = None,
    kb: Knowledge | None = None,
    pins: CiPins | None = None,
) -> CiFiles:
    """The files to write for `matrix_path` (nothing is written)."""
    kb = kb or load_knowledge()
    pins = pins or load_pins()
    mf = load_matrix(matrix_path, knowledge=kb)
    root = (root or repo_root(matrix_path)).resolve()
    try:
        rel = matrix_path.resolve().relative_to(root).as_posix()
    except ValueError:
        raise ConfigError(
            f"{matrix_path}: not inside {root}; the workflows read it from the repository"
        ) from None
    python = pins.python.version
    plans = {
        p: _profile_plan(mf, kb, p, python) for p in (layout.RELEASE_PROFILE, layout.PR_PROFILE)
    }
    for name, result in plans.items():
        current = [j.id for j in result.jobs if j.torch_source == "current"]
        if current:
            raise ConfigError(
                f"{mf.source.where(('profiles', name))}: profiles.{name}: selects torch: "
                f"current ({', '.join(current)}), which only a local build can use"
            )
    files = render_workflows(mf, pins, plans, matrix=rel)
    written = {g.path for g in files}
    obsolete = tuple(
        p
        for p in GENERATED_FILES
        if p not in written and (root / p).is_file() and not _foreign(root / p)
    )
    return CiFiles(root=root, matrix=rel, files=tuple(files), obsolete=obsolete)


def regen_command(matrix: str) -> str:
    margs = layout.matrix_args(matrix)
    return layout.join(["nox", "-s", "ci", *(["--", *margs] if margs else [])])


def check_command(matrix: str) -> str:
    return layout.join(["nox", "-s", "ci", "--", *layout.matrix_args(matrix), "--check"])


def _foreign(path: Path) -> bool:
    """An existing file this command did not write (never overwritten silently)."""
    if not path.is_file():
        return False
    head = path.read_text(encoding="utf-8", errors="replace").splitlines()[:1]
    return not head or layout.GENERATED_MARKER not in head[0]


def check_files(ci: CiFiles) -> list[str]:
    """One description per file whose content differs from what would be written."""
    problems = [f"{path}: no longer generated from {ci.matrix}; remove it" for path in ci.obsolete]
    for gen in ci.files:
        path = ci.root / gen.path
        if not path.is_file():
            problems.append(f"{gen.path}: missing")
            continue
        current = path.read_text(encoding="utf-8")
        if current == gen.text:
            continue
        diff = list(
            difflib.unified_diff(
                current.splitlines(),
                gen.text.splitlines(),
                f"{gen.path} (in the repository)",
                f"{gen.path} (from {ci.matrix})",
                lineterm="",
            )
        )
        shown = diff[:_DIFF_LINES]
        more = f"\n  … {len(diff) - _DIFF_LINES} more diff lines" if len(diff) > _DIFF_LINES else ""
        problems.append(
            f"{gen.path}: differs from what {ci.matrix} gives:\n  " + "\n  ".join(shown) + more
        )
    return problems


def write_files(ci: CiFiles, *, force: bool = False) -> list[tuple[str, str]]:
    """Write the files; (path, 'wrote'|'unchanged') each. A hand-written file is kept."""
    foreign = [g.path for g in ci.files if _foreign(ci.root / g.path)]
    if foreign and not force:
        raise CiDriftError(
            f"{', '.join(foreign)}: exists and was not written by `buildtools ci github`; "
            "move it away (or pass --force to replace it)"
        )
    done = []
    for gen in ci.files:
        path = ci.root / gen.path
        if path.is_file() and path.read_text(encoding="utf-8") == gen.text:
            done.append((gen.path, "unchanged"))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(gen.text, encoding="utf-8", newline="\n")
        tmp.replace(path)
        done.append((gen.path, "wrote"))
    for obsolete in ci.obsolete:
        (ci.root / obsolete).unlink()
        done.append((obsolete, "removed"))
    return done
