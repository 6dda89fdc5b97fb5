"""`plan --estimate`: the cost model, recorded timings, CI fan-out and billing (pure)."""

from __future__ import annotations

import io
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fixtures.factories import make_job

from buildtools.cli.estimate import cache_warm_in, env_cached_in, print_estimate
from buildtools.model import BuildJob
from buildtools.toolchain.envs import MARKER
from buildtools.wheelbuild.costmodel import (
    HOSTED_RUNNER,
    CostModel,
    HereFacts,
    ProjectShape,
    estimate_plan,
    project_shape,
)
from buildtools.wheelbuild.scheduler import HostResources
from buildtools.wheelbuild.timings import JobTiming, read_timings, update_timings

SIX_ARCHS = "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
EXAMPLE = ProjectShape(cpp_sources=1, cu_sources=1)
TWO_CORES = HostResources(cores=2, memory_gb=24.0)
MODEL = CostModel()


def job(accelerator: str = "cpu", python: str = "3.12", cells: int = 1, **kw: Any) -> BuildJob:
    pythons = [f"3.{10 + i}" for i in range(cells)] if cells > 1 else [python]
    arch = {"arch_list": SIX_ARCHS} if accelerator.startswith("cu") else {}
    abi = "per-python" if cells == 1 else "abi3"
    return make_job(accelerator=accelerator, pythons=pythons, abi=abi, **arch, **kw)


def estimate(jobs: list[BuildJob], **kw: Any) -> Any:
    facts: dict[str, Any] = {"host": TWO_CORES, "timings": {}, "env_cached": lambda j: True}
    facts["cache_warm"] = lambda j: False
    facts.update({k: kw.pop(k) for k in list(kw) if k in facts})
    args: dict[str, Any] = {
        "cells": sum(len(j.cells) for j in jobs),
        "shape": EXAMPLE,
        "here": HereFacts(**facts),
        "ci_machine": lambda j: HOSTED_RUNNER,
    }
    args.update(kw)
    return estimate_plan(jobs, **args)


def test_project_shape_counts_translation_units() -> None:
    files = [Path(p) for p in ("csrc/a.cpp", "csrc/b.cu", "csrc/a.h", "setup.py", "x.cc")]
    assert project_shape(files) == ProjectShape(cpp_sources=2, cu_sources=1)


def test_the_model_of_the_example_cells() -> None:
    """CPU: one C++ file. CUDA: the .cu's 7 targets 2 at a time beside the C++ file."""
    (cpu,) = estimate([job()]).jobs
    assert cpu.source == "model" and cpu.max_jobs == 2
    assert cpu.seconds == MODEL.env_reused_s + MODEL.fixed_s + MODEL.cpp_tu_s
    (cuda,) = estimate([job("cu130")]).jobs
    assert cuda.nvcc_threads == 2
    per_cu = MODEL.cu_host_s + math.ceil(7 / 2) * MODEL.cu_target_s
    work = (MODEL.cpp_tu_s + MODEL.cu_host_s + 7 * MODEL.cu_target_s) / 2
    assert cuda.seconds == MODEL.env_reused_s + MODEL.fixed_s + max(per_cu, work)


def test_more_threads_are_faster_and_a_created_environment_costs_its_download() -> None:
    (one,) = estimate([job("cu130")], host=HostResources(cores=1, memory_gb=24)).jobs
    (two,) = estimate([job("cu130")]).jobs
    assert one.nvcc_threads == 1 and two.seconds < one.seconds
    (cold,) = estimate([job("cu130")], env_cached=lambda j: False).jobs
    assert cold.seconds - two.seconds == MODEL.env_s["cuda"] - MODEL.env_reused_s


def test_ci_fans_out_one_runner_per_job_and_bills_started_minutes() -> None:
    jobs = [job(python=p) for p in ("3.10", "3.11", "3.12", "3.13")] + [job("cu130")]
    est = estimate(jobs)
    ci = [j.ci_seconds for j in est.jobs]
    assert est.ci_wall_s == pytest.approx(2 * MODEL.control_job_s + max(ci))
    assert est.ci_minutes == sum(math.ceil(s / 60) for s in ci) + 2
    # in CI every environment is created (a runner starts empty), on a 4-core runner
    cpu = est.jobs[0]
    assert cpu.ci_seconds == MODEL.env_s["cpu"] + MODEL.fixed_s + MODEL.cpp_tu_s + MODEL.ci_job_s
    # here: two jobs at a time on two cores (MAX_JOBS=1 each)
    assert est.concurrent == 2 and est.local_s > max(j.seconds for j in est.jobs)


def test_ci_concurrency_limits_the_fan_out() -> None:
    jobs = [job(python=f"3.{i}", id=f"j{i}") for i in range(10)]
    wide = estimate(jobs)
    narrow = estimate(jobs, model=CostModel(ci_concurrency=5))
    assert narrow.ci_wall_s - 2 * MODEL.control_job_s == pytest.approx(
        2 * (wide.ci_wall_s - 2 * MODEL.control_job_s)
    )


