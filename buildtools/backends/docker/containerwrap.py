"""The nvcc wrapper (`toolchain.devicewrap`) in the builder container: the cell's arch flags
under `arch_flags: enforce`, and device units reused by the other Python cells of one torch ×
CUDA, as on the host (`wheelbuild.deviceunits`; docs/docker.md).

The host's unit store is mounted read-write at CONTAINER_UNITS_DIR and the job's wrapper log
(a file of its staging directory, read back by the build) at CONTAINER_WRAP_LOG; the config
is a file of the job directory. The wrapper runs under the image's tools Python (a cell's
Python may be older than the wrapper's code) and asks the cell's `python`, first on PATH, for
its site-packages and include directories: their paths differ per Python (lib/python3.X), so
the wrapper maps the site-packages out of each compile, as the host's build does.
"""

from __future__ import annotations

__all__ = [
    "CONTAINER_UNITS_DIR",
    "CONTAINER_WRAP_LOG",
    "ContainerWrap",
    "WrapLayout",
    "container_wrap",
]

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from ...model import BuildJob
from ...toolchain.archopts import cuda_arch_flags
from ...toolchain.devicewrap import WrapConfig
from .incontainer import CUDA_LINK

CONTAINER_UNITS_DIR = "/buildtools/units"
CONTAINER_WRAP_LOG = "/buildtools/devicewrap.jsonl"
WRAP_CONFIG = "devicewrap.json"  # in the job directory


@dataclass(frozen=True)
class WrapLayout:
    """Where the container keeps what the wrapper needs (cibw's paths)."""

    tools_python: str
    lib_dir: str  # holds the mounted package, whose toolchain/devicewrap.py is the wrapper
    job_dir: str
    project: str


@dataclass(frozen=True, kw_only=True)
class ContainerWrap:
    """What a job's container gets for the wrapper."""

    mounts: tuple[tuple[Path, str], ...]  # (host, container): the store and the log, read-write
    env: tuple[tuple[str, str], ...]  # PYTORCH_NVCC through the wrapper
    config: tuple[str, str]  # (name, text) of the job directory's config file


def container_wrap(
    job: BuildJob,
    units_dir: Path | None,
    log: Path | None,
    launcher: str | None,
    layout: WrapLayout,
) -> ContainerWrap | None:
    """The wrapper for a CUDA job whose build asked for it (`log`: the host file its calls are
    logged to; `units_dir`: the unit store, None without reuse); `launcher` is the container's
    PYTORCH_NVCC before it (the compiler cache's), which the wrapper calls. None: no wrapper."""
    toolkit = job.toolkit
    if log is None or toolkit is None or toolkit.kind != "cuda":
        return None
    nvcc = f"{CUDA_LINK}/bin/nvcc"
    enforce = toolkit.arch_flags == "enforce"
    config = WrapConfig(
        downstream=tuple(shlex.split(launcher)) if launcher else (nvcc,),
        compiler=nvcc,
        arch_flags=tuple(cuda_arch_flags(toolkit.arch_list)) if enforce else None,
        store=CONTAINER_UNITS_DIR if units_dir is not None else None,
        job=job.id,
        project=layout.project,  # mapped to `.` by the container's prefix maps
        log=CONTAINER_WRAP_LOG,
        python="python",
    )
    mounts = [(log, CONTAINER_WRAP_LOG)]
    if units_dir is not None:
        mounts.append((units_dir, CONTAINER_UNITS_DIR))
    wrapper = f"{layout.lib_dir}/buildtools/toolchain/devicewrap.py"
    argv = [layout.tools_python, "-I", wrapper, f"{layout.job_dir}/{WRAP_CONFIG}"]
    return ContainerWrap(
        mounts=tuple(mounts),
        env=(("PYTORCH_NVCC", shlex.join(argv)),),
        config=(WRAP_CONFIG, json.dumps(config.to_json(), indent=1) + "\n"),
    )
