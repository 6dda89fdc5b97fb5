"""`torch: current`: a build environment that imports the running environment's torch.

That torch is never installed or changed. From a base interpreter (system, conda) the venv
is created with `--system-site-packages`. A venv interpreter cannot pass its own
site-packages on that way (a venv of a venv sees the *base* interpreter's), so there, and
for a torch in the user site, a `.pth` file in the new venv lists the running environment's
site directories (with `site.addsitedir`, so their own .pth files count). Either way the
venv's own site-packages comes first (the build tools pip adds there) and the torch it
imports is verified to be the running one.
"""

from __future__ import annotations

__all__ = ["CURRENT_PTH", "prepare_current"]

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..context import RunContext
from ..errors import ToolchainError, ToolMissingError
from ..model import BuildJob
from ..probe.hostenv import EnvSnapshot, probe_environment
from ..probe.runningtorch import site_dirs_for_pth
from ..torchinstall import TorchInstall
from .cuda import (
    CudaToolkit,
    install_cuda_wheels,
    link_dir,
    link_unversioned_libs,
    locate_cuda_wheels,
    system_cuda,
)
from .envs import (
    Toolchain,
    build_requirements_for,
    cached_toolchain,
    env_name,
    find_rocm,
    record_created,
    toolchain_key,
)
from .indexprobe import job_index
from .venv import child_env, create_venv, install
from .verify import check_same_torch, check_torch, probe_venv

CURRENT_PTH = "buildtools-current-torch.pth"


def _running_torch(job: BuildJob, base_python: Path, snap: EnvSnapshot) -> TorchInstall:
    """The running environment's torch, still the one the job was planned for."""
    cells = ", ".join(job.cell_ids) or job.id
    torch = snap.torch
    if torch is None or torch.imported is False:
        why = torch.import_error if torch is not None else "no torch is installed"
        raise ToolchainError(f"{cells}: torch does not import in {base_python}: {why}")
    if torch.version != job.torch:
        raise ToolchainError(
            f"{cells}: {base_python} now has torch {torch.version}, but the plan was made for "
            f"torch {job.torch}; plan again (the cell id names the torch it was planned for)"
        )
    if snap.implementation != "cpython":
        raise ToolMissingError(f"{base_python} is {snap.implementation}, not CPython")
    return torch


def prepare_current(
    job: BuildJob,
    *,
    cache_dir: Path,
    ctx: RunContext,
    cuda_home: Path | None,
    with_toolkit: bool,
) -> Toolchain:
    """The (cached) venv of a `torch: current` job, verified to import the running torch."""
    env = ctx.env
    if not job.current_python:
        cells = ", ".join(job.cell_ids) or job.id
        raise ToolchainError(f"{cells}: a torch: current job without the interpreter to use")
    base_python = Path(job.current_python)
    snap = probe_environment(
        base_python, ctx=ctx.with_env(child_env(ctx.env)), devices=False, files=False
    )
    torch = _running_torch(job, base_python, snap)
    accel = job.accelerator
    cuda: CudaToolkit | None = None
    if accel.kind == "cuda" and with_toolkit:
        given = cuda_home or (Path(env["CUDA_HOME"]) if env.get("CUDA_HOME") else None)
        if given is not None:
            cuda = system_cuda(given, accel, ctx=ctx)
    key, fields = toolchain_key(
        job, python_version=snap.python_version, system_cuda=cuda, with_toolkit=with_toolkit
    )
    root = _root(cache_dir, job, snap, key)
    running = _Running(base_python=base_python, snap=snap, torch=torch, system_cuda=cuda)

    def create() -> Toolchain:
        return _create(
            job,
            running,
            key=key,
            fields=fields,
            cache_dir=cache_dir,
            with_toolkit=with_toolkit,
            ctx=ctx,
        )

    return cached_toolchain(
        root,
        key=key,
        fields=fields,
        create=create,
        ctx=ctx,
        torch_dir=torch.package_dir,
    )


