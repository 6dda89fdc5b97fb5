"""Where buildtools keeps what it reuses between runs (envs, build trees, ccache, timings)."""

from __future__ import annotations

__all__ = ["default_cache_dir"]

from collections.abc import Mapping
from pathlib import Path


def default_cache_dir(env: Mapping[str, str]) -> Path:
    """Where torch environments and build trees live between runs."""
    if env.get("BUILDTOOLS_CACHE_DIR"):
        return Path(env["BUILDTOOLS_CACHE_DIR"])
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".cache")
    return Path(base) / "torch-buildtools"
