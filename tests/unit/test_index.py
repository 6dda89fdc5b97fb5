"""`buildtools index`: reading wheels, aliasing, pages, merge, immutability, crash safety."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from fixtures.crafted import make_wheel

from buildtools.cli.main import main
from buildtools.errors import ExitCode, ImmutableWheelError, PublishError
from buildtools.index.coverage import CoverageStatus, coverage_map
from buildtools.index.gate import SmokeGate
from buildtools.index.manifest import read_manifest
from buildtools.index.merge import merge
from buildtools.index.publish import PublishOptions, publish
from buildtools.index.settings import IndexSettings
from buildtools.index.site import render_site
from buildtools.index.smokelog import SmokeRun, passing_runs
from buildtools.index.variants import Variant, proven_variants
from buildtools.index.wheels import WheelSource, read_wheel
from buildtools.knowledge import Knowledge, load_knowledge
from buildtools.matrix.config import load_matrix
from buildtools.model import Cell
from buildtools.planner import MatrixCells

KB = load_knowledge()
REL = IndexSettings()


def record(torch: str, accelerator: str, **extra: object) -> bytes:
    body: dict[str, object] = {
        "schema": 1,
        "torch": torch,
        "accelerator": accelerator,
        "cxx11_abi": True,
        **extra,
    }
    return json.dumps(body).encode()


def wheel(
    directory: Path,
    *,
    version: str = "0.1.0+pt213cpu",
    tag: str = "cp311-cp311-manylinux_2_28_x86_64",
    torch: str = "2.13.0+cpu",
    accelerator: str = "cpu",
    torch_spec: str | None = "torch==2.13.*",
    requires_python: str | None = ">=3.9",
    payload: bytes = b"",
    build_record: bytes | None = None,
    **extra: object,
) -> Path:
    """A small wheel of `bt-scatter` with a build record, like `buildtools build` makes."""
    meta = [f"Requires-Python: {requires_python}"] if requires_python else []
    return make_wheel(
        directory,
        name="bt_scatter",
        version=version,
        tag=tag,
        files={"bt_scatter/__init__.py": b"# " + payload + b"\n"},
        requires=[torch_spec] if torch_spec else [],
        extra_metadata=meta,
        dist_info_files={
            "buildtools.json": build_record
            if build_record is not None
            else record(torch, accelerator, **extra)
        },
    )


def sources(*paths: Path, template: str | None = None) -> list[WheelSource]:
    return [read_wheel(p, wheel_url_template=template) for p in paths]


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def leftovers(site: Path) -> list[str]:
    """Directories a publish left beside the site, except the previous generation it
    keeps on purpose (`.NAME.prev`, where the next publish starts)."""
    return sorted(
        p.name
        for p in site.parent.iterdir()
        if p.name.startswith(f".{site.name}.") and p.is_dir() and p.name != f".{site.name}.prev"
    )


def links(html: str) -> list[str]:
    return re.findall(r'href="([^"]+)"', html)


# -- reading wheels -------------------------------------------------------------------------


def test_read_wheel_takes_torch_and_accelerator_from_the_build_record(tmp_path: Path) -> None:
    path = wheel(tmp_path, torch_versions=["2.13.0"])
    src = read_wheel(path)
    w = src.wheel
    assert (w.name, w.project, w.version) == ("bt_scatter", "bt-scatter", "0.1.0+pt213cpu")
    assert (w.torch, w.torch_versions, w.accelerator) == ("2.13.0", ("2.13.0",), "cpu")
    assert w.torch_specifier == "==2.13.*"
    assert w.requires_python == ">=3.9"
    assert w.size == path.stat().st_size and len(w.sha256) == 64
    assert src.metadata.startswith(b"Metadata-Version:") and b"Requires-Python" in src.metadata
    assert w.url is None


def test_wheel_url_template_fills_the_quoted_file_name(tmp_path: Path) -> None:
    path = wheel(tmp_path)
    template = "https://github.com/o/r/releases/download/v{public_version}/{filename}"
    (src,) = sources(path, template=template)
    assert src.wheel.url == (
        "https://github.com/o/r/releases/download/v0.1.0/"
        "bt_scatter-0.1.0%2Bpt213cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    )


@pytest.mark.parametrize(
    ("build_record", "message"),
    [
        (b"{not json", "buildtools.json is not valid JSON"),
        (json.dumps({"schema": 1, "torch": "2.13.0"}).encode(), "accelerator: missing"),
        (record("2.13.0", "gpu"), "'gpu' is not an accelerator"),
    ],
)
def test_bad_build_record_is_named(tmp_path: Path, build_record: bytes, message: str) -> None:
    path = wheel(tmp_path, build_record=build_record)
    with pytest.raises(PublishError, match=re.escape(message)) as err:
        read_wheel(path)
    assert path.name in str(err.value)


def test_wheel_without_build_record_is_refused(tmp_path: Path) -> None:
    path = make_wheel(tmp_path, name="plain", version="1.0")
    with pytest.raises(PublishError, match="needs the build record"):
        read_wheel(path)


def test_metadata_inconsistent_with_file_name_is_refused(tmp_path: Path) -> None:
    path = wheel(tmp_path)
    renamed = path.with_name(path.name.replace("0.1.0+pt213cpu", "0.2.0+pt213cpu"))
    path.rename(renamed)
    with pytest.raises(PublishError, match="pip refuses such a wheel"):
        read_wheel(renamed)


# -- which pages list a wheel ----------------------------------------------------------------


def kb_with_patches() -> Knowledge:
    rel = KB.torch_release("2.12")
    assert rel.patches == ("2.12.0", "2.12.1"), "the test relies on 2.12 having two patches"
    return KB


def keys(wheel_path: Path, settings: IndexSettings = REL) -> list[str]:
    """The find-links pages the site lists the wheel on, in the site's order."""
    w = read_wheel(wheel_path).wheel
    files = render_site([w], settings, kb_with_patches())
    pages = [m[1] for name in files if (m := re.fullmatch(r"torch-([^/]+)\.html", name))]
    assert all(w.filename in files[f"torch-{key}.html"].decode() for key in pages)
    return pages


