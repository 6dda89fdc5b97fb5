"""`buildtools plan --missing SITE`: only the promised cells the published site lacks."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from fixtures.factories import make_cell, make_job
from packaging.version import Version

from buildtools.cli.main import main
from buildtools.index.manifest import IndexedWheel, Manifest
from buildtools.index.published import is_window, published_cells, window_cells
from buildtools.index.smokelog import SmokeRun

REPO = Path(__file__).resolve().parents[2]


def wheel(
    filename: str,
    *,
    torch: str = "2.13.0",
    accelerator: str = "cpu",
    specifier: str | None = "==2.13.*",
    name: str = "bt-scatter",
) -> IndexedWheel:
    version = filename.split("-")[1]
    return IndexedWheel(
        filename=filename,
        sha256="a" * 64,
        size=1,
        name=name,
        version=version,
        requires_python=None,
        metadata_sha256="b" * 64,
        torch=torch,
        torch_versions=(torch,),
        torch_specifier=specifier,
        accelerator=accelerator,
    )


def site(tmp_path: Path, *wheels: IndexedWheel) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    (root / "index.json").write_text(Manifest(wheels=wheels).to_json())
    return root


MATRIX = f"""\
project: {{path: {REPO / "examples" / "scatter"}, name: bt-scatter}}
axes:
  torch: ["2.13.0", "2.14.1"]
  accelerator: [cpu, cu130]
  python: ["3.11"]
