"""The docker work of the cache jobs: one builder image per recipe, one download group.

`build_image` makes the builder image of a job exactly as a build would (the docker
backend's `ensure_image`), then saves it for the Actions cache or pushes it to
`ci.image_registry`; `prefetch` fills the prefetch directory the way an offline build
does. Every process goes through the ProcessRunner.
"""

from __future__ import annotations

__all__ = ["build_image", "prefetch"]

from collections.abc import Sequence
from pathlib import Path

from ..backends.docker.images import validate_image_ref
from ..backends.registry import BackendOptions, BackendSetting, docker_backend
from ..cachedir import default_cache_dir
from ..context import RunContext
from ..errors import BuildFailedError
from ..knowledge import Knowledge
from ..model import BuildJob


def build_image(
    job: BuildJob,
    *,
    kb: Knowledge,
    ctx: RunContext,
    save: Path | None = None,
    push: str | None = None,
) -> str:
    """Build (or find) the builder image of `job`; `docker save` it or push it; its tag.

    The tag is the one the plan named (the builder tag of a fresh runner, which has no
    local base): a runner that holds the base already (a persistent self-hosted runner, a
    second run on one machine) builds under a tag that also covers the base's local ID,
    and that image is tagged with the plan's name too, so the archive and the images job's
    `docker image inspect "$IMAGE"` name what the builds of this run load (they check
    its ID against the images job's output).
    """
    runner, log, env = ctx.processes, ctx.stream, ctx.env
    setting = BackendSetting(kb=kb, cache_dir=default_cache_dir(env), env=env)
    backend = docker_backend(setting, BackendOptions())
    built = backend.ensure_image(job, runner=runner, log=log)
    tag = backend.image_for(job).tag
    commands: list[list[str]] = [] if built == tag else [["docker", "tag", built, tag]]
    if save is not None:
        save.parent.mkdir(parents=True, exist_ok=True)
        commands.append(["docker", "save", "--output", str(save), tag])
    if push is not None:
        ref = validate_image_ref(push, what="--push")
        commands += [["docker", "tag", tag, ref], ["docker", "push", ref]]
    for argv in commands:
        result = runner.run(argv, env=env, log=log)
        if not result.ok:
            raise BuildFailedError(
                f"`{' '.join(argv)}` failed (exit {result.returncode}); the builds of this "
                "recipe build their own image meanwhile"
            )
    return tag


def prefetch(
    jobs: Sequence[BuildJob],
    *,
    kb: Knowledge,
    ctx: RunContext,
    extra: Sequence[str] = (),
) -> Path:
    """Download what the jobs' containers install into the prefetch directory; its path
    (`extra`: the project's own build requirements)."""
    runner, log, env = ctx.processes, ctx.stream, ctx.env
    setting = BackendSetting(kb=kb, cache_dir=default_cache_dir(env), env=env)
    backend = docker_backend(setting, BackendOptions(offline=True))
    dest = default_cache_dir(env) / "prefetch"
    for job in jobs:
        dest = backend.prefetch(job, runner=runner, log=log, extra=extra)
    return dest
