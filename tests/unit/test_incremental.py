"""Skip-unchanged and --force, without building anything: which jobs get a fingerprint, where
a wheel with the same fingerprint is found (wheelhouse, published index), and that only an
unchanged job is skipped (the fingerprint's inputs: test_fingerprint.py)."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fixtures.crafted import make_wheel
from fixtures.factories import make_job
from fixtures.fakes import FakeRunner

from buildtools.knowledge import load_knowledge
from buildtools.model import BuildJob
from buildtools.planner import Plan
from buildtools.toolchain.envs import Toolchain
from buildtools.wheelbuild.build_report import Status
from buildtools.wheelbuild.fingerprint import (
    fingerprint_inputs,
    job_fingerprint,
)
from buildtools.wheelbuild.incremental import PriorWheels, job_fingerprints
from buildtools.wheelbuild.options import BuildOptions
from buildtools.wheelbuild.orchestrate import build_plan
from buildtools.wheelbuild.scheduler import HostResources

TOOLCHAIN = {"python": "3.12.1", "torch_requirement": "torch==2.11.0", "accelerator": "cu130"}


def test_current_jobs_have_no_fingerprint() -> None:
    jobs = [make_job(), make_job(id="cur", torch_source="current", current_python="/p")]
    inputs = fingerprint_inputs(
        jobs[0],
        sources="sha256:src",
        toolchain=TOOLCHAIN,
        backend={"backend": "local"},
        host_env={},
    )
    calls: list[str] = []

    def toolchain(job: BuildJob) -> Mapping[str, Any]:
        calls.append(job.id)
        return TOOLCHAIN

    out = job_fingerprints(
        jobs,
        sources="sha256:src",
        toolchain=toolchain,
        backend=lambda job: {"backend": "local"},
        host_env={},
    )
    assert out["cur"] is None and out[jobs[0].id] == job_fingerprint(inputs)
    assert calls == [jobs[0].id]  # a current job's torch is never probed for a fingerprint


# ------------------------------------------------------------------------ prior wheels


def wheel_with_record(directory: Path, fingerprint: str | None, name: str = "ext") -> Path:
    record = {"schema": 1, "torch": "2.11.0+cu130", "accelerator": "cu130", "cxx11_abi": True}
    if fingerprint is not None:
        record["fingerprint"] = fingerprint
    return make_wheel(
        directory,
        name=name,
        version="0.1.0+pt211cu130",
        dist_info_files={"buildtools.json": json.dumps(record).encode()},
    )


def test_prior_wheels_find_the_wheelhouse_wheel_by_fingerprint(tmp_path: Path) -> None:
    wheel = wheel_with_record(tmp_path / "wh", "sha256:aaa")
    wheel_with_record(tmp_path / "other", None)
    (tmp_path / "wh" / "broken.whl").write_bytes(b"not a zip")
    prior = PriorWheels(tmp_path / "wh")
    found = prior.find("sha256:aaa")
    assert found is not None and found.wheel == str(wheel) and found.where == "wheelhouse"
    assert found.size == wheel.stat().st_size and len(found.sha256) == 64
    assert prior.find("sha256:bbb") is None
    assert prior.find(None) is None


def test_prior_wheels_find_a_published_wheel_in_index_json(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    entry = {
        "filename": "ext-0.1.0+pt211cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
        "sha256": "ab" * 32,
        "size": 123,
        "name": "ext",
        "version": "0.1.0+pt211cu130",
        "requires_python": None,
        "metadata_sha256": "cd" * 32,
        "torch": "2.11.0",
        "torch_versions": ["2.11.0"],
        "torch_specifier": "==2.11.*",
        "accelerator": "cu130",
        "url": None,
        "fingerprint": "sha256:pub",
    }
    manifest = {"schema": "torch-buildtools/index/v1", "wheels": [entry], "generated": []}
    (site / "index.json").write_text(json.dumps(manifest))
    found = PriorWheels(tmp_path / "empty-wheelhouse", index_site=site).find("sha256:pub")
    assert found is not None and found.where == "index" and found.size == 123
    assert found.wheel == str(site / "wheels" / entry["filename"])
    assert PriorWheels(tmp_path / "x", index_site=site).find("sha256:nope") is None


# ------------------------------------------------------------------ build_plan: skip / force


class RecordingBackend:
    name = "local"
    needs_host_toolkit = True
    repairs_inside = False

    def __init__(self) -> None:
        self.preflights = 0
        self.built: list[str] = []

    def preflight(self, runner: object) -> None:
        self.preflights += 1

    def build_raw(self, job: BuildJob, toolchain: Toolchain, **kw: Any) -> list[Path]:
        self.built.append(job.id)
        raise AssertionError("never reached: the toolchain fails first")


def run_plan(tmp_path: Path, *, force: bool, fingerprint: str) -> tuple[Any, RecordingBackend]:
    job = make_job()
    plan = Plan(profile=None, cells=job.cells, jobs=(job,), removed=(), excluded=0)
    opts = BuildOptions(
        project_dir=tmp_path / "src",
        wheelhouse=tmp_path / "wh",
        cache_dir=tmp_path / "cache",
        env={"HOME": str(tmp_path), "PATH": ""},
        live=False,
        force=force,
        host=HostResources(cores=2, memory_gb=8),
    )
    backend = RecordingBackend()
    report = build_plan(
        plan,
        kb=load_knowledge(),
        opts=opts,
        runner=FakeRunner().on(returncode=1),  # any process fails: the job fails fast
        backend=backend,
        out=io.StringIO(),
        fingerprints={job.id: fingerprint},
    )
    return report, backend


def test_unchanged_job_is_skipped_with_the_existing_wheel(tmp_path: Path) -> None:
    wheel = wheel_with_record(tmp_path / "wh", "sha256:same")
    report, backend = run_plan(tmp_path, force=False, fingerprint="sha256:same")
    (cell,) = report.cells
    assert cell.status is Status.SKIPPED_UNCHANGED
    assert cell.wheel == str(wheel) and cell.size == wheel.stat().st_size
    assert "--force rebuilds" in (cell.reason or "")
    assert backend.preflights == 0  # a no-op run needs no engine, no environment
    data = json.loads((tmp_path / "wh" / "report.json").read_text())
    assert data["cells"][0]["status"] == "skipped-unchanged"


def test_force_rebuilds_an_unchanged_job(tmp_path: Path) -> None:
    wheel_with_record(tmp_path / "wh", "sha256:same")
    report, backend = run_plan(tmp_path, force=True, fingerprint="sha256:same")
    (cell,) = report.cells
    assert cell.status is Status.FAILED  # it was built (and failed on the fake world)
    assert backend.preflights == 1


def test_a_changed_fingerprint_rebuilds(tmp_path: Path) -> None:
    wheel_with_record(tmp_path / "wh", "sha256:old")
    report, _ = run_plan(tmp_path, force=False, fingerprint="sha256:new")
    assert report.cells[0].status is Status.FAILED


def test_timings_in_another_shape_are_ignored(tmp_path: Path) -> None:
    """The ETA cache is a hint: a timings.json another version wrote (nested, strings,
    booleans) must not stop a build."""
    from buildtools.wheelbuild.timings import read_timings

    (tmp_path / "timings.json").write_text(
        '{"a": 12.5, "b": {"total": 3}, "c": "x", "d": true, "e": 4, "f": {"seconds": "1"},'
        ' "g": {"seconds": 7, "stages": {"build": 5}}, "h": [1]}'
    )
    assert {k: v.seconds for k, v in read_timings(tmp_path).items()} == {
        "a": 12.5,
        "e": 4.0,
        "g": 7.0,
    }
