"""Torch ranges in matrix.yaml: resolved against the knowledge base and what the index serves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fixtures.fakehttp import FakeHttp

from buildtools.errors import ConfigError, PlanError
from buildtools.knowledge import load_knowledge
from buildtools.matrix.config import MatrixFile, parse_matrix
from buildtools.matrix.yamlsource import SourceMap
from buildtools.planner import Selection, ServedTorch, plan
from buildtools.planner.ranges import resolve_range
from buildtools.planning import PlanRequest, load_plan

KB = load_knowledge()
SERVED = ServedTorch(
    versions=frozenset({"2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1", "2.16.0"}),
    source="the test's index",
)


def matrix(torch: list[str], **extra: Any) -> MatrixFile:
    data = {
        "project": {"path": "."},
        "axes": {"torch": torch, "accelerator": ["cpu"], "python": ["3.11"]},
        **extra,
    }
    return parse_matrix(data, SourceMap(path=Path("matrix.yaml"), lines={(): 1}), knowledge=KB)


def test_a_range_is_the_newest_served_patch_of_every_known_minor() -> None:
    r = resolve_range(">=2.12", KB, SERVED)
    assert r.versions == ("2.12.1", "2.13.0", "2.14.1")
    why = dict(r.left_out)
    assert why["2.12.0"] == "not the newest 2.12 patch"
    assert why["2.15.0"] == "not served by the package index"
    assert why["2.16.0"].startswith("served by the index but not in the knowledge base")
    assert r.note == "releases served by the test's index"


def test_offline_a_range_resolves_against_the_knowledge_base_alone_and_says_so() -> None:
    r = resolve_range(">=2.14,<2.16", KB, None, offline_reason="BUILDTOOLS_OFFLINE=1")
    assert r.versions == ("2.14.1", "2.15.0")
    assert "not asked (BUILDTOOLS_OFFLINE=1)" in r.note and "knowledge base alone" in r.note


def test_plan_expands_a_range_into_cells_and_keeps_the_resolution() -> None:
    result = plan(matrix([">=2.13", "2.11.0"]), KB, host_python="3.11", served=SERVED)
    assert [c.id for c in result.cells] == [
        "torch2.11.0-cpu-cp311",
        "torch2.13.0-cpu-cp311",
        "torch2.14.1-cpu-cp311",
    ]
    (resolution,) = result.ranges
    assert resolution.spec == ">=2.13" and resolution.versions == ("2.13.0", "2.14.1")


def test_a_range_the_index_serves_nothing_of_is_a_plan_error_with_the_reasons() -> None:
    with pytest.raises(PlanError, match=r"'>=2.15' resolves to no release .*2\.15\.0: not served"):
        plan(matrix([">=2.15"]), KB, host_python="3.11", served=SERVED)


def test_the_torch_option_takes_a_range_too() -> None:
    result = plan(
        matrix(["2.11.0"]),
        KB,
        host_python="3.11",
        served=SERVED,
        selection=Selection(torch_axis=["~=2.12.0"]),
    )
    assert [c.torch for c in result.cells] == ["2.12.1"]


@pytest.mark.parametrize(
    ("torch", "message"),
    [
        ("=>2.10", "is not a version range"),
        (">=3.0", "matches no torch release the knowledge base knows"),
    ],
)
def test_a_bad_range_is_one_line_naming_the_key(torch: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"axes\.torch\[0\]: .*" + message):
        matrix([torch])


def test_a_range_in_a_rule_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"a torch range belongs in axes\.torch"):
        matrix(["2.11.0"], exclude=[{"torch": ">=2.11"}])


def test_load_plan_asks_the_index_once_and_caches_the_answer(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(
        'project: {path: .}\naxes: {torch: [">=2.14"], accelerator: [cpu], python: ["3.11"]}\n'
    )
    env = {"BUILDTOOLS_CACHE_DIR": str(tmp_path / "cache")}
    http = FakeHttp.from_recording()  # serves 1.13.1, 2.14.1 and 2.15.0
    result, _ = load_plan(PlanRequest(matrix=path), env=env, http=http)
    assert [c.torch for c in result.cells] == ["2.14.1", "2.15.0"]
    assert dict(result.ranges[0].left_out)["2.14.0"] == "not served by the package index"
    assert "https://pypi.org/simple/torch/ (asked " in result.ranges[0].note
    assert not any(r.url.endswith(".whl") for r in http.requests)  # file names suffice
    http.down = True  # the cached page answers now
    again, _ = load_plan(PlanRequest(matrix=path), env=env, http=http)
    assert [c.torch for c in again.cells] == ["2.14.1", "2.15.0"]
    offline, _ = load_plan(
        PlanRequest(matrix=path), env={**env, "BUILDTOOLS_OFFLINE": "1"}, http=http
    )
    assert [c.torch for c in offline.cells] == ["2.14.1", "2.15.0"]
    assert "knowledge base alone" in offline.ranges[0].note
    cold, _ = load_plan(
        PlanRequest(matrix=path), env={"BUILDTOOLS_CACHE_DIR": str(tmp_path / "c2")}, http=http
    )
    assert "unreachable" in cold.ranges[0].note
