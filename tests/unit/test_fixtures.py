"""The shared test doubles (tests/fixtures/factories.py, fakes.py) behave as what they stand for:
a made job is the job the planner would make, and the fake ProcessRunner answers and records as
its docstring says. Every unit test leans on them, so they are tested too."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from fixtures.factories import make_cell, make_job, planned_job, replace_job
from fixtures.fakes import ANY, Call, FakeRunner

from buildtools.model import Accelerator, RepairPolicy

# what make_job derives without the knowledge base or a matrix (image, arch list, toolkit
# pins and torch index come from those)
DERIVED = (
    "id",
    "cells",
    "abi",
    "torch",
    "torch_versions",
    "accelerator",
    "pythons",
    "platform",
    "torch_requirement",
    "requires_dist",
    "platform_tag",
    "local_version",
    "cxx11_abi",
    "runner",
    "smoke_runner",
    "repair",
    "torch_source",
    "compiler_cache",
)


@pytest.mark.parametrize(
    ("cell", "values"),
    [
        ("torch2.13.0-cpu-cp311", {"python": "3.11"}),
        ("torch2.11.0-cu130-cp312", {"torch": "2.11.0", "accelerator": "cu130"}),
        ("torch2.13.0-rocm7.2-cp312", {"accelerator": "rocm7.2"}),
    ],
    ids=["cpu", "cuda", "rocm"],
)
def test_a_made_job_is_what_the_planner_makes(cell: str, values: dict[str, str]) -> None:
    made, planned = make_job(**values), planned_job(cell)
    assert {f: getattr(made, f) for f in DERIVED} == {f: getattr(planned, f) for f in DERIVED}
    assert dict(made.env).keys() == dict(planned.env).keys()
    assert (made.toolkit is None) == (planned.toolkit is None)
    if made.toolkit is not None and planned.toolkit is not None:
        assert (made.toolkit.kind, made.toolkit.version) == (
            planned.toolkit.kind,
            planned.toolkit.version,
        )


def test_job_values_are_spelled_as_the_model_declares() -> None:
    job = make_job(accelerator="cu128", repair_excludes=["libfoo.so"])
    assert job.accelerator == Accelerator.parse("cu128")
    assert job.repair == RepairPolicy(mode="auto", excludes=("libfoo.so",))
    assert make_job(accelerator=Accelerator.parse("cu128")) == make_job(accelerator="cu128")
    again = replace_job(job, accelerator="cpu", repair="command", repair_command=["fix", "{wheel}"])
    assert again.accelerator == Accelerator.parse("cpu")
    assert again.repair == RepairPolicy(
        mode="command", command=("fix", "{wheel}"), excludes=("libfoo.so",)
    )
    assert again.toolkit == job.toolkit  # replace changes what it is given only
    cell = make_cell(accelerator=Accelerator.parse("rocm7.2"))
    declared = {f.name: str(f.type) for f in dataclasses.fields(cell)}["accelerator"]
    assert cell.accelerator == ("rocm7.2" if declared == "str" else Accelerator.parse("rocm7.2"))


def test_cells_decide_what_was_not_given() -> None:
    cells = tuple(make_cell(accelerator="cu130", python=p) for p in ("3.10", "3.12"))
    job = make_job(cells=cells, abi="abi3")
    assert (job.id, job.cells, job.pythons) == (cells[0].id, cells, ("3.10", "3.12"))
    assert job.toolkit is not None and job.toolkit.version == "13.0"


def test_fake_runner_records_each_call_exactly(tmp_path: Path) -> None:
    runner = FakeRunner()
    result = runner.run(["python", Path("/a b")], cwd=tmp_path, env={"X": "1"}, timeout=5)
    assert result.ok and result.argv == ("python", "/a b") and result.output == ""
    assert runner.calls == [Call(argv=("python", "/a b"), cwd=tmp_path, env={"X": "1"}, timeout=5)]
    assert runner.argvs == [["python", "/a b"]]


def test_fake_runner_scripts_by_prefix_and_the_last_rule_wins() -> None:
    seen: list[Call] = []
    runner = (
        FakeRunner()
        .on(ANY, "-m", "pip", output="pip says hi")
        .on(ANY, "-m", "pip", "download", returncode=1, effect=seen.append)
        .on("docker", returncode=2, times=1)
    )
    assert runner.run(["/py", "-m", "pip", "install", "x"]).output == "pip says hi"
    failed = runner.run(["/py", "-m", "pip", "download", "x"])
    assert (failed.returncode, failed.output) == (1, "")
    assert [c.argv for c in seen] == [("/py", "-m", "pip", "download", "x")]
    assert runner.run(["docker", "info"]).returncode == 2
    assert runner.run(["docker", "info"]).returncode == 0  # `times` used up
    assert runner.run(["/py", "-m"]).ok  # shorter than the prefix: no match
    assert [c.argv[0] for c in runner.matching("docker")] == ["docker", "docker"]
