"""`buildtools ci builder-image` (cisteps.cache_jobs.build_image): the image is saved under
the tag the plan named, also on a runner that already holds the base image."""

from __future__ import annotations

import io
from pathlib import Path

from fixtures.factories import planned_job
from fixtures.fakes import FakeRunner

from buildtools.backends.registry import BackendOptions, BackendSetting, docker_backend
from buildtools.cisteps.cache_jobs import build_image
from buildtools.context import RunContext
from buildtools.knowledge import load_knowledge

KB = load_knowledge()
INSPECT_ID = ("docker", "image", "inspect", "--format", "{{.Id}}")


def _plan_tag(tmp_path: Path) -> str:
    setting = BackendSetting(kb=KB, cache_dir=tmp_path / "cache", env={})
    return (
        docker_backend(setting, BackendOptions())
        .image_for(planned_job("torch2.13.0-cpu-cp311"))
        .tag
    )


def test_fresh_runner_saves_the_plans_tag(tmp_path: Path) -> None:
    # no base locally: the builder tag is the plan's; the image exists already (reused)
    runner = FakeRunner().on(*INSPECT_ID, returncode=1)
    env = {"BUILDTOOLS_CACHE_DIR": str(tmp_path / "cache")}
    save = tmp_path / "out" / "image.tar"
    tag = build_image(
        planned_job("torch2.13.0-cpu-cp311"),
        kb=KB,
        ctx=RunContext(processes=runner, env=env, log=io.StringIO()),
        save=save,
    )
    assert tag == _plan_tag(tmp_path)
    assert not runner.matching("docker", "tag")
    assert runner.argvs[-1] == ["docker", "save", "--output", str(save), tag]


def test_runner_holding_the_base_tags_its_image_with_the_plans_name(tmp_path: Path) -> None:
    """Found by `nox -s ci-run`: the base present locally gave another tag, and the images
    job's `docker image inspect "$IMAGE"` (the plan's tag) found no such image."""
    runner = FakeRunner().on(*INSPECT_ID, output="sha256:" + "1" * 64 + "\n")
    env = {"BUILDTOOLS_CACHE_DIR": str(tmp_path / "cache")}
    save = tmp_path / "image.tar"
    tag = build_image(
        planned_job("torch2.13.0-cpu-cp311"),
        kb=KB,
        ctx=RunContext(processes=runner, env=env, log=io.StringIO()),
        save=save,
    )
    plan = _plan_tag(tmp_path)
    assert tag == plan
    [retag] = runner.matching("docker", "tag")
    built = retag.argv[2]
    assert built != plan and retag.argv[3] == plan
    assert runner.argvs[-1] == ["docker", "save", "--output", str(save), plan]