def test_wheel_for_a_patch_is_listed_on_every_patch_of_its_minor(tmp_path: Path) -> None:
    path = wheel(
        tmp_path,
        version="0.1.0+pt212cu130",
        torch="2.12.0+cu130",
        accelerator="cu130",
        torch_spec="torch==2.12.*",
    )
    assert keys(path) == ["2.12.0+cu130", "2.12.1+cu130"]
    assert keys(path, IndexSettings(alias_patches=False)) == ["2.12.0+cu130"]


def test_patch_alias_respects_the_wheels_torch_pin(tmp_path: Path) -> None:
    path = wheel(tmp_path, version="0.1.0+pt212cpu", torch="2.12.0+cpu", torch_spec="torch==2.12.0")
    assert keys(path) == ["2.12.0+cpu"]


def test_stable_abi_wheel_is_listed_for_each_torch_it_covers(tmp_path: Path) -> None:
    path = wheel(
        tmp_path,
        version="0.1.0+cu130",
        torch="2.11.0+cu130",
        accelerator="cu130",
        torch_spec="torch>=2.11",
        torch_versions=["2.12.0", "2.11.0"],
        abi="stable",
    )
    # 2.12.1 is admitted by its range but no smoke ran there: promised, not proven, not listed
    assert keys(path) == ["2.11.0+cu130", "2.12.0+cu130"]


