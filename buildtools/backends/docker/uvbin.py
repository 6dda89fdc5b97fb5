"""uv's static x86_64 binary for the builder containers: installs at native speed, once.

A container build installs torch with its CUDA wheels (~5 GB) twice: into the build
environment (before-build) and into cibuildwheel's test venv. pip unpacks both from the
prefetched wheels one file at a time; uv unpacks once into its cache (in the container)
and copies from there, several files at a time. The binary comes from uv's
musllinux_1_1_x86_64 wheel on PyPI (a static-pie executable: it runs in any x86_64
container and, natively, in an emulated aarch64 one); it is kept in the cache directory
once per UV_REQUIREMENT and mounted read-only. Offline builds only: the prefetched wheels
are all it may install from (UV_OFFLINE, UV_FIND_LINKS, the job's constraints).
"""

from __future__ import annotations

__all__ = [
    "UV_BIN",
    "UV_MOUNT",
    "UV_REQUIREMENT",
    "add_uv",
    "ensure_uv",
    "uv_environment",
]

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from ...locks import file_lock
from ...process import ProcessRunner
from ...wheel.archive import open_wheel

UV_REQUIREMENT = "uv==0.13.9"
_UV_PLATFORM = "musllinux_1_1_x86_64"  # the static-pie build
UV_MOUNT = "/opt/buildtools/uv"  # where a native build mounts it
UV_BIN = f"{UV_MOUNT}/bin"  # goes first on the build's PATH


def add_uv(
    dest: Path, *, python: str, env: Mapping[str, str], runner: ProcessRunner, log: IO[str]
) -> str | None:
    """Put uv's static x86_64 binary at dest/bin/uv; why not, or None."""
    wheels = dest / ".uv-wheel"
    argv = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    argv += ["--platform", _UV_PLATFORM, "--python-version", "3.10", "--dest", str(wheels)]
    result = runner.run([*argv, UV_REQUIREMENT], env=env, log=log, timeout=600)
    found = sorted(wheels.glob("uv-*.whl"))
    if not result.ok or not found:
        return f"downloading {UV_REQUIREMENT} ({_UV_PLATFORM}) failed (exit {result.returncode})"
    try:
        with open_wheel(found[0]) as archive:  # from PyPI: read within the archive limits
            names = [n for n in archive.names if n.endswith(".data/scripts/uv")]
            if not names:
                return f"{found[0].name} holds no uv binary"
            (dest / "bin").mkdir(parents=True, exist_ok=True)
            partial = dest / "bin" / ".uv.partial"
            with partial.open("wb") as out:
                archive.copy(names[0], out)
    except (OSError, ValueError) as exc:
        return f"{found[0].name}: {exc}"
    partial.chmod(0o755)
    partial.replace(dest / "bin" / "uv")  # whole or absent: a reader never runs half a binary
    shutil.rmtree(wheels, ignore_errors=True)
    return None


def ensure_uv(
    *, cache_dir: Path, python: str, env: Mapping[str, str], runner: ProcessRunner, log: IO[str]
) -> tuple[Path | None, str]:
    """The directory holding bin/uv (made once per UV_REQUIREMENT), or None and why.

    A failed download is recorded beside it and not tried again by every build (a host
    whose wheels were prefetched earlier may be offline now); deleting the record retries.
    """
    dest = cache_dir / "uv" / UV_REQUIREMENT.replace("==", "-")
    failed = dest.with_name(dest.name + ".failed")
    with file_lock(cache_dir / "uv" / ".lock"):
        if (dest / "bin" / "uv").is_file():
            return dest, "reused"
        if failed.is_file():
            return None, f"{failed.read_text(encoding='utf-8').strip()} (recorded in {failed})"
        why = add_uv(dest, python=python, env=env, runner=runner, log=log)
        if why is not None:
            failed.write_text(why + "\n", encoding="utf-8")
            return None, why
    return dest, "made"


def uv_environment(*, wheels_dir: str, constraints: str) -> list[tuple[str, str]]:
    """uv's configuration in an offline build: the prefetched wheels only, the job's
    constraints, never a download of Python or anything else."""
    return [
        ("UV_OFFLINE", "1"),
        ("UV_FIND_LINKS", wheels_dir),
        ("UV_CONSTRAINT", constraints),
        # the cache and the venvs are in the container: copied, not linked across mounts
        ("UV_LINK_MODE", "copy"),
        ("UV_PYTHON_DOWNLOADS", "never"),
    ]
