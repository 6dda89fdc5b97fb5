"""Release day for a stable-ABI window in the generated workflows: the backfill's smoke-only
path (backfill.yml → release.yml `window` → smoke-window-<family> → prepare → publish)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fixtures.attestations import AttestedRunner, published_record
from fixtures.fakegh import FakeGitHub
from fixtures.stablesite import published_window_site
from ruamel.yaml import YAML

from buildtools.cisteps.assets import SmokeBinding, built_wheels, reported_smoke, select_wheels
from buildtools.cli.ci.matrix import cmd_matrix
from buildtools.cli.main import _extra_verbs, build_parser
from buildtools.errors import PlanError
from buildtools.files import sha256_file
from buildtools.workflows.generate import generate

REPO = Path(__file__).resolve().parents[2]
URL = "https://github.com/example/bt-scatter/releases/download/v0.1.0/{filename}"
SHAPE = "cpu=1;build=cpu;smoke=cpu;images=1;legs=cpu:1"


@pytest.fixture(scope="module")
def workflows() -> dict[str, dict[str, Any]]:
    yaml = YAML(typ="safe", pure=True)
    return {
        g.path.rsplit("/", 1)[-1]: yaml.load(g.text)
        for g in generate(REPO / "matrix.yaml").files
        if g.path.endswith((".yml",)) and "/workflows/" in g.path
    }


def _step(job: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in job["steps"] if str(s.get("name", "")).startswith(name))


def test_the_backfill_hands_smoke_only_cells_to_the_release_as_window(
    workflows: dict[str, dict[str, Any]],
) -> None:
    """The old backfill.yml dispatched only missing cells (`count != '0'`): a new torch
    inside a published window was never proven. Now its cells go as `window`, never `only`."""
    backfill = workflows["backfill.yml"]["jobs"]
    assert backfill["missing"]["outputs"]["smoke_only"] == "${{ steps.missing.outputs.smoke_only }}"
    dispatch = backfill["dispatch"]
    assert dispatch["if"] == (
        "needs.missing.outputs.count != '0' || needs.missing.outputs.smoke_only != ''"
    )
    assert dispatch["permissions"] == {"actions": "write"}
    step = _step(dispatch, "Start release.yml")
    assert step["env"]["BT_WINDOW"] == "${{ needs.missing.outputs.smoke_only }}"
    assert '-f only="$BT_ONLY" -f window="$BT_WINDOW"' in step["run"]
    assert "${{" not in step["run"]
    release = workflows["release.yml"]
    assert release["on"]["workflow_dispatch"]["inputs"]["window"]["default"] == ""
    plan = _step(release["jobs"]["plan"], "Plan the release profile")
    assert plan["env"]["BT_WINDOW"] == "${{ inputs.window }}"
    assert 'for cell in "${window[@]}"; do args+=(--window "$cell"); done' in plan["run"]


def test_the_smoke_only_job_builds_nothing_and_checks_the_published_bytes(
    workflows: dict[str, dict[str, Any]],
) -> None:
    jobs = workflows["release.yml"]["jobs"]
    job = jobs["smoke-window-cpu"]
    # no build upstream, read-only, a CPU runner (where smoke tests a stable wheel's window)
    assert job["needs"] == ["plan"]
    assert job["permissions"] == {"contents": "read"}
    assert job["runs-on"] == "ubuntu-24.04"
    assert "needs.plan.outputs.run_smoke_window_cpu == 'true'" in job["if"]
    assert job["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.smoke_window_cpu) }}"
    names = [s.get("name", "") for s in job["steps"]]
    assert not any("Build" in n or "builder image" in n for n in names), names
    download = _step(job, "Download the published wheel")
    assert download["env"]["BT_WHEEL_SHA256"] == "${{ matrix.sha256 }}"
    assert '"$got" != "$BT_WHEEL_SHA256"' in download["run"]
    assert '--proto "=https"' in download["run"]
    smoke = _step(job, "Smoke test on the new torch")
    assert smoke["run"].rstrip().endswith('--window-torch "$BT_WINDOW_TORCH"')
    assert smoke["env"]["BUILDTOOLS_RUNNER_ACCELERATOR"] == "cpu"
    # the report bound to its leg by digest, as every release smoke leg
    assert job["outputs"]["report_0"] == "${{ steps.smoked.outputs.report_0 }}"
    assert 'echo "report_$BT_LEG=$sha"' in _step(job, "Report the smoke report's sha256")["run"]
    for step in job["steps"]:
        assert "${{" not in step.get("run", ""), step["name"]
        if "uses" in step:
            assert "@" in step["uses"] and len(step["uses"].split("@")[1].split()[0]) == 40
    # no GPU family has one: smoke --window-torch proves a window on a CPU runner only
    assert [j for j in jobs if j.startswith("smoke-window-")] == ["smoke-window-cpu"]


def test_the_publish_takes_a_window_wheel_only_as_the_record_had_it(
    workflows: dict[str, dict[str, Any]],
) -> None:
    jobs = workflows["release.yml"]["jobs"]
    assert "smoke-window-cpu" in jobs["prepare"]["needs"]
    assert "needs.smoke-window-cpu.result == 'success'" in jobs["prepare"]["if"]
    select = _step(jobs["prepare"], "Select the smoke-tested wheels")
    assert select["env"]["BT_BUILT_WINDOW_CPU"] == "${{ needs.plan.outputs.window_built_cpu }}"
    assert select["env"]["BT_SMOKED_WINDOW_CPU"] == "${{ toJSON(needs.smoke-window-cpu.outputs) }}"
    assert "--built-env cpu=BT_BUILT_WINDOW_CPU" in select["run"]
    assert "--smoked-env cpu=BT_SMOKED_WINDOW_CPU" in select["run"]
    check = _step(jobs["publish"], "Check the bundle")
    assert check["env"]["BT_BUILT_WINDOW_CPU"] == "${{ needs.plan.outputs.window_built_cpu }}"
    assert "BT_BUILT_WINDOW_CPU; do" in check["run"]
    assert "smoke-window-cpu" in jobs["status"]["needs"]


def _window_site(tmp_path: Path) -> tuple[Path, Path]:
    """A stable wheel published for 2.13.0 with `torch>=2.13,<2.15` (2.14.1 came out since)."""
    return published_window_site(tmp_path, URL)


def _matrix(tmp_path: Path, *window: str) -> tuple[dict[str, str], str, Path]:
    site, wheel = _window_site(tmp_path)
    gh, runner = FakeGitHub(), AttestedRunner()
    published_record(gh, runner, "v0.1.0", site / "index.json")
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        f"project: {{path: {REPO / 'examples' / 'scatter'}, name: bt-scatter, abi: stable}}\n"
        'axes: {torch: ["2.13.0", "2.14.1"], accelerator: [cpu], python: ["3.12"]}\n'
        "runners: {smoke: {cpu: ubuntu-24.04}}\n"
        "profiles: {release: {description: every cell}}\n"
    )
    gh_out = tmp_path / "out"
    argv = ["ci", "matrix", "--matrix", str(matrix), "--profile", "release", "--workflow",
            "release", "--shape", SHAPE, "--tag", "v0.1.0", "--published-from-releases",
            "--github-output", str(gh_out), "--summary", str(tmp_path / "summary.md")]  # fmt: skip
    for cell in window:
        argv += ["--window", cell]
    args = build_parser(_extra_verbs()).parse_args(argv)
    assert cmd_matrix(args, io.StringIO(), api=gh, runner=runner) == 0
    outputs = dict(line.split("=", 1) for line in gh_out.read_text().splitlines())
    return outputs, (tmp_path / "summary.md").read_text(), wheel


def test_the_plan_makes_a_smoke_only_leg_from_the_authenticated_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_REPOSITORY", "example/bt-scatter")
    monkeypatch.setenv("BT_DEFAULT_BRANCH", "main")
    outputs, summary, wheel = _matrix(tmp_path, "torch2.14.1-cpu-cp312")
    # nothing is built: the window's wheel is published
    assert outputs["run_build_cpu"] == "false"
    assert outputs["run_smoke_window_cpu"] == "true" and outputs["run_publish"] == "true"
    (leg,) = json.loads(outputs["smoke_window_cpu"])["include"]
    sha = sha256_file(wheel)
    assert leg["id"] == "torch2.14.1-cpu-cp312"
    assert leg["wheel"] == wheel.name and leg["sha256"] == sha
    assert leg["url"] == URL.format(filename=quote(wheel.name))  # as the record links it
    assert leg["window_torch"] == "2.14.1" and leg["family"] == "cpu"
    # the wheels the publish may take from it: the record's bytes, as a build leg reports
    assert built_wheels([outputs["window_built_cpu"]]) == {wheel.name: sha}
    assert "smoke-only `torch2.14.1-cpu-cp312`" in summary
    # without `window`: no leg, and the flag says so
    plain, _, _ = _matrix(tmp_path / "plain")
    assert plain["run_smoke_window_cpu"] == "false"
    assert json.loads(plain["window_built_cpu"]) == {"wheels_window": ""}


def test_a_cell_outside_every_window_is_refused_with_the_remedy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_REPOSITORY", "example/bt-scatter")
    monkeypatch.setenv("BT_DEFAULT_BRANCH", "main")
    # 2.13.0 is what the record names: published, nothing to prove
    with pytest.raises(PlanError, match=r"--window torch2\.13\.0-cpu-cp312: no published"):
        _matrix(tmp_path, "torch2.13.0-cpu-cp312")
    args = build_parser(_extra_verbs()).parse_args(
        ["ci", "matrix", "--profile", "release", "--workflow", "pull-request",
         "--window", "torch2.14.1-cpu-cp312"]
    )  # fmt: skip
    with pytest.raises(PlanError, match="--window applies to --workflow release only"):
        cmd_matrix(args, io.StringIO())


def _report(path: Path, wheel: Path, status: str) -> Path:
    """A smoke report as `buildtools smoke --window-torch` writes it (one entry per torch)."""
    sha = sha256_file(wheel)
    results = [
        {"wheel": wheel.name, "sha256": sha, "cell": f"torch{t}-cpu-cp312", "torch": t,
         "status": s}
        for t, s in (("2.13.0", "passed"), ("2.14.1", status))
    ]  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": "torch-buildtools/smoke-report/v1", "results": results}))
    return path


def test_a_window_wheel_is_selected_only_on_its_own_legs_passing_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prepare job's selection, with the plan's window output as the wheel's build leg:
    the downloaded wheel passes only with a report a smoke-window leg reported by digest."""
    monkeypatch.setenv("GITHUB_REPOSITORY", "example/bt-scatter")
    monkeypatch.setenv("BT_DEFAULT_BRANCH", "main")
    outputs, _, wheel = _matrix(tmp_path, "torch2.14.1-cpu-cp312")
    artifacts = tmp_path / "artifacts"
    (artifacts / "wheels-window-torch2.14.1-cpu-cp312").mkdir(parents=True)
    downloaded = artifacts / "wheels-window-torch2.14.1-cpu-cp312" / wheel.name
    downloaded.write_bytes(wheel.read_bytes())
    built = built_wheels([outputs["window_built_cpu"]])
    for status, selected in (("passed", True), ("failed", False)):
        report = _report(tmp_path / status / "report.json", wheel, status)
        leg = json.dumps({"report_0": sha256_file(report)})
        binding = SmokeBinding(
            reports=reported_smoke([("cpu", leg)]), wheels=dict.fromkeys(built, "cpu")
        )
        sel = select_wheels(
            artifacts, [report], tmp_path / status / "out", built=built, binding=binding
        )
        assert bool(sel.published) is selected, (status, sel)
    # a report no leg reported stops the publish; other bytes than the record's too
    unreported = _report(tmp_path / "x" / "report.json", wheel, "passed")
    unreported.write_text(unreported.read_text() + " ")
    with pytest.raises(Exception, match="no smoke leg of this run reported"):
        select_wheels(
            artifacts,
            [unreported],
            tmp_path / "x" / "out",
            built=built,
            binding=SmokeBinding(reports={}, wheels=dict.fromkeys(built, "cpu")),
        )
    downloaded.write_bytes(wheel.read_bytes() + b"\0")
    with pytest.raises(Exception, match="no build job of this run made these bytes"):
        select_wheels(artifacts, [], tmp_path / "y", built=built)
