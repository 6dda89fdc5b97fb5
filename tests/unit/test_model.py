"""The shared records: a job's JSON round-trips, build records validate, repair is one value."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from buildtools.knowledge import load_knowledge
from buildtools.matrix.config import parse_matrix
from buildtools.matrix.yamlsource import SourceMap, load_yaml
from buildtools.model import (
    Accelerator,
    BuildJob,
    BuildRecord,
    BuildRecordError,
    Cell,
    RepairPolicy,
    Toolkit,
)
from buildtools.planner import Selection, plan
from buildtools.wheel.meta import parse_build_record
from buildtools.wheelbuild.fingerprint import job_config, job_fingerprint

REPO = Path(__file__).resolve().parents[2]
KB = load_knowledge()


def pinned_job() -> BuildJob:
    """A job whose fingerprinted configuration is pinned below (keep it unchanged)."""
    cells = tuple(Cell(torch="2.11.0", accelerator="cu130", python=p) for p in ("3.10", "3.12"))
    return BuildJob(
        id="torch2.11.0-cu130-cp310-abi3",
        cells=cells,
        abi="abi3",
        torch="2.11.0",
        torch_versions=("2.11.0",),
        accelerator=Accelerator.parse("cu130"),
        pythons=("3.10", "3.12"),
        platform="linux_x86_64",
        torch_requirement="torch==2.11.0",
        requires_dist="torch==2.11.*",
        toolkit=Toolkit(
            kind="cuda",
            version="13.0",
            arch_list="8.0;9.0+PTX",
            pip_packages=("cuda-toolkit[nvcc]==13.0.*",),
        ),
        image="pytorch/manylinux2_28-builder:cuda13.0",
        platform_tag="manylinux_2_28_x86_64",
        local_version="pt211cu130",
        cxx11_abi=True,
        env=(("FORCE_CUDA", "1"), ("MAX_JOBS", "4"), ("TORCH_CUDA_ARCH_LIST", "8.0;9.0+PTX")),
        runner=("self-hosted", "linux"),
        smoke_runner="gpu",
        repair=RepairPolicy(
            mode="command", command=("fix", "{wheel}", "{dest_dir}"), excludes=("libfoo.so*",)
        ),
        torch_index="https://download.pytorch.org/whl/cu130",
        smoke="python smoke.py",
    )


def planned_jobs() -> list[BuildJob]:
    data = load_yaml(REPO / "matrix.yaml").data
    data["project"]["abi"] = "abi3"
    data["accelerators"]["cu126"] = {
        "repair": {"command": ["fix", "{wheel}", "{dest_dir}"]},
        "exclude_libs": ["libfoo.so*"],
    }
    data["accelerators"]["rocm7.2"] = {"repair": "skip"}
    mf = parse_matrix(data, SourceMap(path=REPO / "matrix.yaml", lines={(): 1}), knowledge=KB)
    return list(plan(mf, KB, host_python="3.12", selection=Selection(profile="release")).jobs)


def test_fingerprinted_configuration_is_unchanged() -> None:
    # the value buildtools computed before the job held typed values: published wheels
    # carry fingerprints of this layout, so it must not move
    assert job_fingerprint({"job": job_config(pinned_job())}) == (
        "sha256:6c91327ba67c193e1e5534aa7509296ea3dca1e2da0f949ee01b35417bd2edbe"
    )
    config = job_config(pinned_job())
    assert config["accelerator"] == "cu130" and config["repair"] == "command"
    assert config["repair_excludes"] == ["libfoo.so*"]
    assert ["MAX_JOBS", "4"] not in config["env"]
    assert not {"runner", "smoke_runner", "smoke", "compiler_cache"} & set(config)


def test_job_json_round_trips() -> None:
    jobs = [pinned_job(), *planned_jobs()]
    assert {j.repair.mode for j in jobs} == {"auto", "skip", "command"}
    for job in jobs:
        assert BuildJob.from_json(json.loads(json.dumps(job.to_json()))) == job


def test_plan_json_is_the_flat_view() -> None:
    data = pinned_job().to_plan_json()
    assert data["cells"] == ["torch2.11.0-cu130-cp310", "torch2.11.0-cu130-cp312"]
    assert data["accelerator"] == "cu130" and data["python"] == "3.10"
    assert data["toolkit"] == ["cuda-toolkit[nvcc]==13.0.*"] and data["arch_list"] == "8.0;9.0+PTX"
    assert data["runner"] == ["self-hosted", "linux"]
    assert data["compiler_cache"] == "ccache"
    assert data["ccache_key"] == "torch2.11.0-cu130-cp310-abi3"
    sccache = replace(pinned_job(), compiler_cache="sccache").to_plan_json()
    assert sccache["ccache_key"] is None


def test_job_json_of_an_older_writer_names_its_compiler_cache() -> None:
    data = pinned_job().to_json()
    del data["compiler_cache"]
    assert BuildJob.from_json({**data, "ccache": True}).compiler_cache == "ccache"
    assert BuildJob.from_json({**data, "ccache": False}).compiler_cache is None
    assert BuildJob.from_json(data).compiler_cache == "ccache"
    assert BuildJob.from_json({**data, "compiler_cache": None}).compiler_cache is None


def _broken(**changes: Any) -> dict[str, Any]:
    data = pinned_job().to_json()
    for key, value in changes.items():
        if value is None:
            del data[key]
        else:
            data[key] = value
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "job: expected an object, got a list"),
        (_broken(id=None), "job.id: missing"),
        (_broken(accelerator="cuda13"), "job.accelerator: 'cuda13' is not an accelerator"),
        (_broken(abi="limited"), "job.abi: 'limited' is not one of 'per-python', 'abi3', 'stable'"),
        (
            _broken(cells=[{"torch": "2.11.0", "accelerator": "cu130", "python": 312}]),
            "job.cells[0].python: expected a string, got a number",
        ),
        (_broken(toolkit={"kind": "cuda"}), "job.toolkit.version: missing"),
        (_broken(env=[["A"]]), "job.env[0]: expected a [name, value] pair of strings"),
        (_broken(runner=None), "job.runner: missing"),
        (_broken(smoke_runner=7), "job.smoke_runner: expected a string or a list of strings"),
        (_broken(repair="auto"), "job.repair_command: a repair command is given exactly when"),
        (
            _broken(compiler_cache="distcc"),
            "job.compiler_cache: 'distcc' is not one of 'ccache', 'sccache'",
        ),
    ],
)
def test_bad_job_json_names_the_key(data: Any, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        BuildJob.from_json(data)


def test_job_holds_values_not_names() -> None:
    with pytest.raises(TypeError, match="accelerator must be an Accelerator"):
        replace(pinned_job(), accelerator="cu130")
    with pytest.raises(TypeError, match="repair must be a RepairPolicy"):
        replace(pinned_job(), repair="auto")


def test_repair_policy() -> None:
    assert RepairPolicy().policy == "auto"
    assert RepairPolicy(mode="skip").policy == "skip"
    assert RepairPolicy(mode="command", command=("fix", "{wheel}")).policy == ("fix", "{wheel}")
    with pytest.raises(ValueError, match="exactly when the mode is 'command'"):
        RepairPolicy(mode="command")
    with pytest.raises(ValueError, match="exactly when the mode is 'command'"):
        RepairPolicy(mode="auto", command=("fix",))


# ------------------------------------------------------------------------ build records


def test_build_record_for_job_is_the_written_schema() -> None:
    record = BuildRecord.for_job(
        pinned_job(),
        torch="2.11.0+cu130",
        cxx11_abi=True,
        python="3.10.14",
        device_runtime="13.0",
        fingerprint="sha256:f",
        source_fingerprint="sha256:s",
    )
    data = record.to_json()
    assert sorted(data) == sorted(
        [
            *("schema", "buildtools", "torch", "accelerator", "cxx11_abi", "cuda", "hip"),
            *("arch_list", "python", "abi", "torch_requirement", "fingerprint", "cells"),
            *("source_fingerprint", "job", "torch_versions", "platform", "promised_platform_tag"),
        ]
    )
    assert (data["accelerator"], data["cuda"], data["hip"]) == ("cu130", "13.0", None)
    assert data["cells"] == ["torch2.11.0-cu130-cp310", "torch2.11.0-cu130-cp312"]
    assert BuildRecord.from_json(json.loads(json.dumps(data))) == record


def test_a_record_without_a_job_keeps_its_keys() -> None:
    data = BuildRecord(
        buildtools="0.1.0", torch="2.13.0+cpu", accelerator=Accelerator.parse("cpu"), cxx11_abi=True
    ).to_json()
    assert "job" not in data and data["cuda"] is None
    assert BuildRecord.from_json(data).to_json() == data


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{", "buildtools.json is not valid JSON"),
        (b"[]", "buildtools.json is not a JSON object"),
        (b'{"schema": 1, "torch": "2.13.0", "cxx11_abi": true}', "accelerator: missing"),
        (
            b'{"schema": 1, "torch": "2.13.0", "accelerator": "gpu", "cxx11_abi": true}',
            "accelerator: 'gpu' is not an accelerator",
        ),
        (
            b'{"schema": 2, "torch": 2, "accelerator": "cpu", "cxx11_abi": true}',
            "buildtools.json: torch: expected str, got int; schema: 2 is not supported",
        ),
        (
            b'{"schema": 1, "torch": "2.13", "accelerator": "cpu", "cxx11_abi": true, '
            b'"cells": [1]}',
            "cells: expected a list of strings",
        ),
    ],
)
def test_bad_build_record_is_refused_with_its_problems(raw: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_build_record(raw)


def test_build_record_error_lists_every_problem() -> None:
    with pytest.raises(BuildRecordError) as err:
        BuildRecord.from_json({"schema": 1, "cxx11_abi": "yes"})
    assert err.value.problems == (
        "torch: missing",
        "accelerator: missing",
        "cxx11_abi: expected bool, got str",
    )