def test_a_warm_ccache_takes_every_unit_as_a_direct_hit() -> None:
    warm = {"cache_warm": lambda j: True}
    hit = MODEL.env_reused_s + MODEL.fixed_s + MODEL.ccache_hit_s
    (cpu,) = estimate([job()], **warm).jobs
    assert cpu.cache_warm and cpu.seconds == hit
    (cuda,) = estimate([job("cu130")], **warm).jobs
    assert cuda.max_jobs == 2 and cuda.seconds == hit  # the two files' hits side by side


def test_a_warm_sccache_takes_every_unit_as_a_hit() -> None:
    warm = {"cache_warm": lambda j: True}
    (cpu,) = estimate([job(compiler_cache="sccache")], **warm).jobs
    assert cpu.cache_warm and cpu.source == "model"
    assert cpu.seconds == MODEL.env_reused_s + MODEL.fixed_s + MODEL.cpp_hit_s
    (cuda,) = estimate([job("cu130", compiler_cache="sccache")], **warm).jobs
    # two processes: the .cu's and the C++ file's hits side by side; the .cu is looked up
    # once for its host side and once per arch target (7)
    cu = MODEL.cu_hit_s + 7 * MODEL.cu_hit_target_s
    assert cuda.seconds == MODEL.env_reused_s + MODEL.fixed_s + max(cu, (MODEL.cpp_hit_s + cu) / 2)
    (cold,) = estimate([job("cu130", compiler_cache="sccache")]).jobs
    assert not cold.cache_warm and cold.seconds > cuda.seconds
    # CI starts with no compiler cache of this machine: its figure does not change
    assert cuda.ci_seconds == cold.ci_seconds


def test_a_warm_cache_replaces_a_recorded_cold_compile_only() -> None:
    """The stages measured here stay (env, repair, checks); the compile becomes hits."""
    recorded = JobTiming(
        seconds=300.0, stages={"env": 200.0, "build": 90.0, "repair": 6.0}, max_jobs=2
    )
    the_job = job("cu130", compiler_cache="sccache")
    timings = {the_job.id: recorded}
    (cold,) = estimate([the_job], timings=timings).jobs
    (warm,) = estimate([the_job], timings=timings, cache_warm=lambda j: True).jobs
    cu = MODEL.cu_hit_s + 7 * MODEL.cu_hit_target_s
    hits = max(cu, (MODEL.cpp_hit_s + cu) / 2)
    assert warm.seconds == pytest.approx(cold.seconds - 90.0 + MODEL.build_overhead_s + hits)
    # a recorded build that was itself warm is what a warm build costs: kept whole
    was_warm = {the_job.id: JobTiming(**{**recorded.__dict__, "warm": True})}
    (kept,) = estimate([the_job], timings=was_warm, cache_warm=lambda j: True).jobs
    assert kept.seconds == pytest.approx(cold.seconds)
    assert JobTiming.from_json(was_warm[the_job.id].to_json()) == was_warm[the_job.id]
    assert JobTiming.from_json({"seconds": 1.0, "warm": "yes"}) == JobTiming(seconds=1.0)
    report = estimate([the_job], timings=timings, cache_warm=lambda j: True).to_json()
    assert report["jobs"][the_job.id]["cache_warm"] is True


def test_recorded_timings_replace_the_model() -> None:
    recorded = JobTiming(
        seconds=300.0, stages={"env": 200.0, "build": 90.0, "repair": 6.0}, max_jobs=2
    )
    the_job = job("cu130")
    (est,) = estimate([the_job], timings={the_job.id: recorded}).jobs
    assert est.source == "recorded"
    assert est.seconds == pytest.approx(300.0 - 200.0 + MODEL.env_reused_s)  # env exists now
    (cold,) = estimate([the_job], timings={the_job.id: recorded}, env_cached=lambda j: False).jobs
    assert cold.seconds == pytest.approx(300.0 - 200.0 + MODEL.env_s["cuda"])
    # a bare number (timings.json before stages were recorded) is taken as it is
    (bare,) = estimate([the_job], timings={the_job.id: JobTiming(seconds=123.0)}).jobs
    assert bare.seconds == 123.0


def test_a_recorded_run_adds_the_run_around_its_jobs_once() -> None:
    # a timing is one job's, start to end: the run's own start (imports, plan, fingerprints,
    # report) came on top of it in the measured wall (warm: 6.1 s estimated, 8.7 s measured)
    one, two = job("cpu"), job("cu130")
    timings = {j.id: JobTiming(seconds=5.0) for j in (one, two)}
    both = estimate([one, two], timings=timings)
    assert both.local_s == pytest.approx(max(5.0, 5.0) + MODEL.run_s)  # two lanes, one run
    model_only = estimate([one, two])
    assert model_only.local_s == max(j.seconds for j in model_only.jobs)  # fixed_s holds it


