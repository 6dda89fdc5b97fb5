"""The torch a wheel is built with and checked against; a stable-ABI job's window.

Any job but a stable-ABI one is built with its own torch. A stable-ABI job is built once
for its whole window with the newest release of the window whose build for its accelerator
can be had (`planner.build_candidates`: each release pinned to that build, newest first,
so a release with no such build is refused by the installer before any download); its
environment already sets `TORCH_TARGET_VERSION` to the window's floor. The job the build
then runs is the job with that torch.

The wheel is checked against the torch it was built with; the rest of the window is judged
without installing it: the stable-ABI check reads which shims each release has from
`data/stable_abi.json`, and `buildtools smoke` runs the wheel on every release.
"""

from __future__ import annotations

__all__ = ["build_toolchain", "window_targets"]

from collections.abc import Callable
from dataclasses import replace

from ..context import RunContext
from ..errors import ToolchainError
from ..knowledge import Knowledge
from ..model import BuildJob
from ..planner import build_candidates
from ..toolchain.envs import Toolchain
from ..toolchain.prepare import prepare_toolchain
from ..wheel.checks import TorchTarget, load_torch_target
from .options import BuildOptions


def _as_built_with(job: BuildJob, kb: Knowledge, torch: str, requirement: str) -> BuildJob:
    """`job` built with `torch` (its CUDA toolkit pinned to that release's, as planned)."""
    toolkit = job.toolkit
    if toolkit is not None and toolkit.pip_packages:
        toolkit = replace(toolkit, pip_packages=kb.toolkit_requirements(torch, job.accelerator))
    return replace(job, torch=torch, torch_requirement=requirement, toolkit=toolkit)


def build_toolchain(
    job: BuildJob,
    kb: Knowledge,
    opts: BuildOptions,
    *,
    with_toolkit: bool,
    ctx: RunContext,
    prepare: Callable[..., Toolchain] = prepare_toolchain,
) -> tuple[BuildJob, Toolchain]:
    """(the job as it will be built, its environment): the first candidate torch that
    installs (see the module); ToolchainError naming every candidate's failure.
    `prepare` makes one environment (`prepare_toolchain`; tests pass their own)."""
    candidates = build_candidates(job, kb)
    failures: list[str] = []
    for torch, requirement in candidates:
        built = job if len(candidates) == 1 else _as_built_with(job, kb, torch, requirement)
        try:
            toolchain = prepare(
                built,
                built.build_python,
                cache_dir=opts.cache_dir / "envs",
                cuda_home=opts.cuda_home,
                with_toolkit=with_toolkit,
                ctx=ctx,
            )
        except ToolchainError as exc:
            if len(candidates) == 1:
                raise
            failures.append(f"{requirement}: {str(exc).splitlines()[0]}")
            ctx.stream.write(f"[window] {requirement} cannot build {job.id}: {exc}\n")
            continue
        if len(candidates) > 1:
            ctx.stream.write(
                f"[window] {job.id}: built once with {requirement} for torch "
                f"{', '.join(job.torch_versions)} ({job.requires_dist}; the floor "
                f"{job.torch_versions[0]} is TORCH_TARGET_VERSION)\n"
            )
        return built, toolchain
    raise ToolchainError(
        f"{job.id}: no release of its window has a {job.accelerator.name} build that installs "
        f"here ({'; '.join(failures)}); give the torch index of that build "
        f"(accelerators: {{{job.accelerator.kind}: {{torch_index: …}}}} in matrix.yaml)"
    )


def window_targets(toolchain: Toolchain) -> list[TorchTarget]:
    """The torch installations the wheel is checked against: the one it was built with.
    The other releases of a stable-ABI window are judged from the stable-ABI facts."""
    return [load_torch_target(toolchain.site_packages)]
