"""What the project's tests import beside the wheel and torch: `project.smoke_requires`.

A test module that does `from einops import rearrange` at its top fails to import in the
smoke environment unless einops is installed there. Read with `ast` (nothing runs): only
imports at a module's top level count (one inside a function, an `if` or a
`try: … except ImportError` is optional by the project's own design); the standard library
(`sys.stdlib_module_names`), the project's own packages and modules, the tests' own modules,
and what comes with the cell's torch are left out. An import whose distribution is named
otherwise (`yaml` → PyYAML) is mapped by `data/import_dists.yaml`; any other is installed
under its own name.
"""

from __future__ import annotations

__all__ = ["ImportDists", "load_import_dists", "smoke_requirements", "top_level_imports"]

import ast
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ruamel.yaml import YAML

from ..errors import KnowledgeError
from ..knowledge import DATA_DIR

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")  # PEP 508 names
_MAX_TEST_FILES = 500


@dataclass(frozen=True, kw_only=True)
class ImportDists:
    """data/import_dists.yaml: import → distribution, and the imports that come with torch."""

    dists: dict[str, str]
    with_torch: dict[str, str]  # import → why it is not added


@cache
def load_import_dists(path: Path = DATA_DIR / "import_dists.yaml") -> ImportDists:
    """The table, validated; a malformed row raises KnowledgeError naming it."""
    data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    dists: dict[str, str] = {}
    with_torch: dict[str, str] = {}
    for key, table, value_key in (("dists", dists, "dist"), ("with_torch", with_torch, "reason")):
        rows = data.get(key) if isinstance(data, dict) else None
        if not isinstance(rows, list):
            raise KnowledgeError(f"{path}: {key}: a list of rows is required")
        for i, row in enumerate(rows):
            ok = isinstance(row, dict) and all(
                isinstance(row.get(k), str) and row[k] for k in ("import", value_key, "source")
            )
            if not ok or not _IDENTIFIER.fullmatch(row["import"]):
                raise KnowledgeError(
                    f"{path}: {key}[{i}]: needs import (a Python identifier), {value_key} and "
                    "source, each a non-empty string"
                )
            if value_key == "dist" and not _DIST.fullmatch(row["dist"]):
                raise KnowledgeError(f"{path}: {key}[{i}]: {row['dist']!r} is not a project name")
            if row["import"] in table:
                raise KnowledgeError(f"{path}: {key}[{i}]: {row['import']} is listed twice")
            table[row["import"]] = row[value_key]
    return ImportDists(dists=dists, with_torch=with_torch)


def top_level_imports(source: str) -> tuple[str, ...]:
    """The top-level names a module imports unconditionally at its top (`import a.b` → a);
    relative imports and anything under a def, class, if, try or with are left out."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [alias.name.split(".", 1)[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module.split(".", 1)[0])
    return tuple(dict.fromkeys(names))


def smoke_requirements(
    test_files: Iterable[str],
    *,
    read: Callable[[str], str],
    own: Iterable[str],
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(distributions to add to smoke_requires, notes) for the tests in `test_files`
    (relative paths of .py files, read by `read`); `own` are the project's own top-level
    packages and modules."""
    files = list(test_files)[:_MAX_TEST_FILES]
    local = {f.rsplit("/", 1)[-1].removesuffix(".py") for f in files}
    local |= {part for f in files for part in f.split("/")[:-1]}  # tests/, tests/helpers/
    # torch is the cell's own; pytest is in smoke_requires already
    skip = set(own) | local | set(sys.stdlib_module_names) | {"__future__", "torch", "pytest"}
    table = load_import_dists()
    found: list[str] = []
    notes: list[str] = []
    for rel in files:
        for name in top_level_imports(read(rel)):
            if name in skip or not _IDENTIFIER.fullmatch(name):
                continue
            if name in table.with_torch:
                why = table.with_torch[name]
                note = f"the tests import {name}: not added to smoke_requires, {why}"
                if note not in notes:
                    notes.append(note)
                continue
            found.append(table.dists.get(name, name))
    return tuple(dict.fromkeys(found)), tuple(notes)