def test_the_abi_mode_and_skip_unchanged_savings() -> None:
    grouped = job(cells=4)
    est = estimate([grouped])
    assert est.cells == 4 and est.builds_saved == 3
    assert est.minutes_saved_by_abi == 3 * est.jobs[0].ci_minutes
    assert est.unchanged_minutes == 1 + 2  # one job finding its wheel published, plan, index


def test_timings_file_round_trip_and_merge(tmp_path: Path) -> None:
    (tmp_path / "timings.json").write_text(json.dumps({"old": 12.5, "bad": "x", "neg": -1}))
    assert read_timings(tmp_path) == {"old": JobTiming(seconds=12.5)}
    update_timings(tmp_path, {"new": JobTiming(seconds=3.0, stages={"env": 1.0}, max_jobs=2)})
    got = read_timings(tmp_path)
    assert set(got) == {"old", "new"}  # another run's entry is kept
    assert got["new"] == JobTiming(seconds=3.0, stages={"env": 1.0}, max_jobs=2)
    (tmp_path / "timings.json").write_text("[1, 2]")
    assert read_timings(tmp_path) == {}


def test_the_printed_estimate_names_the_totals() -> None:
    out = io.StringIO()
    print_estimate(estimate([job("cu130")]), out)
    text = out.getvalue()
    assert "runner-minute(s) billed" in text
    assert "model (env cached, MAX_JOBS=2, nvcc --threads 2)" in text


def test_plan_estimate_through_the_cli(tmp_path: Path) -> None:
    """The reference matrix's pr profile, with an empty cache directory: the model's figures,
    in the JSON next to the plan (each job with its nvcc threads) and as a table."""
    from buildtools.cli.main import main

    repo = Path(__file__).resolve().parents[2]
    argv = ["plan", "--matrix", str(repo / "matrix.yaml"), "--profile", "pr", "--estimate"]
    argv += ["--cache-dir", str(tmp_path)]
    out = io.StringIO()
    assert main([*argv, "--format", "json"], out=out) == 0
    data = json.loads(out.getvalue())
    assert {j["id"] for j in data["include"]} == set(data["estimate"]["jobs"])
    assert all(isinstance(j["nvcc_threads"], int) for j in data["include"])
    assert all(j["source"] == "model" for j in data["estimate"]["jobs"].values())
    assert data["estimate"]["ci_runner_minutes"] >= len(data["include"]) + 2
    table = io.StringIO()
    assert main(argv, out=table) == 0
    assert "runner-minute(s) billed" in table.getvalue()


def test_the_facts_of_a_cache_directory(tmp_path: Path) -> None:
    """An environment is found by its accelerator's name (a repr in the glob never matched:
    every estimate added the environment's download, 280 s for a CUDA cell); a compiler
    cache is warm once the job's directory holds an entry."""
    cuda = job("cu130", torch="2.11.0")
    cached = env_cached_in(tmp_path)
    assert not cached(cuda)
    env = tmp_path / "envs" / "toolchains" / "py3.12.1-torch2.11.0-cu130-c80e6c760b02"
    env.mkdir(parents=True)
    assert not cached(cuda)  # not complete yet
    (env / MARKER).write_text("{}")
    assert cached(cuda) and not cached(job("cu126", torch="2.11.0"))
    warm = cache_warm_in(tmp_path, {})
    assert not warm(cuda)
    entry = tmp_path / "ccache" / cuda.id / "a" / "b" / "0123"  # the default tool
    entry.parent.mkdir(parents=True)
    entry.write_bytes(b"object")
    assert warm(cuda)
    assert not cache_warm_in(tmp_path, {"BUILDTOOLS_CCACHE_DIR": str(tmp_path / "x")})(cuda)
    assert not warm(replace(cuda, compiler_cache=None))


def test_timings_are_per_project(tmp_path: Path) -> None:
    """Two projects build jobs of one id: one's timing is no ETA for the other's."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    (tmp_path / "timings.json").write_text(json.dumps({"torch2.11.0-cu130-cp312": 3110.0}))
    assert read_timings(tmp_path, project=one) == {}  # an unscoped entry names no project
    update_timings(tmp_path, {"torch2.11.0-cu130-cp312": JobTiming(seconds=128.0)}, project=one)
    update_timings(tmp_path, {"torch2.11.0-cu130-cp312": JobTiming(seconds=916.0)}, project=two)
    assert read_timings(tmp_path, project=one) == {
        "torch2.11.0-cu130-cp312": JobTiming(seconds=128.0)
    }
    assert read_timings(tmp_path, project=two) == {
        "torch2.11.0-cu130-cp312": JobTiming(seconds=916.0)
    }
    assert len(read_timings(tmp_path)) == 2  # the old unscoped entry was dropped
