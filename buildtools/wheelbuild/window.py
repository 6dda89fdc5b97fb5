"""The torch releases a wheel is checked against: its build's, and a stable-ABI job's window."""

from __future__ import annotations

from dataclasses import replace
from typing import IO

from ..context import RunContext
from ..model import BuildJob
from ..process import ProcessRunner
from ..toolchain.envs import Toolchain
from ..toolchain.prepare import prepare_toolchain
from ..wheel.checks import TorchTarget, load_torch_target
from .options import BuildOptions


def window_targets(
    job: BuildJob, toolchain: Toolchain, opts: BuildOptions, runner: ProcessRunner, log: IO[str]
) -> list[TorchTarget]:
    """The torch installations the wheel must work with: the build's, and for a stable-ABI
    job each other release of its window, in an environment with torch only (where any
    build of the release will do for a CPU wheel: `torchinstall.window_build_ok`)."""
    targets = [load_torch_target(toolchain.site_packages)]
    for other in job.torch_versions:
        if other == job.torch:
            continue
        sibling = replace(job, torch=other, torch_requirement=f"torch=={other}")
        tc = prepare_toolchain(
            sibling,
            job.build_python,
            cache_dir=opts.cache_dir / "envs",
            cuda_home=opts.cuda_home,
            with_toolkit=False,
            ctx=RunContext(processes=runner, env=opts.env, log=log),
        )
        targets.append(load_torch_target(tc.site_packages))
    return targets
