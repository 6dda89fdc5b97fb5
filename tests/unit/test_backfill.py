"""backfill.yml's step (`buildtools ci backfill`): the latest tag, the cells its record lacks."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from fixtures.crafted import make_wheel
from fixtures.fakegh import FakeGitHub
from fixtures.stablesite import published_window_site

from buildtools.cisteps.published_record import RecordPolicy, upload_record
from buildtools.cli.ci.backfill import cmd_backfill, latest_release_tag
from buildtools.cli.main import _extra_verbs, build_parser
from buildtools.errors import PlanError
from buildtools.index.publish import publish
from buildtools.index.settings import IndexSettings
from buildtools.index.wheels import read_wheel
from buildtools.knowledge import load_knowledge

REPO = Path(__file__).resolve().parents[2]


def _site(tmp_path: Path) -> Path:
    wheel = make_wheel(
        tmp_path / "w",
        name="bt_scatter",
        version="0.1.0+pt213cpu",
        tag="cp312-cp312-manylinux_2_28_x86_64",
        files={"bt_scatter/__init__.py": b""},
        requires=["torch==2.13.*"],
        dist_info_files={
            "buildtools.json": json.dumps(
                {"schema": 1, "torch": "2.13.0+cpu", "accelerator": "cpu", "cxx11_abi": True}
            ).encode()
        },
    )
    site = tmp_path / "site"
    url = "https://github.com/example/bt-scatter/releases/download/v0.1.0/{filename}"
    publish(site, [read_wheel(wheel, wheel_url_template=url)], IndexSettings(), load_knowledge())
    return site


def _run(argv: list[str], gh: FakeGitHub, tmp_path: Path) -> tuple[dict[str, str], str]:
    out_file = tmp_path / "github-output"
    out_file.write_text("")
    args = build_parser(_extra_verbs()).parse_args(
        [
            "ci",
            "backfill",
            *argv,
            "--github-output",
            str(out_file),
            "--summary",
            str(tmp_path / "s"),
        ]
    )
    out = io.StringIO()
    # the record's attestation is checked by record_policy (tests/unit/test_ci_record.py);
    # here: who uploaded it and where its wheels link
    policy = RecordPolicy(
        prefixes=("https://github.com/example/bt-scatter/releases/download/",),
        authenticate=None,
    )
    assert cmd_backfill(args, out, api=gh, policy=policy) == 0
    outputs = dict(line.split("=", 1) for line in out_file.read_text().splitlines())
    return outputs, out.getvalue()


def test_the_latest_tag_is_the_newest_published_version_not_the_newest_date() -> None:
    gh = FakeGitHub()
    for tag in ("v0.1.10", "v0.1.9", "v0.2.0rc1", "v0.3.0", "nightly"):
        gh.publish_release(gh.create_release(tag))
    gh.release("v0.3.0")["draft"] = True  # type: ignore[index]
    assert latest_release_tag(gh) == "v0.1.10"
    with pytest.raises(PlanError, match="no published release"):
        latest_release_tag(FakeGitHub())


def test_backfill_outputs_the_smoked_cells_the_record_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    gh = FakeGitHub()
    release = gh.publish_release(gh.create_release("v0.1.0"))
    upload_record(gh, release, _site(tmp_path) / "index.json")
    outputs, text = _run(["--latest-tag"], gh, tmp_path)
    assert outputs == {"tag": "v0.1.0"}
    outputs, text = _run(["--tag", "v0.1.0"], gh, tmp_path)
    only = outputs["only"].split()
    # 30 cells in the release profile: 4 ROCm ones have no smoke runner, 1 is published
    assert outputs["count"] == str(len(only)) == "25"
    assert "torch2.13.0-cpu-cp312" not in only and "torch2.13.0-cpu-cp312-aarch64" in only
    assert "1 of 30 cell(s) of the release profile published" in text
    assert "4 cell(s) without a smoke runner: never published, not backfilled" in text
    with pytest.raises(PlanError, match=r"releases 0\.2\.0"):
        _run(["--tag", "v0.2.0"], gh, tmp_path)


def test_a_new_torch_inside_a_published_window_is_smoke_only_outside_it_a_rebuild(
    tmp_path: Path,
) -> None:
    """A stable wheel published for 2.13.0 with `torch>=2.13,<2.15`: 2.14.1 (out since) is
    inside its window, so the backfill proposes that wheel's smoke there, no build; 2.15.0
    is outside, so it is rebuilt."""
    url = "https://github.com/example/bt-scatter/releases/download/v0.1.0/{filename}"
    site, wheel = published_window_site(tmp_path, url)
    gh = FakeGitHub()
    release = gh.publish_release(gh.create_release("v0.1.0"))
    upload_record(gh, release, site / "index.json")
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        f"project: {{path: {REPO / 'examples' / 'scatter'}, name: bt-scatter, abi: stable}}\n"
        'axes: {torch: ["2.13.0", "2.14.1", "2.15.0"], accelerator: [cpu], python: ["3.12"]}\n'
        "runners: {smoke: {cpu: ubuntu-24.04}}\n"
        "profiles: {release: {description: every cell}}\n"
    )
    outputs, text = _run(["--matrix", str(matrix), "--tag", "v0.1.0"], gh, tmp_path)
    assert outputs["smoke_only"] == "torch2.14.1-cpu-cp312"
    assert outputs["only"] == "torch2.15.0-cpu-cp312" and outputs["count"] == "1"
    assert "1 cell(s) inside a published wheel's window: a smoke-only run proves them" in text
    assert f"- `torch2.14.1-cpu-cp312`: `{wheel.name}`" in text
