"""Job fingerprints, skip-unchanged and --force, without building anything.

A stale wheel must never be reused: every input that can change the wheel changes the
fingerprint; inputs that only say where or how fast a job runs do not.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import pytest
from fixtures.crafted import make_wheel

from buildtools.build.fingerprint import (
    build_vars,
    fingerprint_inputs,
    job_fingerprint,
    source_fingerprint,
)
from buildtools.build.incremental import PriorWheels, job_fingerprints
from buildtools.build.options import BuildOptions
from buildtools.build.orchestrate import build_plan
from buildtools.build.report import Status
from buildtools.build.scheduler import HostResources
from buildtools.knowledge import load_knowledge
from buildtools.model import Accelerator, BuildJob, Cell, RepairPolicy, Toolkit
from buildtools.planner import Plan
from buildtools.runner import CommandResult
from buildtools.toolchain.envs import Toolchain

TOOLCHAIN = {"python": "3.12.1", "torch_requirement": "torch==2.11.0", "accelerator": "cu130"}


def make_job(**kw: Any) -> BuildJob:
    cell = Cell(torch="2.11.0", accelerator="cu130", python="3.12")
    fields: dict[str, Any] = {
        "id": cell.id,
        "cells": (cell,),
        "abi": "per-python",
        "torch": "2.11.0",
        "torch_versions": ("2.11.0",),
        "accelerator": Accelerator.parse("cu130"),
        "pythons": ("3.12",),
        "platform": "linux_x86_64",
        "torch_requirement": "torch==2.11.0",
        "requires_dist": "torch==2.11.*",
        "toolkit": Toolkit(kind="cuda", version="13.0", arch_list="8.0;9.0+PTX"),
        "image": "local",
        "platform_tag": "manylinux_2_28_x86_64",
        "local_version": "pt211cu130",
        "cxx11_abi": True,
        "env": (("TORCH_CUDA_ARCH_LIST", "8.0;9.0+PTX"),),
        "runner": "ubuntu-24.04",
        "smoke_runner": None,
        "repair": RepairPolicy(),
    }
    fields.update(kw)
    return BuildJob(**fields)


def fp(
    job: BuildJob | None = None,
    *,
    sources: str = "sha256:src",
    toolchain: Mapping[str, Any] = TOOLCHAIN,
    backend: Mapping[str, str] | None = None,
    host_env: Mapping[str, str] | None = None,
) -> str:
    return job_fingerprint(
        fingerprint_inputs(
            job or make_job(),
            sources=sources,
            toolchain=toolchain,
            backend=backend or {"backend": "local"},
            host_env=host_env or {},
        )
    )


# ------------------------------------------------------------------------ the fingerprint


def test_same_inputs_same_fingerprint() -> None:
    assert fp() == fp()
    assert fp().startswith("sha256:")


@pytest.mark.parametrize(
    ("what", "changed"),
    [
        ("a source file", {"sources": "sha256:other"}),
        (
            "a build_env value",
            {"job": make_job(env=(("TORCH_CUDA_ARCH_LIST", "8.0;9.0+PTX"), ("X", "1")))},
        ),
        (
            "the arch list",
            {"job": make_job(toolkit=Toolkit(kind="cuda", version="13.0", arch_list="9.0"))},
        ),
        (
            "the torch version",
            {
                "job": make_job(torch="2.11.1", torch_requirement="torch==2.11.1"),
                "toolchain": {**TOOLCHAIN, "torch_requirement": "torch==2.11.1"},
            },
        ),
        ("the Python full version", {"toolchain": {**TOOLCHAIN, "python": "3.12.2"}}),
        ("the toolkit pins", {"toolchain": {**TOOLCHAIN, "toolkit": ["cuda-toolkit==13.0.2"]}}),
        ("the local version label", {"job": make_job(local_version="pt211cu130x")}),
        ("the repair excludes", {"job": make_job(repair=RepairPolicy(excludes=("libfoo.so*",)))}),
        ("the backend", {"backend": {"backend": "docker", "image": "b:1"}}),
        ("the host's CXX", {"host_env": {"CXX": "clang++"}}),
        ("the host's TORCH_CUDA_ARCH_LIST", {"host_env": {"TORCH_CUDA_ARCH_LIST": "9.0"}}),
        ("the host's FORCE_ONLY_CPU", {"host_env": {"FORCE_ONLY_CPU": "1"}}),
    ],
)
def test_every_input_of_the_wheel_changes_the_fingerprint(
    what: str, changed: dict[str, Any]
) -> None:
    assert fp(**changed) != fp(), what


@pytest.mark.parametrize(
    ("what", "changed"),
    [
        ("the build runner label", {"job": make_job(runner="big-runner")}),
        ("the smoke runner", {"job": make_job(smoke_runner=("self-hosted", "gpu"))}),
        (
            "MAX_JOBS of the job",
            {"job": make_job(env=(("TORCH_CUDA_ARCH_LIST", "8.0;9.0+PTX"), ("MAX_JOBS", "7")))},
        ),
        ("ccache off", {"job": make_job(ccache=False)}),
        (
            "unrelated host variables",
            {"host_env": {"TERM": "xterm", "MAX_JOBS": "3", "HOME": "/x"}},
        ),
    ],
)
def test_where_and_how_fast_do_not_change_the_fingerprint(
    what: str, changed: dict[str, Any]
) -> None:
    assert fp(**changed) == fp(), what


def test_build_vars_keep_compiler_and_torch_variables_only() -> None:
    env = {"CC": "gcc", "CFLAGS": "-O2", "PYTORCH_ROCM_ARCH": "gfx90a", "PATH": "/bin", "PWD": "/x"}
    assert build_vars(env) == {"CC": "gcc", "CFLAGS": "-O2", "PYTORCH_ROCM_ARCH": "gfx90a"}


def test_source_fingerprint_follows_content_not_mtime(tmp_path: Path) -> None:
    (tmp_path / "csrc").mkdir()
    cpp = tmp_path / "csrc" / "a.cpp"
    cpp.write_text("int a;\n")
    (tmp_path / "build").mkdir()  # build outputs are not sources
    (tmp_path / "build" / "a.o").write_bytes(b"\0")
    first = source_fingerprint(tmp_path)
    cpp.touch()
    (tmp_path / "build" / "a.o").write_bytes(b"\1")
    assert source_fingerprint(tmp_path) == first
    cpp.write_text("int a = 1;\n")
    assert source_fingerprint(tmp_path) != first


def test_current_jobs_have_no_fingerprint() -> None:
    jobs = [make_job(), make_job(id="cur", torch_source="current", current_python="/p")]
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
    assert out["cur"] is None and out[jobs[0].id] == fp()
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


class FailingRunner:
    """Any process fails: a job that is not skipped fails fast, and we see it was tried."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        log: IO[str] | None = None,
        capture: bool = False,
        timeout: float | None = None,
    ) -> CommandResult:
        self.calls.append([str(a) for a in argv])
        return CommandResult(argv=tuple(argv), returncode=1, output="")


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
        runner=FailingRunner(),
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
