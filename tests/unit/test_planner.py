"""The planner: expansion, grouping per ABI mode, derivations, determinism."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from buildtools.cli import main as cli
from buildtools.errors import PlanError
from buildtools.knowledge import Knowledge, load_knowledge
from buildtools.matrix.config import MatrixFile, parse_matrix
from buildtools.matrix.yamlsource import SourceMap
from buildtools.model import Cell
from buildtools.planner import Selection, plan
from buildtools.planning import host_python

REPO = Path(__file__).resolve().parents[2]
KB = load_knowledge()


def matrix(data: dict[str, Any]) -> MatrixFile:
    return parse_matrix(data, SourceMap(path=Path("matrix.yaml"), lines={(): 1}), knowledge=KB)


def base(**project: Any) -> dict[str, Any]:
    return {
        "project": {"path": ".", **project},
        "axes": {
            "torch": ["2.11.0", "2.13.0"],
            "accelerator": ["cpu", "cu130"],
            "python": ["3.11", "3.12"],
        },
    }


def test_cell_id_is_readable() -> None:
    assert Cell(torch="2.11.0", accelerator="cu130", python="3.12").id == "torch2.11.0-cu130-cp312"
    aarch = Cell(torch="2.11.0", accelerator="cu130", python="3.12", platform="linux_aarch64")
    assert aarch.id == "torch2.11.0-cu130-cp312-aarch64"


def test_per_python_job_derivations() -> None:
    result = plan(
        matrix(base()),
        KB,
        host_python="3.11",
        selection=Selection(only=["torch2.11.0-cu130-cp312"]),
    )
    (job,) = result.jobs
    assert job.id == "torch2.11.0-cu130-cp312"
    assert job.torch_requirement == "torch==2.11.0"
    assert job.requires_dist == "torch==2.11.*"
    assert job.local_version == "pt211cu130"
    assert job.platform_tag == "manylinux_2_28_x86_64"
    assert job.toolkit is not None
    assert job.toolkit.arch_list == "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
    assert any(p.startswith("cuda-toolkit[") for p in job.toolkit.pip_packages)
    env = job.env_dict
    assert env["FORCE_CUDA"] == "1"
    assert env["TORCH_CUDA_ARCH_LIST"] == "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
    assert "MAX_JOBS" not in env  # host-dependent: the executor decides
    assert job.image == "pytorch/manylinux2_28-builder:cuda13.0"
    assert job.cxx11_abi is True


def test_cpu_job_has_no_device_env() -> None:
    result = plan(
        matrix(base()), KB, host_python="3.11", selection=Selection(only=["torch2.13.0-cpu-cp311"])
    )
    (job,) = result.jobs
    assert job.toolkit is None
    assert "FORCE_CUDA" not in job.env_dict
    assert job.local_version == "pt213cpu"


def test_abi3_groups_pythons() -> None:
    result = plan(matrix(base(abi="abi3")), KB, host_python="3.11")
    assert len(result.cells) == 8
    assert len(result.jobs) == 4
    assert result.builds_saved == 4
    job = result.job_for("torch2.11.0-cu130-cp312")
    assert job.id == "torch2.11.0-cu130-cp311-abi3"
    assert job.pythons == ("3.11", "3.12")
    assert job.env_dict["BUILDTOOLS_PY_LIMITED_API"] == "cp311"


def test_stable_groups_torch_range() -> None:
    result = plan(matrix(base(abi="stable")), KB, host_python="3.11")
    assert len(result.jobs) == 2
    job = result.job_for("torch2.13.0-cu130-cp312")
    assert job.id == "torch2.11.0-2.13.0-cu130-stable"
    assert job.torch == "2.11.0"
    assert job.torch_versions == ("2.11.0", "2.13.0")
    assert job.requires_dist == "torch>=2.11,<2.14"  # the tested range, no more
    assert job.env_dict["BUILDTOOLS_TORCH_TARGET_VERSION"] == "0x020b000000000000"


def test_stable_removes_old_torch_with_reason() -> None:
    data = base(abi="stable")
    data["axes"]["torch"] = ["2.9.0", "2.11.0"]
    result = plan(matrix(data), KB, host_python="3.11")
    assert {r.cell.torch for r in result.removed} == {"2.9.0"}
    assert "abi: stable needs torch >= 2.10" in result.removed[0].reason


def test_impossible_cells_removed_with_reason_or_strict_error() -> None:
    data = base()
    data["axes"]["torch"] = ["2.4.0"]
    data["axes"]["accelerator"] = ["cpu", "cu128"]
    data["axes"]["python"] = ["3.12", "3.13"]
    mf = matrix(data)
    result = plan(mf, KB, host_python="3.11")
    removed = {r.cell.id: r.reason for r in result.removed}
    assert set(removed) == {
        "torch2.4.0-cpu-cp313",
        "torch2.4.0-cu128-cp312",
        "torch2.4.0-cu128-cp313",
    }
    assert "3.13" in removed["torch2.4.0-cpu-cp313"]
    assert "12.8" in removed["torch2.4.0-cu128-cp312"]
    assert [c.id for c in result.cells] == ["torch2.4.0-cpu-cp312"]
    with pytest.raises(PlanError, match="--strict: 3 requested cell"):
        plan(mf, KB, host_python="3.11", selection=Selection(strict=True))


def test_include_adds_cells_outside_axes_and_exclude_removes() -> None:
    data = base()
    data["exclude"] = [{"accelerator": "cu*", "python": "3.11"}]
    data["include"] = [{"torch": "2.12.0", "accelerator": "cpu", "python": "3.13"}]
    ids = [c.id for c in plan(matrix(data), KB, host_python="3.11").cells]
    assert "torch2.11.0-cu130-cp311" not in ids
    assert "torch2.12.0-cpu-cp313" in ids
    assert len(ids) == 7


def test_profile_with_host_python() -> None:
    data = base()
    data["profiles"] = {
        "local": {"select": [{"torch": "2.13.0", "accelerator": "cpu", "python": "host"}]}
    }
    data["default_profile"] = "local"
    result = plan(matrix(data), KB, host_python="3.12")
    assert [c.id for c in result.cells] == ["torch2.13.0-cpu-cp312"]
    everything = plan(matrix({**data, "default_profile": None}), KB, host_python="3.12")
    assert len(everything.cells) == 8


def test_accelerator_overrides_merge_family_glob_name() -> None:
    data = base()
    data["axes"]["accelerator"] = ["cu126", "cu130"]
    data["accelerators"] = {
        "cuda": {
            "torch_index": "https://download.pytorch.org/whl/{accelerator}",
            "build_env": {"A": "1"},
        },
        "cu1*": {"arch_list": "8.0;9.0"},
        "cu130": {"arch_list": "9.0;10.0", "repair": "skip"},
    }
    result = plan(
        matrix(data), KB, host_python="3.11", selection=Selection(only=["torch2.13.0-*-cp312"])
    )
    jobs = {j.accelerator.name: j for j in result.jobs}
    assert jobs["cu126"].toolkit is not None and jobs["cu126"].toolkit.arch_list == "8.0;9.0"
    assert jobs["cu130"].toolkit is not None and jobs["cu130"].toolkit.arch_list == "9.0;10.0"
    assert jobs["cu130"].repair.mode == "skip"
    assert jobs["cu126"].repair.mode == "auto"
    assert jobs["cu126"].torch_index == "https://download.pytorch.org/whl/cu126"
    assert jobs["cu126"].env_dict["A"] == "1"


def test_reference_matrix_plans(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", "--matrix", str(REPO / "matrix.yaml"), "--format", "ids"]) == 0
    ids = capsys.readouterr().out.split()
    host = f"{host_python().replace('.', '')}"
    assert ids == [f"torch2.13.0-cpu-cp{host}"]
    assert (
        cli.main(
            [
                "plan",
                "--matrix",
                str(REPO / "matrix.yaml"),
                "--profile",
                "release",
                "--format",
                "json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    jobs = doc["include"]
    assert len(jobs) > 10
    for job in jobs:
        assert {"id", "cells", "torch", "accelerator", "python", "image", "runner"} <= set(job)
    assert cli.main(["plan", "--matrix", str(REPO / "matrix.yaml"), "--profile", "release"]) == 0
    table = capsys.readouterr().out
    assert "build(s) saved by the ABI mode" in table


TORCHES = [v for v in KB.torch_versions() if v.endswith(".0")]
ACCELS = ["cpu", "cu118", "cu126", "cu128", "cu130", "rocm6.4", "rocm7.1"]
PYTHONS = ["3.9", "3.10", "3.11", "3.12", "3.13", "3.14"]


@settings(max_examples=60, deadline=None)
@given(
    torch=st.lists(st.sampled_from(TORCHES), min_size=1, max_size=4, unique=True),
    accel=st.lists(st.sampled_from(ACCELS), min_size=1, max_size=3, unique=True),
    python=st.lists(st.sampled_from(PYTHONS), min_size=1, max_size=3, unique=True),
    abi=st.sampled_from(["per-python", "abi3", "stable"]),
)
def test_every_valid_cell_in_exactly_one_job(
    torch: list[str], accel: list[str], python: list[str], abi: str
) -> None:
    mf = matrix(
        {
            "project": {"path": ".", "abi": abi},
            "axes": {"torch": torch, "accelerator": accel, "python": python},
        }
    )
    try:
        first = plan(mf, KB, host_python="3.11")
    except PlanError:
        # Only acceptable when nothing requested can exist.
        for t in torch:
            for a in accel:
                for p in python:
                    cell = Cell(torch=t, accelerator=a, python=p)
                    assert KB.cell_unavailable_reason(cell) or KB.abi_unavailable_reason(
                        abi, cell.torch
                    )
        return
    second = plan(mf, KB, host_python="3.11")
    assert first == second  # deterministic
    covered = Counter(cid for job in first.jobs for cid in job.cell_ids)
    assert set(covered) == {c.id for c in first.cells}
    assert all(n == 1 for n in covered.values())
    requested = len(torch) * len(accel) * len(python)
    assert len(first.cells) + len(first.removed) == requested
    for cell in first.cells:
        assert KB.cell_unavailable_reason(cell) is None
    if abi == "per-python":
        assert len(first.jobs) == len(first.cells)


def test_only_outside_the_profile_names_the_profiles_that_contain_it() -> None:
    data = base()
    data["exclude"] = [{"accelerator": "cu130", "python": "3.11"}]
    data["profiles"] = {
        "local": {"select": [{"torch": "2.13.0", "accelerator": "cpu", "python": "host"}]},
        "pr": {"select": [{"accelerator": "cu130", "python": "3.12"}]},
        "release": {},
    }
    data["default_profile"] = "local"
    with pytest.raises(PlanError) as err:
        plan(
            matrix(data), KB, host_python="3.12", selection=Selection(only=["torch2.11.0-cu130-*"])
        )
    assert str(err.value).startswith(
        "--only torch2.11.0-cu130-*: matches no cell of profile 'local'; it is in profiles "
        "'release', 'pr': add --profile release; cells: torch2.13.0-cpu-cp312"
    )
    # the local plan reports no exclusions made among cells it never selects
    assert plan(matrix(data), KB, host_python="3.12").excluded == 0
    assert (
        plan(matrix(data), KB, host_python="3.12", selection=Selection(profile="release")).excluded
        == 2
    )


def test_abi_minimums_come_from_the_release_rows() -> None:
    """abi3/stable floors are read from torch.yaml (py_limited_api, stable_abi), not code."""
    assert KB.abi_unavailable_reason("abi3", "2.5.1") == (
        "abi: abi3 needs torch >= 2.6 (py_limited_api support in cpp_extension); "
        "torch 2.5.1 is older"
    )
    assert KB.abi_unavailable_reason("abi3", "2.6.0") is None
    assert KB.abi_unavailable_reason("stable", "2.9.1") is not None
    assert KB.abi_unavailable_reason("stable", "2.10.0") is None
    assert KB.abi_unavailable_reason("per-python", "2.0.0") is None
    # a torch newer than the data (torch: current) has what the first release with it had
    assert KB.abi_unavailable_reason("stable", "2.99.0") is None
    rows = [
        r.model_copy(update={"stable_abi": r.minor in ("2.12", "2.13")}) for r in KB.torch.values()
    ]
    shifted = Knowledge(
        torch=rows,
        cuda=KB.cuda_releases.values(),
        rocm=KB.rocm_releases.values(),
        images=KB.images,
        never_bundle=KB.never_bundle_rules,
    )
    assert "torch >= 2.12" in (shifted.abi_unavailable_reason("stable", "2.11.0") or "")
    assert "lacks" in (shifted.abi_unavailable_reason("stable", "2.14.0") or "")


def test_a_free_threaded_cell_has_its_own_tag_and_is_never_folded_into_abi3() -> None:
    data = base(abi="abi3")
    data["axes"] = {
        "torch": ["2.14.1"],
        "accelerator": ["cpu"],
        "python": ["3.13", "3.14", "3.14t"],
    }
    result = plan(matrix(data), KB, host_python="3.13")
    by_id = {j.id: j for j in result.jobs}
    assert set(by_id) == {"torch2.14.1-cpu-cp313-abi3", "torch2.14.1-cpu-cp314t"}
    ft = by_id["torch2.14.1-cpu-cp314t"]
    assert ft.abi == "per-python" and ft.pythons == ("3.14t",)
    assert ft.cell_ids == ("torch2.14.1-cpu-cp314t",)
    assert "BUILDTOOLS_PY_LIMITED_API" not in ft.env_dict
    assert ft.requires_dist == "torch==2.14.*"
