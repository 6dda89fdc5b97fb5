"""`nox -s ci-run` (ci/act-run.py): where the actions come from by default, and that no
default or document names a path of one particular machine. The runs themselves are
tests/integration/test_act.py (opt-in: Docker, act)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _module(path: Path, name: str) -> ModuleType:
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(path.parent))


def test_the_actions_come_from_github_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    harness = _module(REPO / "ci" / "act" / "harness.py", "harness")
    assert harness.DEFAULT_MIRROR == "https://github.com/{owner}/{name}"
    run = _module(REPO / "ci" / "act-run.py", "act_run")
    monkeypatch.delenv("BT_ACT_MIRROR", raising=False)
    assert run._parser().parse_args([]).mirror == "https://github.com/{owner}/{name}"
    mirrors = run._parser().parse_args(["--mirror", "/srv/mirrors/{owner}+{name}"]).mirror
    assert mirrors == "/srv/mirrors/{owner}+{name}"


def test_no_default_or_document_names_a_path_of_one_machine() -> None:
    """A user's machine has no /work, /root or /tmp/…-mirror of ours: the defaults and the
    documents of ci-run name GitHub, or a placeholder."""
    files = [
        REPO / "ci" / "act-run.py",
        REPO / "ci" / "act-actions.py",
        REPO / "ci" / "act" / "harness.py",
        REPO / "noxfile.py",
        REPO / "docs" / "ci.md",
        REPO / "tests" / "integration" / "test_act.py",
    ]
    machine = re.compile(r"(?<![\w.])/(work|root|home/\w+)/|\.mirror/")
    for path in files:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            assert not machine.search(line), f"{path.relative_to(REPO)}:{n}: {line.strip()}"
