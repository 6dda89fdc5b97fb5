"""The job graph of the generated workflows, simulated: which jobs run in each scenario.

The YAML the generator writes is read back and scheduled by `fixtures.gha` (needs, `if:`,
default success()); the plan job's outputs come from the real `buildtools ci matrix` with
the shape the workflow passes it, and the status job's verdict from the real
`buildtools ci status`. Scenarios: a release with every job green, one CUDA build
failed, a ROCm family without a smoke runner (skipped; built when asked), a pull request
from a fork and one from a branch of the repository.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from fixtures.gha import Run, simulate
from fixtures.imagepins import PINS_ENV, pin_every_base
from ruamel.yaml import YAML

from buildtools.ciplan import layout
from buildtools.cisteps.verdict import read_entries, run_status, status_markdown
from buildtools.cli.main import main
from buildtools.workflows.generate import generate
from buildtools.workflows.pins import load_pins

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ci"
HOSTED = set(load_pins().hosted_runners.labels)
PUSH = {
    "event_name": "workflow_run",
    "repository": "example/bt-scatter",
    "event": {
        "workflow_run": {
            "conclusion": "success",
            "event": "push",
            "head_branch": "v0.1.0",
            "head_sha": "1" * 40,
            "head_repository": {"full_name": "example/bt-scatter"},
        },
        "repository": {"default_branch": "main"},
    },
}


def hosted(label: Any) -> bool:
    """A GitHub-hosted label (a list of labels is a self-hosted runner's)."""
    return isinstance(label, str) and label in HOSTED


def _workflows(matrix: Path) -> dict[str, Any]:
    return {g.path: YAML(typ="safe", pure=True).load(g.text) for g in generate(matrix).files}


def _project(tmp_path: Path, source: Path) -> Path:
    (tmp_path / ".git").mkdir(exist_ok=True)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(source.read_text())
    return matrix


class Plan:
    """The real plan job of a workflow: its outputs and entries for some arguments."""

    def __init__(self, tmp_path: Path, matrix: Path, workflow: dict[str, Any], kind: str):
        self.tmp, self.matrix, self.kind = tmp_path, matrix, kind
        step = next(s for s in workflow["jobs"]["plan"]["steps"] if s.get("id") == "plan")
        self.shape = re.search(r"--shape '([^']*)'", step["run"])[1]  # type: ignore[index]
        self.profile = re.search(r"--profile (\S+)", step["run"])[1]  # type: ignore[index]

    def outputs(self, *extra: str) -> tuple[dict[str, str], dict[str, Any]]:
        out, entries = self.tmp / "github_output", self.tmp / "plan" / "entries.json"
        out.unlink(missing_ok=True)
        where = [] if self.matrix == REPO / "matrix.yaml" else ["--matrix", str(self.matrix)]
        argv = ["ci", "matrix", *where, "--profile", self.profile]
        argv += ["--workflow", self.kind, "--shape", self.shape, *extra]
        argv += ["--github-output", str(out), "--entries-json", str(entries)]
        assert main(argv, out=io.StringIO()) == 0
        outputs = dict(line.split("=", 1) for line in out.read_text().splitlines())
        return outputs, read_entries(entries)


def _status_decider(kind: str, entries: dict[str, Any], reports: Path) -> Any:
    """The status job's result: what `buildtools ci status` decides from the needs."""
    verdicts = {}

    def decide(job: str, needs: dict[str, Any]) -> str | None:
        if job != "status":
            return None
        status = run_status(workflow=kind, needs=needs, entries=entries, reports=reports)
        verdicts["status"] = status
        return "success" if status.ok else "failure"

    decide.verdicts = verdicts  # type: ignore[attr-defined]
    return decide


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    return _workflows(REPO / "matrix.yaml")


@pytest.fixture(autouse=True)
def _ci_python(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    # a release plan needs every base pinned by digest: made-up digests for the tests
    pins = pin_every_base(tmp_path_factory.mktemp("pins") / "image_pins.yaml")
    monkeypatch.setenv(PINS_ENV, str(pins))
    monkeypatch.chdir(REPO)
    monkeypatch.setattr("buildtools.cli.ci.matrix.host_python", lambda: "3.12")
    monkeypatch.setattr("buildtools.planning.host_python", lambda: "3.12")


def _reports(root: Path, entries: dict[str, Any], failed: dict[str, str]) -> None:
    """Each build leg's report.json as its job uploads it: `failed` job id → the failure."""
    for entry in entries["build"]:
        report = root / f"build-report-{entry['id']}" / "report.json"
        report.parent.mkdir(parents=True, exist_ok=True)
        status = "failed" if entry["id"] in failed else "built"
        cell = {"cell": entry["id"], "status": status, "failure": failed.get(entry["id"])}
        report.write_text(json.dumps({"cells": [cell]}))


def _release(
    tmp_path: Path,
    reference: dict[str, Any],
    *args: str,
    outcome: dict[str, str] | None = None,
    failed: dict[str, str] | None = None,
) -> tuple[Run, Any]:
    workflow = reference[layout.RELEASE_WORKFLOW]
    plan = Plan(tmp_path, REPO / "matrix.yaml", workflow, layout.RELEASE_NAME)
    outputs, entries = plan.outputs("--tag", "v0.1.0", "--sha", "1" * 40, *args)
    _reports(tmp_path / "reports", entries, failed or {})
    decide = _status_decider(layout.RELEASE_NAME, entries, tmp_path / "reports")
    run = simulate(workflow, github=PUSH, plan_outputs=outputs, outcome=outcome, decide=decide)
    return run, decide.verdicts.get("status")  # type: ignore[attr-defined]


def test_release_all_green(tmp_path: Path, reference: dict[str, Any]) -> None:
    run, status = _release(tmp_path, reference)
    assert run.ran() == {
        "plan", "images", "build-cpu", "build-cuda", "smoke-cpu", "smoke-cuda",
        "smoke-cpu-aarch64", "smoke-cuda-aarch64", "prepare", "publish", "pages", "status",
    }  # fmt: skip
    # the reference matrix has no ROCm smoke runner: not built for a release
    assert run.results["build-rocm"] == "skipped"
    assert run.results["status"] == "success" and status.ok
    assert any("no runners.smoke.rocm" in why for _, why in status.not_run)
    # the GPU runner runs only the CUDA smoke job; publishing runs on a hosted runner
    assert run.runs_on["smoke-cuda"] == ["self-hosted", "linux", "gpu-h100"]
    for job in ("plan", "prepare", "publish", "pages", "status"):
        assert hosted(run.runs_on[job])


def test_release_with_one_failed_cuda_build(tmp_path: Path, reference: dict[str, Any]) -> None:
    failed = "torch2.11.0-cu130-cp312"
    run, status = _release(
        tmp_path,
        reference,
        outcome={"build-cuda": "failure"},
        failed={failed: "nvcc: error\nmore"},
    )
    # only the CUDA smoke job waits on the CUDA builds: the CPU wheels are still tested
    assert run.results["smoke-cpu"] == "success"
    assert run.results["smoke-cuda"] == "skipped"
    # the publish is gated on every family: nothing goes out, and the check is red
    assert run.results["prepare"] == run.results["publish"] == run.results["pages"] == "skipped"
    assert run.results["status"] == "failure"
    bad = {j.job: j.why for j in status.jobs if not j.ok}
    assert bad["build-cuda"] == "failure"
    assert bad["prepare"] == bad["publish"] == bad["pages"] == "had work but did not run"
    text = status_markdown(status)
    assert (
        f"`{failed}`: build failed: nvcc: error; reproduce: `nox -s build -- --profile release "
        f"--only {failed} --backend docker --offline`"
    ) in text
    assert len(status.failed) == 1  # the other CUDA legs built
    assert "Re-run failed jobs" in text


def test_release_of_a_family_without_smoke_runner_when_asked(
    tmp_path: Path, reference: dict[str, Any]
) -> None:
    run, status = _release(tmp_path, reference, "--unsmoked")
    assert run.results["build-rocm"] == "success"
    assert "smoke-rocm" not in run.results  # no runner, no job
    assert run.results["publish"] == run.results["pages"] == "success"
    assert status.ok and not status.not_run


def test_release_after_a_failed_tag_run_does_nothing(reference: dict[str, Any]) -> None:
    failed = {**PUSH, "event": {**PUSH["event"], "workflow_run": {"conclusion": "failure"}}}
    run = simulate(reference[layout.RELEASE_WORKFLOW], github=failed)
    assert run.ran() == {"status"}  # which fails: the plan did not succeed
    statuses = run_status(workflow="release", needs={}, entries=None, reports=Path("/none"))
    assert not statuses.ok


def test_a_skipped_index_preview_is_not_a_pass(tmp_path: Path, reference: dict[str, Any]) -> None:
    workflow = reference[layout.PR_WORKFLOW]
    outputs, entries = Plan(tmp_path, REPO / "matrix.yaml", workflow, layout.PR_NAME).outputs()
    decide = _status_decider(layout.PR_NAME, entries, tmp_path / "reports")
    pr = {"event_name": "pull_request", "repository": "example/bt-scatter"}
    run = simulate(
        workflow, github=pr, plan_outputs=outputs, outcome={"smoke-cpu": "failure"}, decide=decide
    )
    assert run.results["index"] == "skipped"
    assert run.results["status"] == "failure"
    verdict = {j.job: j for j in decide.verdicts["status"].jobs}  # type: ignore[attr-defined]
    assert verdict["index"].why == "had work but did not run"


@pytest.mark.parametrize("source", ["reference", "large"])
def test_fork_pull_requests_never_reach_self_hosted_runners(
    tmp_path: Path, reference: dict[str, Any], source: str
) -> None:
    matrix = (
        REPO / "matrix.yaml"
        if source == "reference"
        else _project(tmp_path, FIXTURES / "matrix-large.yaml")
    )
    files = reference if source == "reference" else _workflows(matrix)
    pr_workflow = files[layout.PR_WORKFLOW]
    outputs, _ = Plan(tmp_path, matrix, pr_workflow, layout.PR_NAME).outputs()
    fork = {"event_name": "pull_request", "repository": "acme/ext"}
    run = simulate(pr_workflow, github=fork, plan_outputs=outputs)
    assert run.results["status"] == "success"
    # every job of pull-request.yml that runs is on a GitHub-hosted runner, builds included
    for job, label in run.runs_on.items():
        if label == "${{ matrix.runner }}":
            rows = json.loads(outputs[layout.output_name(job)])["include"]
            assert rows and all(r["runner"] in HOSTED for r in rows), job
        else:
            assert hosted(label), (job, label)
    # the pull request's self-hosted follow-up does nothing for a fork, and posts nothing
    follow_up = files[layout.SELF_HOSTED_WORKFLOW]
    from_fork = {
        "event_name": "workflow_run",
        "repository": "acme/ext",
        "event": {
            "workflow_run": {
                "event": "pull_request",
                "conclusion": "success",
                "head_repository": {"full_name": "mallory/ext"},
            }
        },
    }
    assert simulate(follow_up, github=from_fork).ran() == set()
    # a branch of the repository gets its GPU smoke tests there, and a verdict
    from_branch = {**from_fork, "event": {"workflow_run": {
        **from_fork["event"]["workflow_run"], "head_repository": {"full_name": "acme/ext"}
    }}}  # fmt: skip
    sh_outputs, _ = Plan(tmp_path, matrix, follow_up, layout.SELF_HOSTED_NAME).outputs(
        "--sha", "2" * 40
    )
    run = simulate(follow_up, github=from_branch, plan_outputs=sh_outputs)
    assert "smoke-cuda" in run.ran() and "status" in run.ran()
    assert all(not hosted(label) for j, label in run.runs_on.items() if j.startswith("smoke"))


def test_large_matrix_builds_self_hosted_cuda_outside_pull_requests(tmp_path: Path) -> None:
    files = _workflows(_project(tmp_path, FIXTURES / "matrix-large.yaml"))
    pr = files[layout.PR_WORKFLOW]["jobs"]
    follow_up = files[layout.SELF_HOSTED_WORKFLOW]["jobs"]
    # the CUDA build runner is self-hosted: never in the workflow a fork can edit
    assert "build-cuda" not in pr and "build-cuda" in follow_up
    assert follow_up["smoke-cuda"]["needs"] == ["plan", "build-cuda"]
    # ROCm builds on hosted runners in the pull request's run, smoke-tested after it
    assert "build-rocm" in pr and "build-rocm" not in follow_up
    rocm = follow_up["smoke-rocm"]
    assert rocm["needs"] == ["plan"] and rocm["permissions"]["actions"] == "read"
    download = next(s for s in rocm["steps"] if "pull request's run" in s["name"])
    assert download["with"]["run-id"] == "${{ github.event.workflow_run.id }}"
    assert download["if"] == "matrix.wheels_from == 'pull-request'"
