"""Fail when a module of the buildtools package grows past the size a reader can hold.

docs/architecture.md: a module owns one concept; past ~600 lines it usually owns two. The
limit counts every line (code, docstrings, comments). Run by `nox -s lint`.
"""

from __future__ import annotations

import sys
from pathlib import Path

LIMIT = 600
ROOT = Path(__file__).resolve().parents[1] / "buildtools"


def main() -> int:
    too_long = []
    for path in sorted(ROOT.rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > LIMIT:
            too_long.append((path.relative_to(ROOT.parent), lines))
    for path, lines in too_long:
        print(
            f"{path}: {lines} lines (limit {LIMIT}): split it by concept, see docs/architecture.md"
        )
    return 1 if too_long else 0


if __name__ == "__main__":
    sys.exit(main())