def test_a_window_wheel_joins_a_new_torch_page_once_a_smoke_run_passed_there(
    tmp_path: Path,
) -> None:
    """Release day for a stable-ABI wheel: 2.12.1 came out after it, inside its range; the
    backfill's smoke-only run passed there, so the site lists the same file on 2.12.1's page.
    A run on a torch outside the range, or of another wheel, adds no page."""
    path = wheel(
        tmp_path,
        version="0.1.0+cu130",
        torch="2.11.0+cu130",
        accelerator="cu130",
        torch_spec="torch<2.13,>=2.11",
        torch_versions=["2.12.0", "2.11.0"],
        abi="stable",
    )
    w = read_wheel(path).wheel

    def run(torch: str, sha: str = w.sha256) -> SmokeRun:
        return SmokeRun(
            sha256=sha,
            cell=None,
            runner="cuda",
            gpu="NVIDIA H100 80GB HBM3",
            driver="580.159.04",
            date="2026-12-07",
            python="3.11.7",
            torch=torch,
        )

    runs = [run("2.12.1+cu130"), run("2.13.0+cu130"), run("2.12.1+cu130", "c" * 64)]
    kb = kb_with_patches()
    assert proven_variants(w, runs, kb) == {Variant(torch="2.12.1", accelerator="cu130")}
    files = render_site([w], REL, kb, runs=runs)
    assert "torch-2.12.1+cu130.html" in files and "torch-2.13.0+cu130.html" not in files
    assert w.filename in files["torch-2.12.1+cu130.html"].decode()
    # the coverage map says so too: the proven release's row is tested, not missing
    matrix = MatrixCells(
        cells=tuple(
            Cell(torch=t, accelerator="cu130", python="3.11", platform="linux_x86_64")
            for t in ("2.12.1", "2.13.0")
        )
    )
    grid = coverage_map([w], kb=kb, runs=runs, matrix=matrix).grids[0]
    column = grid.pythons.index("3.11")
    status = {
        row[0]: cells[column].status for row, cells in zip(grid.rows, grid.cells, strict=True)
    }
    assert status["2.12.1"] is CoverageStatus.SMOKED  # the run that proved it, on the map
    assert status["2.13.0"] is CoverageStatus.MISSING  # outside the range: no page, no wheel


def test_configured_aliases_add_pages(tmp_path: Path) -> None:
    path = wheel(tmp_path)
    settings = IndexSettings(aliases={"2.13.0+cpu": ("2.13.0+cu126",)})
    assert keys(path, settings) == ["2.13.0+cpu", "2.13.0+cu126"]


# -- pages ----------------------------------------------------------------------------------


@pytest.fixture
def three(tmp_path: Path) -> list[WheelSource]:
    wh = tmp_path / "wh"
    return sources(
        wheel(wh),
        wheel(wh, tag="cp312-cp312-manylinux_2_28_x86_64", requires_python=">=3.9,<3.14"),
        wheel(
            wh,
            version="0.1.0+pt211cu130",
            tag="cp312-cp312-manylinux_2_28_x86_64",
            torch="2.11.0+cu130",
            accelerator="cu130",
            torch_spec="torch==2.11.*",
        ),
    )


def test_site_layout(three: list[WheelSource]) -> None:
    files = render_site([s.wheel for s in three], REL, KB)
    assert sorted(files) == [
        ".nojekyll",
        "index.html",
        "index.json",
        "simple/bt-scatter/index.html",
        "simple/index.html",
        "torch-2.11.0+cu130.html",
        "torch-2.11.0+cu130/bt-scatter/index.html",
        "torch-2.11.0+cu130/index.html",
        "torch-2.13.0+cpu.html",
        "torch-2.13.0+cpu/bt-scatter/index.html",
        "torch-2.13.0+cpu/index.html",
    ]
    manifest = json.loads(files["index.json"])
    assert manifest["schema"] == "torch-buildtools/index/v1"
    assert [w["filename"] for w in manifest["wheels"]] == sorted(s.wheel.filename for s in three)
    assert "index.json" not in manifest["generated"]


def test_find_links_page_links_carry_hash_requires_python_and_metadata(
    three: list[WheelSource],
) -> None:
    files = render_site([s.wheel for s in three], REL, KB)
    page = files["torch-2.13.0+cpu.html"].decode()
    cp312 = next(s.wheel for s in three if "cp312" in s.wheel.filename and "cpu" in s.wheel.version)
    anchor = next(line for line in page.splitlines() if cp312.filename + "</a>" in line)
    assert anchor == (
        f'<a href="wheels/{cp312.filename.replace("+", "%2B")}#sha256={cp312.sha256}" '
        'data-requires-python="&gt;=3.9,&lt;3.14" '
        f'data-dist-info-metadata="sha256={cp312.metadata_sha256}" '
        f'data-core-metadata="sha256={cp312.metadata_sha256}">{cp312.filename}</a><br>'
    )
    assert "cu130" not in page  # other variants stay off this page


def test_simple_pages_link_up_to_the_shared_wheels_dir(three: list[WheelSource]) -> None:
    files = render_site([s.wheel for s in three], REL, KB)
    root = files["simple/index.html"].decode()
    assert links(root) == ["bt-scatter/"]
    assert '<meta name="pypi:repository-version" content="1.0">' in root
    every = links(files["simple/bt-scatter/index.html"].decode())
    assert len(every) == 3 and all(h.startswith("../../wheels/") for h in every)
    variant = links(files["torch-2.11.0+cu130/bt-scatter/index.html"].decode())
    assert len(variant) == 1 and "pt211cu130" in variant[0]


