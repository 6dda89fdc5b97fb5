"""A job's build environment and build tree: what the compiler sees, and where its objects live."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from ..backends.base import nvcc_flags_env, nvcc_seed_env, prefix_maps_env
from ..backends.local import object_dir
from ..model import BuildJob
from ..toolchain.blind import hide_device_toolchain
from ..toolchain.ccachekeys import nvcc_flags_namespace
from ..toolchain.envs import Toolchain
from .compilercache import CompilerCache, compiler_cache_env, no_cache_env
from .options import BuildOptions

__all__ = [
    "DEFAULT_SOURCE_DATE_EPOCH",
    "SHIMS",
    "blind_root",
    "build_tree",
    "job_environment",
    "reproducible_env",
    "source_date_epoch",
]

# The date of every entry of a wheel when nothing else is asked for (1980-01-01, the oldest a
# zip holds): a wheel's bytes then depend on its contents, never on when it was built.
DEFAULT_SOURCE_DATE_EPOCH = 315532800


SHIMS = Path(__file__).resolve().parents[1] / "data" / "shims"


def build_tree(
    job: BuildJob, toolchain: Toolchain, project_dir: Path, env: Mapping[str, str], cache_dir: Path
) -> Path:
    """The job's persistent build tree: one per project × toolchain × job environment.

    Object files are reused only by a build that would compile them the same way.
    """
    digest = hashlib.sha256()
    for part in (
        str(project_dir.resolve()),
        toolchain.key,
        *(f"{k}={v}" for k, v in sorted(job.env)),
    ):
        digest.update(part.encode() + b"\0")
    for key in ("CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "NVCC_FLAGS"):
        digest.update(f"{key}={env.get(key, '')}".encode() + b"\0")
    return cache_dir / "build" / f"{job.id}-{digest.hexdigest()[:16]}"


def job_environment(
    job: BuildJob,
    toolchain: Toolchain,
    opts: BuildOptions,
    *,
    compiler_cache: CompilerCache | None = None,
    notes: list[str] | None = None,
) -> dict[str, str]:
    """The exact environment of a job's build: host env + toolchain + job vars + MAX_JOBS,
    then the compiler cache (`compiler_cache`), or none at all when it is None. A CPU cell's
    sees no CUDA/ROCm toolchain (`toolchain.blind`); what was hidden is appended to `notes`.

    `opts.max_jobs` is the scheduler's share for this job and wins over any other MAX_JOBS
    (the host's, the matrix's): N concurrent jobs x MAX_JOBS never exceed the machine.
    `opts.nvcc_threads` (the scheduler's `nvcc_threads`) goes to nvcc as `--threads`.
    """
    env = dict(opts.env)
    for key, value in toolchain.build_env:
        if key == "PATH" and env.get("PATH"):
            env[key] = f"{value}{os.pathsep}{env['PATH']}"
        else:
            env[key] = value
    env.update(job.env)
    if job.toolkit is not None and env.get("BUILDTOOLS_FORCE_CUDA_AVAILABLE", "1") == "1":
        # setup.py files that ask torch.cuda.is_available() still build device code here
        env["BUILDTOOLS_FORCE_CUDA_AVAILABLE"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SHIMS), env.get("PYTHONPATH")) if p)
    if opts.max_jobs is not None:
        env["MAX_JOBS"] = str(opts.max_jobs)
    elif "MAX_JOBS" not in env:
        env["MAX_JOBS"] = str(os.cpu_count() or 1)
    env["PYTHONNOUSERSITE"] = "1"
    if job.accelerator.kind == "cpu":
        # whatever the machine has, a CPU cell's setup.py finds no nvcc, CUDA_HOME, hipcc…
        blinded = hide_device_toolchain(env, mirror_root=blind_root(opts.cache_dir))
        env = blinded.env
        if notes is not None and blinded.describe():
            notes.append(f"CPU cell, no CUDA/ROCm toolchain visible: {blinded.describe()}")
    env.update(
        reproducible_env(
            env,
            project_dir=opts.project_dir,
            site_packages=toolchain.site_packages,
            device=job.toolkit is not None and job.toolkit.kind == "cuda",
            cuda_version=job.toolkit.version if job.toolkit is not None else None,
        )
    )
    env.update(nvcc_flags_env(opts.nvcc_threads if job.toolkit else 1, env))
    if compiler_cache is not None:
        env.update(
            compiler_cache_env(
                job,
                compiler_cache,
                project_dir=opts.project_dir,
                cuda_home=toolchain.cuda_home,
                path=env.get("PATH", ""),
                site_packages=toolchain.site_packages,
                own_ccbin="NVCC_CCBIN" in env,
            )
        )
        if compiler_cache.tool == "ccache":  # ccache does not hash nvcc's env flags
            env.update(nvcc_flags_namespace(env))
    else:
        env.update(no_cache_env())
    return env


def blind_root(cache_dir: Path) -> Path:
    """Where the PATH directories of CPU builds, less the device programs, are made."""
    return cache_dir / "blind-path"


def source_date_epoch(env: Mapping[str, str]) -> int:
    """The SOURCE_DATE_EPOCH of the build: the caller's when it is a number, else 1980-01-01."""
    value = env.get("SOURCE_DATE_EPOCH", "").strip()
    return int(value) if value.isdigit() else DEFAULT_SOURCE_DATE_EPOCH


def _maps(project_dir: Path, site_packages: Path | None) -> list[str]:
    """OLD=NEW prefix maps of the paths a compile sees that depend on where things live."""
    root = project_dir.resolve()
    # the sources as ccache's base_dir rewrites them, relative to the object directory
    relative = os.path.relpath(root, object_dir(root, root / "x"))
    maps = [f"{root}=.", f"{relative}=."]
    if site_packages is not None:  # torch's headers, whose TORCH_CHECKs embed __FILE__
        maps.append(f"{site_packages.resolve()}=/site-packages")
    # a path through a symbolic link (a linked cache or checkout) reaches the compiler as
    # spelt: it is mapped too
    for path, new in ((project_dir, "."), (site_packages, "/site-packages")):
        if path is not None and path.absolute() != path.resolve():
            maps.append(f"{path.absolute()}={new}")
    return maps


def reproducible_env(
    env: Mapping[str, str],
    *,
    project_dir: Path,
    site_packages: Path | None = None,
    device: bool = False,
    cuda_version: str | None = None,
) -> dict[str, str]:
    """Variables that keep the build machine out of the wheel's bytes.

    SOURCE_DATE_EPOCH (setuptools' wheel writer and compilers' __DATE__ read it), and the
    paths a compile sees mapped to fixed ones in debug info, `__FILE__` and assertion
    messages: the project's absolute path and the relative one ccache's base_dir gives it
    from the object directory (`backends.local.OBJECTS_DIR`) to `.`, torch's site-packages
    to `/site-packages` (`-ffile-prefix-map`, gcc >= 8 and clang >= 10; `-fdebug-prefix-map`
    for the debug info of older ones), appended to CFLAGS/CXXFLAGS so that the caller's flags
    still apply; for a `device` (CUDA) job the same maps reach nvcc's host compiler through
    NVCC_APPEND_FLAGS (`-Xcompiler`), with nvcc's random seed fixed where its nvcc has the
    option (`cuda_version`, `nvcc_seed_env`). The linker's build id is a hash of the
    output, equal when the rest is.
    """
    out = {"SOURCE_DATE_EPOCH": str(source_date_epoch(env))}
    out.update(prefix_maps_env(_maps(project_dir, site_packages), env, device=device))
    if device:
        out.update(nvcc_seed_env({**env, **out}, cuda_version))
    return out
