"""docs/architecture.md and the code agree: its packages exist, the code's are in it, its
layers are import-linter's, and the seams it promises hold (one backend registry)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml")

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "buildtools"
DOC = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")


def _code_units() -> set[str]:
    """buildtools' subpackages (`smoke/`) and top-level modules (`model.py`)."""
    units = {f"{p.name}/" for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    units |= {p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    return units


def _table_units() -> set[str]:
    """The units the table 'What each package owns' names in its first column."""
    section = DOC.split("## What each package owns", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for row in section.splitlines():
        if row.startswith("| `"):
            names |= set(re.findall(r"`([a-z_]+(?:/|\.py))`", row.split("|")[1]))
    return names


def test_every_package_is_in_the_table_and_every_row_exists() -> None:
    code, doc = _code_units(), _table_units()
    assert code - doc == set(), "add a row to docs/architecture.md for these"
    missing = {n for n in doc - code if not (PACKAGE / n.rstrip("/")).exists()}
    assert missing == set(), "docs/architecture.md names what does not exist"


def _linter_layers() -> list[set[str]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    (layers,) = [
        c["layers"] for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"
    ]
    return [{m.strip().removeprefix("buildtools.") for m in layer.split("|")} for layer in layers]


def _diagram_layers() -> list[set[str]]:
    diagram = DOC.split("```", 2)[1]
    layers: list[set[str]] = []
    for line in diagram.splitlines():
        match = re.match(r"\s*(?:│\s*)?layer\s+\d+\s+(.*)", line)
        if match:
            layers.append(set())
        if layers:
            text = re.sub(r"\([^)]*\)", "", line)  # what a package holds is not a package
            layers[-1] |= {
                n.rstrip("/").removesuffix(".py")
                for n in re.findall(r"\b([a-z_]+(?:/|\.py))", text)
                if not n.startswith("data")
            }
    return layers


def test_the_diagram_is_the_import_linter_layering() -> None:
    assert _diagram_layers() == _linter_layers()


def test_nothing_outside_backends_constructs_a_backend() -> None:
    backends = {
        node.name
        for path in (PACKAGE / "backends").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and node.name.endswith("Backend")
    }
    assert {"LocalBackend", "DockerBackend"} <= backends
    found = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in PACKAGE.rglob("*.py")
        if "backends" not in path.relative_to(PACKAGE).parts
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name | ast.Attribute)
        and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) in backends
    ]
    assert found == [], "make backends through backends.registry"


def test_no_package_is_named_like_build_output() -> None:
    assert not (PACKAGE / "build").exists()
    assert not (PACKAGE / "dist").exists()


def _ci_verbs() -> dict[str, object]:
    """`buildtools ci`'s verbs as the command line registers them: name → handler."""
    import argparse

    from buildtools.cli.main import _extra_verbs, build_parser

    def sub_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return dict(action.choices)

    ci = sub_actions(build_parser(_extra_verbs()))["ci"]
    return {name: p.get_default("handler") for name, p in sub_actions(ci).items()}


def test_each_ci_verb_lives_in_its_own_module() -> None:
    verbs = _ci_verbs()
    assert {"github", "matrix", "status", "restore-site", "backfill"} <= set(verbs)
    where = {name: getattr(handler, "__module__", None) for name, handler in verbs.items()}
    assert where == {n: f"buildtools.cli.ci.{n.replace('-', '_')}" for n in verbs}
    modules = {p.stem for p in (PACKAGE / "cli" / "ci").glob("*.py")} - {"__init__"}
    assert modules == {n.replace("-", "_") for n in verbs}, "one module per verb, no other"
