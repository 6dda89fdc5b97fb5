"""Content fingerprints of a project's sources (what the build reads)."""

from __future__ import annotations

__all__ = ["IGNORED_DIRS", "source_files", "source_fingerprint"]

import hashlib
import os
from pathlib import Path

IGNORED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".nox",
        ".tox",
        ".venv",
        "venv",
        "build",
        "dist",
        "__pycache__",
        "wheelhouse",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".hypothesis",
    }
)


def source_files(root: Path) -> list[Path]:
    """Every file under root that a build may read, sorted; build outputs and VCS dirs skipped."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d for d in dirnames if d not in IGNORED_DIRS and not d.endswith(".egg-info")
        )
        for name in sorted(filenames):
            if name.endswith((".pyc", ".so", ".o")):
                continue
            found.append(Path(dirpath) / name)
    return found


def source_fingerprint(root: Path) -> str:
    """sha256 over (relative path, content) of every source file: 'sha256:<hex>'."""
    digest = hashlib.sha256()
    for path in source_files(root):
        rel = path.relative_to(root).as_posix()
        digest.update(rel.encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return "sha256:" + digest.hexdigest()
