"""Fail when buildtools/ holds code nothing calls but the tests: vulture, run by `nox -s lint`.

Plain vulture counts every name listed in a module's `__all__` as used, and nearly every
function of buildtools is listed there: a function that only tests call would never be found.
Here `__all__` is not a use. A use is a name read in the package, the benchmarks (bench/), the
CI scripts (ci/), noxfile.py or the allow-list (ci/vulture-allowlist.py, each entry with its
reason); tests/ is not read, so code only a test calls is reported as dead.

Confidence 60 is vulture's lowest: unused functions, methods, classes and attributes are all
reported at 60 (only unused imports, arguments and unreachable code score higher), so any
higher threshold would let dead functions through.

Exit status: 0 nothing dead; 3 dead code found (vulture's own code), one line per finding.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import vulture

ROOT = Path(__file__).resolve().parents[1]
REPORTED = ROOT / "buildtools"
# where a read of a name counts as a use; tests/ is deliberately absent
READERS = [REPORTED, ROOT / "bench", ROOT / "ci", ROOT / "noxfile.py"]
MIN_CONFIDENCE = 60
# pydantic calls its validators and reads model_config itself
IGNORE_DECORATORS = ["@field_validator", "@model_validator"]
IGNORE_NAMES = ["model_config"]
DEAD_CODE_FOUND = 3


class _NoAllExports(vulture.Vulture):
    """vulture, except that listing a name in `__all__` does not count as using it."""

    def visit_Assign(self, node: ast.Assign) -> None:
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return
        super().visit_Assign(node)


def main() -> int:
    finder = _NoAllExports(ignore_names=IGNORE_NAMES, ignore_decorators=IGNORE_DECORATORS)
    finder.scavenge([str(p) for p in READERS])
    dead = [
        item
        for item in finder.get_unused_code(min_confidence=MIN_CONFIDENCE)
        if Path(item.filename).resolve().is_relative_to(REPORTED)
    ]
    for item in dead:
        print(item.get_report().replace(f"{ROOT}/", "", 1))
    if dead:
        print(
            f"{len(dead)} unused in buildtools/: delete it (with the tests that only it serves),"
            " or, if something outside Python calls it, add it to ci/vulture-allowlist.py with"
            " the reason"
        )
    return DEAD_CODE_FOUND if dead else 0


if __name__ == "__main__":
    sys.exit(main())
