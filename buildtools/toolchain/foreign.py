"""The target torch of a job for another architecture than the host's (aarch64 on x86).

A linux_aarch64 job built on an x86_64 machine compiles inside an emulated aarch64
container (the docker backend installs the cell's exact torch and, for CUDA cells, NVIDIA's
aarch64 "sbsa" toolkit wheels there, pinned like the x86 ones). The host still checks the
wheel against that torch, which it cannot import: pip unpacks the cell's aarch64 torch
wheel (`--platform … --target`, no dependencies, nothing run), and the checks read its
version.py and ELF files. The unpacked tree is cached per cell like a toolchain, its
marker written last.
"""

from __future__ import annotations

__all__ = ["host_platform", "is_foreign", "prepare_foreign_toolchain"]

import hashlib
import json
import platform as _platform
import shutil
from pathlib import Path

from ..context import RunContext
from ..ecosystem import load_ecosystem
from ..errors import ToolchainError
from ..jsonfields import decode_json
from ..locks import file_lock
from ..model import BuildJob
from ..probe.inspector import read_version_py
from ..torchinstall import TorchInstall
from .envs import Toolchain
from .findpython import find_python
from .indexprobe import index_reachable
from .venv import child_env

_MARKER = "buildtools-foreign.json"
_SCHEMA = 1


def host_platform(machine: str | None = None) -> str:
    """The wheel platform of this machine: 'linux_x86_64', 'linux_aarch64'."""
    return f"linux_{machine or _platform.machine()}"


def is_foreign(job: BuildJob, machine: str | None = None) -> bool:
    """True when `job` targets another architecture than the host's."""
    return job.platform != host_platform(machine)


def _pip_platforms(tag: str) -> list[str]:
    """`--platform` values for a manylinux_2_Y_<arch> promise: that tag and the older ones
    (torch's aarch64 wheels were manylinux2014 before 2.6)."""
    head, _, arch = tag.partition("_2_")
    minor, _, arch = arch.partition("_")
    if head != "manylinux" or not minor.isdigit():
        return [tag]
    out = [f"manylinux_2_{y}_{arch}" for y in range(int(minor), 16, -1)]
    aliases = load_ecosystem().manylinux_aliases
    return out + [f"{name}_{arch}" for name, (_, y) in aliases.items() if y <= int(minor)]


def _torch_version(site: Path) -> tuple[str, str | None]:
    """(__version__, cuda) from the unpacked torch/version.py: read, never imported."""
    path = site / "torch" / "version.py"
    values = read_version_py(path)
    version, cuda = values.get("__version__"), values.get("cuda")
    if not isinstance(version, str):
        raise ToolchainError(f"{path}: no readable __version__; the unpacked torch is incomplete")
    return version, cuda if isinstance(cuda, str) else None


def _marker_key(marker: Path) -> object:
    """The key a complete unpack recorded (None when the marker is unreadable)."""
    try:
        data = decode_json(marker.read_bytes(), what=marker.name)
    except (OSError, ValueError):
        return None
    return data.get("key") if isinstance(data, dict) else None


def prepare_foreign_toolchain(
    job: BuildJob,
    python: str,
    *,
    cache_dir: Path,
    ctx: RunContext,
    with_toolkit: bool = True,
) -> Toolchain:
    """The cell's torch for another architecture, unpacked for the checks (never imported).

    Only the docker backend builds such a job (`with_toolkit=False`: the compiler is in the
    container); the local backend cannot run an aarch64 compiler's output here.
    """
    log, env = ctx.stream, ctx.env
    if with_toolkit:
        raise ToolchainError(
            f"{job.id}: a {job.platform} job cannot build with this {host_platform()} "
            "machine's compiler; build it with --backend docker (an emulated container, see "
            "`buildtools build --setup-emulation`) or on a runner of that architecture"
        )
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    base_python = find_python(python, env=env, home=home)
    fields = {
        "schema": _SCHEMA,
        "torch": job.torch_requirement,
        "index": job.torch_index,
        "python": python,
        "platform_tag": job.platform_tag,
    }
    key = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    root = cache_dir / "foreign" / f"{job.platform}-py{python}-{job.accelerator.name}-{key[:12]}"
    site = root / "site-packages"
    with file_lock(cache_dir / "foreign" / ".locks" / f"{root.name}.lock"):
        marker = root / _MARKER
        reused = marker.is_file() and _marker_key(marker) == key
        if not reused:
            shutil.rmtree(root, ignore_errors=True)
            _unpack(job, python, base_python, site, ctx=ctx)
            marker.write_text(json.dumps({"key": key, "fields": fields}, sort_keys=True))
    version, cuda = _torch_version(site)
    if version.split("+")[0] != job.torch.split("+")[0]:
        raise ToolchainError(
            f"{job.id}: pip unpacked torch {version} for {job.platform}, the cell needs {job.torch}"
        )
    log.write(
        f"[toolchain] {job.platform} torch {version} unpacked for the checks in {site}"
        f"{' (reused)' if reused else ''}\n"
    )
    torch = TorchInstall(
        version=version,
        package_dir=site / "torch",
        cuda=cuda,
        hip=None,  # torch has no ROCm builds for aarch64
        cxx11_abi=job.cxx11_abi,  # the knowledge base's; the checks read libc10's own
        imported=False,
        python_version=python,
        platform=job.platform,
    )
    return Toolchain(
        key=key,
        root=root,
        python=base_python,
        torch=torch,
        cuda_home=None,
        build_env=(),
        reused=reused,
    )


def _unpack(
    job: BuildJob,
    python: str,
    base_python: Path,
    site: Path,
    *,
    ctx: RunContext,
) -> None:
    runner, log, env = ctx.processes, ctx.stream, ctx.env
    digits = python.replace(".", "")
    argv = [str(base_python), "-m", "pip", "install", "--no-deps", "--only-binary", ":all:"]
    for plat in _pip_platforms(job.platform_tag):
        argv += ["--platform", plat]
    argv += ["--python-version", python, "--implementation", "cp", "--abi", f"cp{digits}"]
    if job.torch_index and index_reachable(job.torch_index, base_python, ctx=ctx):
        argv += ["--extra-index-url", job.torch_index]
    argv += ["--target", str(site), job.torch_requirement]
    result = runner.run(argv, env=child_env(env), log=log)
    if not result.ok:
        raise ToolchainError(
            f"pip found no {job.platform} wheel of {job.torch_requirement} for Python {python} "
            f"(exit {result.returncode}); see the log above. PyPI's aarch64 torch wheels are "
            "CPU-only up to 2.10 and CUDA from 2.11 on; other variants come from "
            "download.pytorch.org (accelerators.<name>.torch_index)"
        )