"""
PUBLISHED = "bt_scatter-0.1.0+pt213cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out), out.getvalue()


def test_missing_lists_exactly_the_cells_the_site_has_no_wheel_for(tmp_path: Path) -> None:
    (tmp_path / "matrix.yaml").write_text(MATRIX)
    root = site(tmp_path, wheel(PUBLISHED))
    m = str(tmp_path / "matrix.yaml")
    rc, out = run("plan", "--matrix", m, "--missing", str(root), "--format", "ids")
    assert rc == 0
    assert out.split() == [
        "torch2.13.0-cu130-cp311",
        "torch2.14.1-cpu-cp311",
        "torch2.14.1-cu130-cp311",
    ]
    rc, out = run("plan", "--matrix", m, "--missing", str(root))
    assert "1 cell(s) of version 0.1.0 already published there" in out
    rc, out = run("plan", "--matrix", m, "--missing", str(root), "--format", "json")
    assert [j["id"] for j in json.loads(out)["include"]] == out_ids(out)


def out_ids(out: str) -> list[str]:
    return [j["cells"][0] for j in json.loads(out)["include"]]


def test_nothing_missing_is_an_empty_actions_matrix(tmp_path: Path) -> None:
    (tmp_path / "matrix.yaml").write_text(MATRIX)
    wheels = [
        wheel(
            f"bt_scatter-0.1.0+pt{t}{a}-cp311-cp311-manylinux_2_28_x86_64.whl",
            torch=f"2.{t[1:]}.0",
            accelerator=a,
            specifier=f"==2.{t[1:]}.*",
        )
        for t in ("213", "214")
        for a in ("cpu", "cu130")
    ]
    root = site(tmp_path, *wheels)
    rc, out = run(
        "plan",
        "--matrix",
        str(tmp_path / "matrix.yaml"),
        "--missing",
        str(root),
        "--format",
        "json",
    )
    assert rc == 0 and json.loads(out) == {"include": []}


@pytest.mark.parametrize(
    ("published", "expected"),
    [
        # another version of the project, another project, another arch: not this cell
        ("bt_scatter-0.2.0+pt213cpu-cp311-cp311-manylinux_2_28_x86_64.whl", False),
        ("other-0.1.0+pt213cpu-cp311-cp311-manylinux_2_28_x86_64.whl", False),
        ("bt_scatter-0.1.0+pt213cpu-cp311-cp311-manylinux_2_28_aarch64.whl", False),
        ("bt_scatter-0.1.0+pt213cpu-cp312-cp312-manylinux_2_28_x86_64.whl", False),
        ("bt_scatter-0.1.0+pt213cpu-cp311-cp311t-manylinux_2_28_x86_64.whl", False),
        # an abi3 wheel of an older Python installs on 3.11
        ("bt_scatter-0.1.0+pt213cpu-cp39-abi3-manylinux_2_28_x86_64.whl", True),
        ("bt_scatter-0.1.0+pt213cpu-cp311-cp311-manylinux_2_28_x86_64.whl", True),
    ],
)
def test_what_counts_as_published(published: str, expected: bool) -> None:
    job = make_job(torch="2.13.0", python="3.11")
    name = "other" if published.startswith("other") else "bt-scatter"
    found = published_cells(
        [job], project="bt-scatter", version=Version("0.1.0"), wheels=[wheel(published, name=name)]
    )
    assert (job.cells[0].id in found) is expected


def test_a_patch_is_served_by_the_minor_s_wheel_when_its_pin_admits_it() -> None:
    job = make_job(torch="2.14.1", python="3.11")
    filename = "bt_scatter-0.1.0+pt214cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    pinned = wheel(filename, torch="2.14.0", specifier="==2.14.*")
    exact = wheel(filename, torch="2.14.0", specifier="==2.14.0")
    for w, expected in ((pinned, True), (exact, False)):
        found = published_cells([job], project="bt-scatter", version=Version("0.1.0"), wheels=[w])
        assert (job.cells[0].id in found) is expected


def test_a_url_site_is_read_through_its_index_json(tmp_path: Path) -> None:
    from fixtures.fakehttp import FakeHttp

    from buildtools.cli.missing import read_site

    http = FakeHttp()
    http.add(
        "https://example.test/whl/index.json",
        Manifest(wheels=(wheel(PUBLISHED),)).to_json().encode(),
    )
    manifest = read_site("https://example.test/whl/", http=http)
    assert [w.filename for w in manifest.wheels] == [PUBLISHED]
    from buildtools.errors import NetworkError

    with pytest.raises(NetworkError, match="has one at its root"):
        read_site("https://example.test/nothing", http=http)


def test_a_release_inside_a_window_wheel_s_range_is_smoke_only_not_published() -> None:
    """A stable wheel's record names the releases its smoke proved; a release its range admits
    beyond those is promised, not proven: smoke-only. Outside the range: missing."""
    cells = [
        make_cell(torch=t, accelerator="cpu", python="3.11") for t in ("2.13.0", "2.14.1", "2.15.0")
    ]
    jobs = [make_job(cells=cells, abi="stable")]  # one job, labelled by its floor (pt213cpu)
    window = wheel(
        "bt_scatter-0.1.0+pt213cpu-cp311-abi3-manylinux_2_28_x86_64.whl",
        torch="2.13.0",
        specifier="<2.15,>=2.13",
    )
    kwargs = {"project": "bt-scatter", "version": Version("0.1.0"), "wheels": [window]}
    published = published_cells(jobs, **kwargs)  # type: ignore[arg-type]
    inside = window_cells(jobs, **kwargs)  # type: ignore[arg-type]
    assert list(published) == ["torch2.13.0-cpu-cp311"]
    assert inside == {"torch2.14.1-cpu-cp311": window.filename}
    assert is_window(window) and not is_window(wheel(PUBLISHED))


def test_plan_missing_says_which_cells_a_smoke_only_run_proves(tmp_path: Path) -> None:
    (tmp_path / "matrix.yaml").write_text(
        f"project: {{path: {REPO / 'examples' / 'scatter'}, name: bt-scatter, abi: stable}}\n"
        'axes: {torch: ["2.13.0", "2.14.1", "2.15.0"], accelerator: [cpu], python: ["3.11"]}\n'
    )
    window = wheel(
        "bt_scatter-0.1.0+pt213cpu-cp311-abi3-manylinux_2_28_x86_64.whl",
        torch="2.13.0",
        specifier="<2.15,>=2.13",
    )
    root = site(tmp_path, window)
    m = str(tmp_path / "matrix.yaml")
    rc, out = run("plan", "--matrix", m, "--missing", str(root), "--format", "ids")
    assert rc == 0 and out.split() == ["torch2.15.0-cpu-cp311"]  # rebuilt: outside the range
    rc, out = run("plan", "--matrix", m, "--missing", str(root))
    assert (
        f"smoke-only torch2.14.1-cpu-cp311: {window.filename} admits its torch; smoke it there"
        in out
    )


def test_a_passing_smoke_run_on_the_new_release_makes_it_published() -> None:
    cells = [make_cell(torch=t, accelerator="cpu", python="3.11") for t in ("2.13.0", "2.14.1")]
    jobs = [make_job(cells=cells, abi="stable")]
    window = wheel(
        "bt_scatter-0.1.0+pt213cpu-cp311-abi3-manylinux_2_28_x86_64.whl",
        torch="2.13.0",
        specifier="<2.15,>=2.13",
    )
    run = SmokeRun(
        sha256=window.sha256,
        cell="torch2.14.1-cpu-cp311",
        runner="cpu",
        gpu=None,
        driver=None,
        date="2026-12-07",
        python="3.11.7",
        torch="2.14.1+cu130",  # any build of the release, for a CPU wheel
    )
    kwargs = {"project": "bt-scatter", "version": Version("0.1.0"), "wheels": [window]}
    assert "torch2.14.1-cpu-cp311" in window_cells(jobs, **kwargs)  # type: ignore[arg-type]
    published = published_cells(jobs, runs=[run], **kwargs)  # type: ignore[arg-type]
    assert sorted(published) == ["torch2.13.0-cpu-cp311", "torch2.14.1-cpu-cp311"]
    assert window_cells(jobs, runs=[run], **kwargs) == {}  # type: ignore[arg-type]
