"""`prepare_toolchain`: the cached, verified environment a job builds in.

For an index torch: a venv of the cell's exact Python with the job's torch installed, then
verified against the cell (torch version, CUDA/HIP version, C++ ABI). CUDA cells get their
compiler from a system `CUDA_HOME` whose `nvcc` matches torch's CUDA major.minor, or else
from NVIDIA's PyPI wheels pinned to the versions the installed torch itself requires
(`cuda`). `torch: current` jobs are handed to `current`.
"""

from __future__ import annotations

__all__ = ["ToolchainIdentity", "prepare_toolchain", "toolchain_identity"]

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..context import RunContext
from ..errors import ToolchainError, ToolMissingError
from ..model import BuildJob
from .cuda import CudaToolkit, install_cuda_wheels, system_cuda
from .current import prepare_current
from .envs import (
    BUILD_REQUIREMENTS,
    Toolchain,
    cached_toolchain,
    env_name,
    find_rocm,
    record_created,
    toolchain_key,
)
from .findpython import find_python
from .foreign import is_foreign, prepare_foreign_toolchain
from .indexprobe import job_index
from .venv import create_venv, install, remove_env
from .verify import check_torch, imported_record, probe_venv, verified_probe


@dataclass(frozen=True, kw_only=True)
class ToolchainIdentity:
    """What decides a job's environment, known before (and without) creating it."""

    key: str
    fields: Mapping[str, Any]
    base_python: Path
    python_version: str  # the base interpreter's full version, "3.11.7"
    system_cuda: CudaToolkit | None


def toolchain_identity(
    job: BuildJob,
    python: str,
    *,
    ctx: RunContext,
    cuda_home: Path | None = None,
    with_toolkit: bool = True,
) -> ToolchainIdentity:
    """The key of the environment `prepare_toolchain` would use, from the job and the base
    interpreter alone (one quick probe of it; nothing is installed).

    Not for `torch: current` jobs, whose environment depends on the running torch.
    """
    env = ctx.env
    accel = job.accelerator
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    base_python = find_python(python, env=env, home=home)
    base = probe_venv(base_python, ctx=ctx)
    if base is None:
        raise ToolMissingError(f"Python {python}: {base_python} does not run; reinstall it")
    if base.implementation != "cpython":
        raise ToolMissingError(
            f"Python {python}: {base_python} is {base.implementation}, not CPython; install "
            f"CPython with: pyenv install {python}  (or: uv python install {python})"
        )
    cuda: CudaToolkit | None = None
    if accel.kind == "cuda" and with_toolkit:
        given = cuda_home or (Path(env["CUDA_HOME"]) if env.get("CUDA_HOME") else None)
        if given is not None:
            cuda = system_cuda(given, accel, ctx=ctx)
    key, fields = toolchain_key(
        job, python_version=base.python_version, system_cuda=cuda, with_toolkit=with_toolkit
    )
    return ToolchainIdentity(
        key=key,
        fields=fields,
        base_python=base_python,
        python_version=base.python_version,
        system_cuda=cuda,
    )


def prepare_toolchain(
    job: BuildJob,
    python: str,
    *,
    cache_dir: Path,
    ctx: RunContext,
    cuda_home: Path | None = None,
    with_toolkit: bool = True,
) -> Toolchain:
    """Create (or reuse) and verify the environment that builds `job` with Python `python`.

    `env` is the environment pip and the build run with; a system CUDA toolkit is taken
    from `cuda_home` or env["CUDA_HOME"] when its nvcc matches the cell's CUDA version.
    `with_toolkit=False` gives an environment with torch only (no compiler), to check a
    wheel against another torch release of its ABI window (where any build of the release
    will do for a CPU wheel: `window_build_ok`). Raises ToolMissingError (no such Python, no ROCm) or
    ToolchainError (pip failed, or the installed torch/toolkit does not match the cell; the
    message says what to change).
    """
    log = ctx.stream
    if is_foreign(job):
        return prepare_foreign_toolchain(
            job,
            python,
            cache_dir=cache_dir,
            ctx=ctx,
            with_toolkit=with_toolkit,
        )
    if job.torch_source == "current":
        return prepare_current(
            job,
            cache_dir=cache_dir,
            ctx=ctx,
            cuda_home=cuda_home,
            with_toolkit=with_toolkit,
        )
    ident = toolchain_identity(
        job,
        python,
        ctx=ctx,
        cuda_home=cuda_home,
        with_toolkit=with_toolkit,
    )
    root = cache_dir / "toolchains" / env_name(job, ident.python_version, ident.key)

    def create() -> Toolchain:
        try:
            return _create(
                job,
                ident=ident,
                root=root,
                cache_dir=cache_dir,
                with_toolkit=with_toolkit,
                ctx=ctx,
            )
        except BaseException:
            # never left under the cell's name (a CUDA torch in a `cpu` environment holds GBs)
            remove_env(root, log, "its creation failed")
            raise

    return cached_toolchain(
        root,
        key=ident.key,
        fields=ident.fields,
        create=create,
        ctx=ctx,
    )


def _create(
    job: BuildJob,
    *,
    ident: ToolchainIdentity,
    root: Path,
    cache_dir: Path,
    with_toolkit: bool,
    ctx: RunContext,
) -> Toolchain:
    """Create the venv, install torch (+ toolkit), verify, then write the marker last."""
    log, env = ctx.stream, ctx.env
    accel = job.accelerator
    venv_python = root / "bin" / "python"
    started = time.monotonic()
    log.write(f"[toolchain] creating {root} for {', '.join(job.cell_ids) or job.id}\n")
    root.parent.mkdir(parents=True, exist_ok=True)
    create_venv(
        ident.base_python,
        root,
        cache_dir=cache_dir,
        ctx=ctx,
    )
    index = job_index(job, venv_python, ctx=ctx)
    install(
        venv_python,
        [job.torch_requirement, *(BUILD_REQUIREMENTS if with_toolkit else ())],
        cache_dir=cache_dir,
        extra_index=index,
        ctx=ctx,
    )
    probe = verified_probe(
        venv_python,
        ident.base_python,
        record_path=imported_record(root, env),
        ctx=ctx,
    )
    if probe is None:
        raise ToolchainError(f"{venv_python} does not run after installing torch")
    check_torch(
        job,
        probe.torch,
        env_root=root,
        index_answered=index is not None if job.torch_index else None,
        # a check environment (no compiler) of another release of the job's ABI window
        release_only=not with_toolkit,
    )
    assert probe.torch is not None  # check_torch refuses an environment without torch
    cuda = ident.system_cuda
    rocm_home: Path | None = None
    if with_toolkit and accel.kind == "cuda" and cuda is None:
        cuda = install_cuda_wheels(
            job,
            probe.torch,
            root,
            cache_dir=cache_dir,
            ctx=ctx,
        )
    elif with_toolkit and accel.kind == "rocm":
        rocm_home = find_rocm(env, probe.site_packages or probe.torch.site_packages)
    return record_created(
        key=ident.key,
        fields=ident.fields,
        root=root,
        base_python=ident.base_python,
        torch=probe.torch,
        cuda=cuda,
        rocm_home=rocm_home,
        started=started,
        ctx=ctx,
    )
