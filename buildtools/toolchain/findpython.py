"""Find CPython interpreters: pyenv versions, uv-managed Pythons, then PATH.

Discovery only looks at the file system (it starts no process); the interpreter's exact
version is read later by running it, in the toolchain.
"""

from __future__ import annotations

__all__ = ["find_python", "install_hint", "python_candidates"]

import os
import platform
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from ..errors import ToolMissingError

_REQUEST_RE = re.compile(r"^(?P<major>\d+)\.(?P<minor>\d+)(?:\.(?P<patch>\d+))?(?P<ft>t?)$")
# CPython releases, free-threaded ones apart: a plain request ('3.13') never matches pyenv's
# "3.13.0t" or uv's "+freethreaded" builds (another ABI), a free-threaded request ('3.13t')
# matches only those; "3.12-dev", "pypy3.10-…" never match.
_PYENV_DIR_RE = re.compile(r"^(?P<version>\d+\.\d+\.\d+)(?P<ft>t?)$")
_UV_DIR_RE = re.compile(
    r"^cpython-(?P<version>\d+\.\d+\.\d+)(?P<ft>\+freethreaded)?-linux-(?P<machine>[a-z0-9_]+)-gnu$"
)


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _matches(found: str, wanted: str) -> bool:
    """'3.12.1' matches '3.12' and '3.12.1', not '3.1' or '3.12.10'."""
    return _version_tuple(found)[: len(_version_tuple(wanted))] == _version_tuple(wanted)


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _pyenv_root(env: Mapping[str, str], home: Path) -> Path:
    return Path(env["PYENV_ROOT"]) if env.get("PYENV_ROOT") else home / ".pyenv"


def _uv_root(env: Mapping[str, str], home: Path) -> Path:
    if env.get("UV_PYTHON_INSTALL_DIR"):
        return Path(env["UV_PYTHON_INSTALL_DIR"])
    data = Path(env["XDG_DATA_HOME"]) if env.get("XDG_DATA_HOME") else home / ".local" / "share"
    return data / "uv" / "python"


def _pyenv_candidates(root: Path, wanted: str, minor: str, ft: bool) -> Iterator[tuple[str, Path]]:
    versions = root / "versions"
    if not versions.is_dir():
        return
    for entry in versions.iterdir():
        m = _PYENV_DIR_RE.match(entry.name)
        if m and bool(m["ft"]) == ft and _matches(m["version"], wanted):
            yield m["version"], entry / "bin" / f"python{minor}{'t' if ft else ''}"


def _uv_candidates(
    root: Path, wanted: str, minor: str, machine: str, ft: bool
) -> Iterator[tuple[str, Path]]:
    if not root.is_dir():
        return
    for entry in root.iterdir():
        m = _UV_DIR_RE.match(entry.name)
        if m and bool(m["ft"]) == ft and m["machine"] == machine and _matches(m["version"], wanted):
            names = (f"python{minor}t", "python3t") if ft else (f"python{minor}", "python3")
            for name in names:
                if _is_executable(entry / "bin" / name):
                    yield m["version"], entry / "bin" / name
                    break


def python_candidates(
    version: str, *, env: Mapping[str, str], home: Path
) -> list[tuple[str | None, Path]]:
    """Every usable interpreter for `version`, best first: (full version or None, path).

    pyenv and uv entries come newest patch first; PATH entries (version unknown until run)
    only for an 'X.Y' request and never pyenv's shims, which fail for versions that are
    installed but not selected.
    """
    m = _REQUEST_RE.match(version)
    if m is None:
        raise ValueError(
            f"{version!r} is not a Python version; expected 'X.Y', 'X.Y.Z' or 'X.Yt' "
            "(free-threaded)"
        )
    minor = f"{m['major']}.{m['minor']}"
    ft = bool(m["ft"])
    wanted = version.removesuffix("t")
    machine = platform.machine()
    found: list[tuple[str | None, Path]] = []
    for source in (
        _pyenv_candidates(_pyenv_root(env, home), wanted, minor, ft),
        _uv_candidates(_uv_root(env, home), wanted, minor, machine, ft),
    ):
        ranked = sorted(source, key=lambda item: _version_tuple(item[0]), reverse=True)
        found += [(v, p) for v, p in ranked if _is_executable(p)]
    if m["patch"] is None:
        for directory in env.get("PATH", "").split(os.pathsep):
            if not directory or "shims" in Path(directory).parts:
                continue
            candidate = Path(directory) / f"python{minor}{'t' if ft else ''}"
            if _is_executable(candidate):
                found.append((None, candidate))
    return found


def install_hint(version: str, *, env: Mapping[str, str], home: Path) -> str:
    """The command that would install CPython `version`, preferring the tool already present."""
    pyenv = f"pyenv install {version}"
    uv = f"uv python install {version}"
    if _pyenv_root(env, home).is_dir():
        return f"{pyenv}  (or: {uv})"
    return f"{uv}  (or: {pyenv})"


def ft_request(version: str) -> bool:
    """'3.14t': a free-threaded CPython is asked for."""
    return version.endswith("t")


def find_python(version: str, *, env: Mapping[str, str], home: Path) -> Path:
    """The best interpreter for `version` ('3.12' or '3.12.1'), or ToolMissingError."""
    candidates = python_candidates(version, env=env, home=home)
    if candidates:
        return candidates[0][1]
    what = (
        " (free-threaded CPython: torch's cpXYt wheels need that build)"
        if ft_request(version)
        else ""
    )
    raise ToolMissingError(
        f"Python {version}{what}: no interpreter found (looked in "
        f"{_pyenv_root(env, home) / 'versions'}, {_uv_root(env, home)} and PATH); "
        f"install one with: {install_hint(version, env=env, home=home)}"
    )