def test_base_url_makes_links_absolute(three: list[WheelSource]) -> None:
    files = render_site([s.wheel for s in three], IndexSettings(base_url="https://h/whl/"), KB)
    for path in ("torch-2.13.0+cpu.html", "simple/bt-scatter/index.html"):
        assert all(h.startswith("https://h/whl/wheels/") for h in links(files[path].decode()))
    landing = files["index.html"].decode()
    assert "pip install bt-scatter -f https://h/whl/torch-2.11.0+cu130.html" in landing
    assert "pip install bt-scatter --index-url https://h/whl/torch-2.13.0+cpu/" in landing
    # the torch of the page's build, not PyPI's default CUDA one
    assert (
        "pip install bt-scatter -f https://h/whl/torch-2.13.0+cpu.html "
        "--extra-index-url https://download.pytorch.org/whl/cpu" in landing
    )
    # PyPI's torch 2.11.0 is the cu130 build (the knowledge base): no other index needed
    assert "pip install bt-scatter -f https://h/whl/torch-2.11.0+cu130.html</code>" in landing


def test_landing_page_lists_every_torch_and_accelerator(three: list[WheelSource]) -> None:
    landing = render_site([s.wheel for s in three], REL, KB)["index.html"].decode()
    rows = re.findall(r'<tr id="[^"]+" data-row="[^"]+"><td>([^<]+)</td><td>([^<]+)</td>', landing)
    assert rows == [("2.11.0", "CUDA 13.0"), ("2.13.0", "CPU")]
    assert "pip install bt-scatter -f &lt;site-url&gt;/torch-2.13.0+cpu.html" in landing
    assert '<span id="bt-scatter-torch-2.13.0-cpu-cp311-linux_x86_64">3.11</span>' in landing


def test_wheels_elsewhere_link_there_without_pep658(tmp_path: Path) -> None:
    template = "https://github.com/o/r/releases/download/v{public_version}/{filename}"
    (src,) = sources(wheel(tmp_path), template=template)
    page = render_site([src.wheel], REL, KB)["torch-2.13.0+cpu.html"].decode()
    assert links(page) == [f"{src.wheel.url}#sha256={src.wheel.sha256}"]
    assert "data-core-metadata" not in page


def test_rendering_is_deterministic_and_order_independent(three: list[WheelSource]) -> None:
    a = render_site([s.wheel for s in three], REL, KB)
    b = render_site([s.wheel for s in reversed(three)], REL, KB)
    assert a == b


# -- smoke gate -----------------------------------------------------------------------------


def smoke_report(path: Path, results: Sequence[tuple[str, str]]) -> Path:
    body = {
        "schema": "torch-buildtools/smoke-report/v1",
        "results": [{"wheel": "w.whl", "sha256": sha, "status": st} for sha, st in results],
    }
    path.write_text(json.dumps(body))
    return path


def test_smoke_gate(tmp_path: Path) -> None:
    gate = SmokeGate.load(
        [
            smoke_report(tmp_path / "a.json", [("aa", "passed"), ("bb", "segfault")]),
            smoke_report(
                tmp_path / "b.json", [("cc", "passed"), ("cc", "timeout"), ("dd", "skipped")]
            ),
        ]
    )
    assert gate.verdict("aa") is None
    assert gate.verdict("bb") == "smoke segfault"
    assert gate.verdict("cc") == "smoke timeout"  # passed on one GPU, hung on another
    assert gate.verdict("dd") == "smoke skipped"
    assert gate.verdict("ee") == "smoke not run"


