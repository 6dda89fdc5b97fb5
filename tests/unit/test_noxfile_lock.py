"""The noxfiles install buildtools' dependencies from the hashed lock the workflows name.

This repository's noxfile.py and the one `buildtools init` writes are run here with a
recording stand-in for nox (no process starts): what each session passes to
`session.install` with BUILDTOOLS_REQUIREMENTS set (as the generated workflows do), unset
(a developer's machine), and naming a missing file.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from buildtools import __version__
from buildtools.adopt.scaffold import render_noxfile
from buildtools.ciplan import layout

REPO = Path(__file__).resolve().parents[2]
SESSIONS = ("plan", "build", "smoke", "index", "ci")  # the ones the workflows call


class SessionError(Exception):
    """nox.Session.error: the session stops with this message."""


class FakeSession:
    """Records what a session installs and logs; runs nothing."""

    def __init__(self) -> None:
        self.installs: list[tuple[str, ...]] = []
        self.logs: list[str] = []
        self.posargs: list[str] = []

    def install(self, *args: str) -> None:
        self.installs.append(args)

    def log(self, message: str) -> None:
        self.logs.append(message)

    def error(self, message: str) -> None:
        raise SessionError(message)

    def run(self, *args: Any, **kwargs: Any) -> None:
        pass


def _load(text: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Callable[[Any], None]]:
    """The noxfile's sessions by name (the noxfile imported against a fake `nox`)."""
    sessions: dict[str, Callable[[Any], None]] = {}

    def session(func: Any = None, *, name: str | None = None) -> Any:
        # `@nox.session` and `@nox.session(name=...)`, as nox accepts both
        def register(f: Callable[[Any], None]) -> Callable[[Any], None]:
            sessions[name or f.__name__] = f
            return f

        return register(func) if func is not None else register

    fake = types.ModuleType("nox")
    fake.session = session  # type: ignore[attr-defined]
    fake.Session = FakeSession  # type: ignore[attr-defined]
    fake.options = types.SimpleNamespace()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "nox", fake)
    namespace: dict[str, Any] = {"__name__": "noxfile", "__file__": str(REPO / "noxfile.py")}
    exec(compile(text, "noxfile.py", "exec"), namespace)
    return sessions


NOXFILES = {
    "repository": (REPO / "noxfile.py").read_text,
    "init": render_noxfile,
}


def _run(which: str, name: str, monkeypatch: pytest.MonkeyPatch, lock: str | None) -> FakeSession:
    if lock is None:
        monkeypatch.delenv(layout.LOCK_ENV, raising=False)
    else:
        monkeypatch.setenv(layout.LOCK_ENV, lock)
    session = FakeSession()
    _load(NOXFILES[which](), monkeypatch)[name](session)
    return session


def _buildtools(which: str, name: str, args: tuple[str, ...]) -> None:
    """The last argument installs buildtools: the checkout, or this release with its extras."""
    extras = "[docker]" if name == "build" else ""
    if which == "repository":
        assert args[-2:] == ("-e", f".{extras}")
        return
    req = Requirement(args[-1])
    assert req.name == "torch-buildtools" and str(req.specifier) == f"=={__version__}"
    assert req.extras == ({"docker"} if extras else set())


@pytest.mark.parametrize("which", sorted(NOXFILES))
@pytest.mark.parametrize("name", SESSIONS)
def test_sessions_install_the_lock_hashed(
    which: str, name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    lock = tmp_path / "buildtools-requirements.txt"
    lock.write_text("")
    session = _run(which, name, monkeypatch, str(lock))
    first, second = session.installs
    assert first == ("--require-hashes", "-r", str(lock))
    assert second[0] == "--no-deps"
    if which == "repository":
        # the checkout is built with the lock's (hashed) setuptools, not an isolated
        # build's unhashed one
        assert second[1] == "--no-build-isolation"
    _buildtools(which, name, second)
    assert not session.logs


@pytest.mark.parametrize("which", sorted(NOXFILES))
@pytest.mark.parametrize("name", SESSIONS)
def test_without_the_lock_one_line_and_ranges(
    which: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = _run(which, name, monkeypatch, None)
    (only,) = session.installs
    assert "--require-hashes" not in only and "--no-deps" not in only
    _buildtools(which, name, only)
    assert session.logs == [f"{layout.LOCK_ENV} unset: buildtools' dependencies by range, unhashed"]


@pytest.mark.parametrize("which", sorted(NOXFILES))
def test_a_lock_named_but_missing_stops_the_session(
    which: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = str(tmp_path / "nope.txt")
    with pytest.raises(SessionError, match=f"^{layout.LOCK_ENV}=.*nope.txt: no such file"):
        _run(which, "build", monkeypatch, missing)


def test_the_workflows_name_what_the_noxfiles_read() -> None:
    text = render_noxfile()
    assert f'os.environ.get("{layout.LOCK_ENV}")' in text
    assert f'os.environ.get("{layout.LOCK_ENV}")' in (REPO / "noxfile.py").read_text()
    assert layout.LOCK in text


def test_docs_show_the_noxfile_init_writes() -> None:
    """docs/ci.md's copy for adopters is the noxfile itself (an edited copy once broke build)."""
    assert f"```python\n{render_noxfile()}```\n" in (REPO / "docs" / "ci.md").read_text()