@dataclass(frozen=True, kw_only=True)
class _Running:
    """The running environment a `torch: current` toolchain is made from."""

    base_python: Path
    snap: EnvSnapshot
    torch: TorchInstall
    system_cuda: CudaToolkit | None


def _root(cache_dir: Path, job: BuildJob, snap: EnvSnapshot, key: str) -> Path:
    return cache_dir / "toolchains" / env_name(job, snap.python_version, key)


def _create(
    job: BuildJob,
    running: _Running,
    *,
    key: str,
    fields: Mapping[str, Any],
    cache_dir: Path,
    with_toolkit: bool,
    ctx: RunContext,
) -> Toolchain:
    log, env = ctx.stream, ctx.env
    base_python, snap, torch = running.base_python, running.snap, running.torch
    system_cuda = running.system_cuda
    root = _root(cache_dir, job, snap, key)
    cells = ", ".join(job.cell_ids) or job.id
    accel = job.accelerator
    started = time.monotonic()
    log.write(
        f"[toolchain] creating {root} for {cells}: a venv that imports torch "
        f"{torch.version} from {torch.site_packages} (nothing is installed into that "
        "environment)\n"
    )
    root.parent.mkdir(parents=True, exist_ok=True)
    create_venv(
        base_python,
        root,
        cache_dir=cache_dir,
        system_site_packages=not snap.in_venv,
        seed=not any(d.key == "pip" for d in snap.dists),
        ctx=ctx,
    )
    venv_python = root / "bin" / "python"
    own_site = root / "lib" / f"python{snap.python_xy}" / "site-packages"
    own_site.mkdir(parents=True, exist_ok=True)
    # addsitedir, not plain path lines: the .pth files of those directories (editable
    # installs, distutils-precedence) must be processed too, as they are there
    (own_site / CURRENT_PTH).write_text(
        "".join(f"import site; site.addsitedir({str(d)!r})\n" for d in site_dirs_for_pth(snap)),
        encoding="utf-8",
    )
    if with_toolkit:
        # already satisfied by the running environment in the usual case: pip only adds
        # what is missing, into the venv's own site-packages
        install(
            venv_python,
            build_requirements_for(torch, snap.python_version),
            cache_dir=cache_dir,
            extra_index=job_index(job, venv_python, ctx=ctx),
            ctx=ctx,
        )
    probe = probe_venv(venv_python, ctx=ctx, import_torch=True)
    if probe is None:
        raise ToolchainError(f"{venv_python} does not run")
    check_torch(job, probe.torch, env_root=root)
    check_same_torch(probe.torch, torch.package_dir, own_site, cells)
    assert probe.torch is not None  # checked above
    seen = replace(probe.torch, package_dir=torch.package_dir)

    cuda = system_cuda
    rocm_home: Path | None = None
    if with_toolkit and accel.kind == "cuda" and cuda is None:
        cuda = locate_cuda_wheels(torch.site_packages, cuda_version=seen.cuda or "")
        if cuda is not None:
            log.write(f"[toolchain] CUDA compiler of the running environment: {cuda.home}\n")
            link_unversioned_libs(cuda.lib_dirs, link_dir(root))
        else:
            cuda = install_cuda_wheels(
                job,
                seen,
                root,
                cache_dir=cache_dir,
                with_torch=False,
                ctx=ctx,
            )
            after = probe_venv(venv_python, ctx=ctx, import_torch=True)
            if after is None:
                raise ToolchainError(f"{venv_python} stopped working after the CUDA wheels")
            check_same_torch(after.torch, torch.package_dir, own_site, cells)
    elif with_toolkit and accel.kind == "rocm":
        rocm_home = find_rocm(env, torch.site_packages)
    return record_created(
        key=key,
        fields=fields,
        root=root,
        base_python=base_python,
        torch=seen,
        cuda=cuda,
        rocm_home=rocm_home,
        started=started,
        ctx=ctx,
        extra={"torch_dir": str(torch.package_dir), "torch_site": str(torch.site_packages)},
    )