def test_smoke_gate_refuses_another_schema(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema": "torch-buildtools/run-report/v1", "cells": []}))
    with pytest.raises(PublishError, match="expected 'torch-buildtools/smoke-report/v1'"):
        SmokeGate.load([path])


# -- merge and publish ----------------------------------------------------------------------


def test_merge_keeps_published_and_adds_new(three: list[WheelSource]) -> None:
    first = merge([], three[:2])
    second = merge(first.wheels, three[1:])
    assert [w.filename for w in second.wheels] == sorted(s.wheel.filename for s in three)
    assert second.unchanged == (three[1].wheel.filename,)
    assert [s.wheel.filename for s in second.added] == [three[2].wheel.filename]


def test_same_name_other_content_is_an_error_naming_both_hashes(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (old,) = sources(wheel(tmp_path / "a", payload=b"first build"))
    publish(site, [old], REL, KB)
    before = snapshot(site)
    (new,) = sources(wheel(tmp_path / "b", payload=b"second build"))
    assert old.wheel.filename == new.wheel.filename
    with pytest.raises(ImmutableWheelError) as err:
        publish(site, [new], REL, KB)
    assert old.wheel.sha256 in str(err.value) and new.wheel.sha256 in str(err.value)
    assert "nothing was written" in str(err.value)
    assert snapshot(site) == before
    assert leftovers(site) == []


def test_same_inputs_other_bytes_is_told_apart_from_a_conflict(tmp_path: Path) -> None:
    """A rebuild of unchanged sources whose compiler embedded something: not a conflict."""
    site = tmp_path / "site"
    fp = "f" * 64
    (old,) = sources(wheel(tmp_path / "a", payload=b"first build", fingerprint=fp))
    publish(site, [old], REL, KB)
    before = snapshot(site)
    (new,) = sources(wheel(tmp_path / "b", payload=b"second build", fingerprint=fp))
    result = publish(site, [new], REL, KB)
    assert result.added == () and result.unchanged == ()
    ((name, why),) = result.same_inputs
    assert name == old.wheel.filename
    assert why.startswith("same inputs as the published wheel (fingerprint ffffffffffff)")
    assert "the published wheel stays" in why
    assert snapshot(site) == before
    # other inputs (another fingerprint) with other bytes stay a conflict
    (other,) = sources(wheel(tmp_path / "c", payload=b"third build", fingerprint="e" * 64))
    with pytest.raises(ImmutableWheelError):
        publish(site, [other], REL, KB)


def test_two_inputs_with_one_name_and_different_content_conflict(tmp_path: Path) -> None:
    a = sources(wheel(tmp_path / "a", payload=b"a"), wheel(tmp_path / "b", payload=b"b"))
    with pytest.raises(ImmutableWheelError, match="two inputs differ"):
        merge([], a)


def test_publishing_again_is_a_no_op_byte_for_byte(
    tmp_path: Path, three: list[WheelSource]
) -> None:
    site = tmp_path / "site"
    publish(site, three, REL, KB)
    first = snapshot(site)
    result = publish(site, three, REL, KB)
    assert result.added == () and len(result.unchanged) == 3
    assert snapshot(site) == first


def test_incremental_publish_equals_publishing_everything_at_once(
    tmp_path: Path, three: list[WheelSource]
) -> None:
    stepwise, at_once = tmp_path / "a", tmp_path / "b"
    publish(stepwise, three[2:], REL, KB)
    publish(stepwise, three[:1], REL, KB)
    publish(stepwise, three[1:2], REL, KB)
    publish(at_once, three, REL, KB)
    assert snapshot(stepwise) == snapshot(at_once)
    assert read_manifest(stepwise).wheels == read_manifest(at_once).wheels


def test_merge_keeps_every_wheel_and_its_metadata(tmp_path: Path, three: list[WheelSource]) -> None:
    site = tmp_path / "site"
    publish(site, three[:1], REL, KB)
    publish(site, three[1:], REL, KB)
    for src in three:
        assert (site / "wheels" / src.wheel.filename).read_bytes() == src.path.read_bytes()
        assert (site / "wheels" / f"{src.wheel.filename}.metadata").read_bytes() == src.metadata
    page = (site / "torch-2.13.0+cpu.html").read_text()
    assert page.count("</a>") == 2


def test_foreign_files_are_kept_and_stale_pages_dropped(tmp_path: Path) -> None:
    site = tmp_path / "site"
    src = sources(wheel(tmp_path, version="0.1.0+pt212cpu", torch="2.12.0", torch_spec=None))
    publish(site, src, REL, KB)
    assert (site / "torch-2.12.1+cpu.html").is_file()
    (site / "CNAME").write_text("wheels.example.org\n")
    publish(site, [], IndexSettings(alias_patches=False), KB)
    assert (site / "CNAME").read_text() == "wheels.example.org\n"
    assert not (site / "torch-2.12.1+cpu.html").exists()
    assert (site / "torch-2.12.0+cpu.html").is_file()


def test_non_empty_directory_without_manifest_is_refused(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("my blog")
    with pytest.raises(PublishError, match=r"has no index\.json"):
        publish(site, sources(wheel(tmp_path)), REL, KB)
    assert (site / "index.html").read_text() == "my blog"


def test_damaged_site_is_reported(tmp_path: Path, three: list[WheelSource]) -> None:
    site = tmp_path / "site"
    publish(site, three, REL, KB)
    (site / "wheels" / three[0].wheel.filename).unlink()
    with pytest.raises(PublishError, match="is damaged"):
        publish(site, [], REL, KB)
    assert leftovers(site) == []


def test_new_wheel_never_replaces_a_served_file_outside_the_manifest(tmp_path: Path) -> None:
    site = tmp_path / "site"
    publish(site, [], REL, KB)
    (src,) = sources(wheel(tmp_path))
    (site / "wheels").mkdir()
    (site / "wheels" / src.wheel.filename).write_bytes(b"uploaded by hand")
    with pytest.raises(ImmutableWheelError, match=r"not in index\.json"):
        publish(site, [src], REL, KB)


def test_dry_run_writes_nothing(tmp_path: Path, three: list[WheelSource]) -> None:
    site = tmp_path / "site"
    result = publish(site, three, REL, KB, options=PublishOptions(dry_run=True))
    assert len(result.added) == 3 and not result.written
    assert list(tmp_path.iterdir()) == [tmp_path / "wh"]


def test_smoke_gate_holds_back_failed_wheels(tmp_path: Path, three: list[WheelSource]) -> None:
    gate = SmokeGate.load(
        [
            smoke_report(
                tmp_path / "smoke.json",
                [(three[0].wheel.sha256, "passed"), (three[1].wheel.sha256, "wrong-result")],
            )
        ]
    )
    result = publish(tmp_path / "site", three, REL, KB, gate=gate)
    assert result.added == (three[0].wheel.filename,)
    assert dict(result.held_back) == {
        three[1].wheel.filename: "smoke wrong-result",
        three[2].wheel.filename: "smoke not run",
    }
    assert [w.filename for w in read_manifest(tmp_path / "site").wheels] == [
        three[0].wheel.filename
    ]


# -- crash safety ---------------------------------------------------------------------------


class Crash(Exception):
    pass


def crash_at(stage: str) -> Callable[[str], None]:
    def fault(at: str) -> None:
        if at == stage:
            raise Crash(at)

    return fault


def no_exchange(a: Path, b: Path) -> bool:
    return False


_STAGES = ["carried-over", "wheels-copied", "pages-written", "commit"]


@pytest.mark.parametrize(
    ("exchange", "stage"),
    [(None, s) for s in _STAGES] + [(no_exchange, s) for s in [*_STAGES, "between-renames"]],
    ids=[f"renameat2-{s}" for s in _STAGES]
    + [f"two-renames-{s}" for s in [*_STAGES, "between-renames"]],
)
def test_failure_mid_publish_leaves_the_old_site_byte_identical(
    tmp_path: Path,
    three: list[WheelSource],
    stage: str,
    exchange: Callable[[Path, Path], bool] | None,
) -> None:
    site = tmp_path / "site"
    publish(site, three[:1], REL, KB)
    (site / "CNAME").write_text("x\n")
    before = snapshot(site)
    kwargs = {"exchange": exchange} if exchange else {}
    with pytest.raises(Crash):
        publish(site, three[1:], REL, KB, options=PublishOptions(fault=crash_at(stage), **kwargs))
    assert snapshot(site) == before
    assert leftovers(site) == []
    publish(site, three[1:], REL, KB, options=PublishOptions(**kwargs))  # and the next run works
    assert len(read_manifest(site).wheels) == 3


def test_site_moved_away_by_a_hard_crash_is_restored_by_the_next_run(
    tmp_path: Path, three: list[WheelSource]
) -> None:
    site = tmp_path / "site"
    publish(site, three[:1], REL, KB)
    before = snapshot(site)
    # what a process killed between the two renames leaves: the old site moved aside,
    # a complete staged site that never got its name
    site.rename(tmp_path / ".site.old-abc123")
    (tmp_path / ".site.staging-def456").mkdir()
    result = publish(site, [], REL, KB)
    assert result.written and snapshot(site) == before
    assert leftovers(site) == []


def test_the_swap_keeps_the_site_readable_by_others(tmp_path: Path) -> None:
    site = tmp_path / "site"
    publish(site, sources(wheel(tmp_path)), REL, KB)
    assert site.stat().st_mode & 0o005 == 0o005


# -- configuration and command line ---------------------------------------------------------


def test_matrix_index_settings_parse(tmp_path: Path) -> None:
    text = (
        "axes: {torch: ['2.13.0'], accelerator: [cpu], python: ['3.11']}\n"
        "index:\n"
        "  base_url: https://h/whl\n"
        "  alias_patches: false\n"
        "  aliases: {'2.13.0+cpu': ['2.13.0+cu126']}\n"
        "  wheel_url: https://github.com/o/r/releases/download/v{public_version}/{filename}\n"
    )
    (tmp_path / "matrix.yaml").write_text(text)
    index = load_matrix(tmp_path / "matrix.yaml").matrix.index
    assert index.alias_patches is False
    assert index.aliases == {"2.13.0+cpu": ["2.13.0+cu126"]}
    assert index.wheel_url is not None and index.wheel_url.endswith("/{filename}")


def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(["index", *argv], out=out), out.getvalue()


def test_cli_publishes_and_reports(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    wheel(wh)
    site = tmp_path / "site"
    code, out = run_cli(str(wh), "--site", str(site), "--no-matrix", "--base-url", "http://h/")
    assert code == 0, out
    assert "published 1 new wheel(s)" in out and "1 find-links page(s)" in out
    assert 'href="http://h/wheels/' in (site / "torch-2.13.0+cpu.html").read_text()
    code, out = run_cli(str(wh), "--site", str(site), "--no-matrix", "--base-url", "http://h/")
    assert code == 0 and "unchanged  bt_scatter" in out


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    site = tmp_path / "site"
    run_cli(str(wheel(tmp_path / "a", payload=b"1")), "--site", str(site), "--no-matrix")
    code, _ = run_cli(str(wheel(tmp_path / "b", payload=b"2")), "--site", str(site), "--no-matrix")
    assert code == ExitCode.IMMUTABLE_WHEEL
    assert "published wheels are immutable" in capsys.readouterr().err
    code, _ = run_cli(str(tmp_path / "b"), "--site", str(site), "--wheel-url", "https://x/{name}")
    assert code == ExitCode.PUBLISH
    assert "--wheel-url: unknown placeholder {name}" in capsys.readouterr().err
    code, _ = run_cli(str(tmp_path / "nowhere"), "--site", str(site), "--no-matrix")
    assert code == ExitCode.PUBLISH
    assert "no such wheel or directory" in capsys.readouterr().err


def test_wheel_changed_after_reading_is_not_published(tmp_path: Path) -> None:
    site = tmp_path / "site"
    publish(site, [], REL, KB)
    before = snapshot(site)
    (src,) = sources(wheel(tmp_path / "wh"))
    src.path.write_bytes(src.path.read_bytes() + b"\0")  # a build rewrote it meanwhile
    with pytest.raises(PublishError, match="changed while publishing"):
        publish(site, [src], REL, KB)
    assert snapshot(site) == before and leftovers(site) == []


def test_a_smoke_report_entry_names_the_torch_it_ran_on_and_runs_sort_without_one() -> None:
    """A stable wheel's window entries ran on other releases than the runner's own torch: the
    run keeps the entry's torch; a run of an older report (no torch) still sorts beside it."""
    report = {
        "runner": {"accelerator": "cpu", "date": "2026-12-07T20:00:00", "python": "3.11.7",
                   "torch": None},
        "results": [
            {"sha256": "a" * 64, "cell": "torch2.14.0-cpu-cp311", "status": "passed",
             "torch": "2.14.0+cu130"},
            {"sha256": "a" * 64, "cell": "torch2.13.0-cpu-cp311", "status": "passed"},
        ],
    }  # fmt: skip
    first, second = passing_runs(report, "report.json")
    assert (first.torch, second.torch) == ("2.14.0+cu130", None)
    older = dataclasses.replace(first, torch=None)
    assert sorted({first, older, second}, key=SmokeRun.key)[0].cell == "torch2.13.0-cpu-cp311"
