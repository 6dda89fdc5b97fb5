"""`buildtools ci`: the generated workflows' job graph, safety rules, drift check, the plan
job's matrix, the site restore, the pins and the YAML writer (no process is started)."""

from __future__ import annotations

import fnmatch
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures.crafted import make_wheel
from fixtures.factories import make_cell, make_job
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from buildtools.ci import layout
from buildtools.ci.github import check_files, generate, write_files
from buildtools.ci.layout import GENERATED_MARKER
from buildtools.ci.matrix import (
    MAX_MATRIX_JOBS,
    github_outputs,
    job_globs,
    matrix_entries,
    summary_markdown,
)
from buildtools.ci.pins import load_pins, newest_release, parse_ls_remote
from buildtools.ci.runners import is_hosted
from buildtools.ci.site import pages_subpath, restore_site
from buildtools.ci.yamlwriter import Pinned, dump
from buildtools.cli.build import reproduce_command
from buildtools.cli.main import _extra_verbs, build_parser, main
from buildtools.errors import CiDriftError, ExitCode, KnowledgeError, PlanError, PublishError
from buildtools.index.manifest import read_manifest
from buildtools.index.publish import publish
from buildtools.index.settings import IndexSettings
from buildtools.index.wheels import read_wheel
from buildtools.knowledge import load_knowledge
from buildtools.matrix.config import load_matrix
from buildtools.planner import Plan, plan

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ci"
KB = load_knowledge()
PINS = load_pins()
SHA_USES = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+@[0-9a-f]{40}$")


def load(text: str) -> Any:
    return YAML(typ="safe", pure=True).load(text)


def project(
    tmp_path: Path, source: Path, name: str = "matrix.yaml", text: str | None = None
) -> Path:
    """A repository in tmp_path holding `source` (a matrix.yaml) as `name`."""
    (tmp_path / ".git").mkdir(exist_ok=True)
    dest = tmp_path / name
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text if text is not None else source.read_text(encoding="utf-8"))
    return dest


def workflows(matrix: Path) -> dict[str, Any]:
    ci = generate(matrix)
    return {g.path: load(g.text) for g in ci.files}


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    return workflows(REPO / "matrix.yaml")


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("large")
    return workflows(project(root, FIXTURES / "matrix-large.yaml"))


def jobs(files: dict[str, Any], which: str) -> dict[str, Any]:
    path = layout.RELEASE_WORKFLOW if which == "release" else layout.PR_WORKFLOW
    result: dict[str, Any] = files[path]["jobs"]
    return result


def steps(files: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path in (layout.RELEASE_WORKFLOW, layout.PR_WORKFLOW):
        for name, job in files[path]["jobs"].items():
            for step in job.get("steps", []):
                yield path, name, step


# -- the job graph ------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["release", "pr"])
def test_reference_graph(reference: dict[str, Any], which: str) -> None:
    graph = jobs(reference, which)
    assert graph["build"]["needs"] == "plan"
    # the reference matrix has smoke runners for cpu and cuda, none for rocm; and ARM ones
    # for its aarch64 cells (Grace Hopper: the GH200 runner)
    smokes = {"smoke-cpu", "smoke-cuda", "smoke-cpu-aarch64", "smoke-cuda-aarch64"}
    assert {j for j in graph if j.startswith("smoke-")} == smokes
    assert graph["smoke-cuda"]["runs-on"] == ["self-hosted", "linux", "gpu-h100"]
    assert graph["smoke-cpu"]["runs-on"] == "ubuntu-24.04"
    assert graph["smoke-cuda-aarch64"]["runs-on"] == ["self-hosted", "linux", "arm64", "gh200"]
    assert graph["smoke-cpu-aarch64"]["runs-on"] == "ubuntu-24.04-arm"
    for family in ("cpu", "cuda", "cpu-aarch64", "cuda-aarch64"):
        smoke = graph[f"smoke-{family}"]
        assert smoke["needs"] == ["plan", "build"]
        assert f"needs.plan.outputs.has_{family} == 'true'" in smoke["if"]
        assert smoke["strategy"]["matrix"] == (
            f"${{{{ fromJSON(needs.plan.outputs.smoke_{family}) }}}}"
        )
    index = graph["index"]
    assert set(index["needs"]) == {"plan", "build", *smokes}
    assert "needs.build.result == 'success'" in index["if"]
    for family in ("cpu", "cuda", "cpu-aarch64", "cuda-aarch64"):
        assert f"needs.smoke-{family}.result == 'success'" in index["if"]


def test_release_publishes_only_after_every_smoke_job(reference: dict[str, Any]) -> None:
    graph = jobs(reference, "release")
    cond = graph["index"]["if"]
    # a skipped smoke job lets the index through only when the plan had nothing to test
    for family in ("cpu", "cuda"):
        assert (
            f"(needs.smoke-{family}.result == 'success' || (needs.smoke-{family}.result == "
            f"'skipped' && needs.plan.outputs.has_{family} != 'true'))"
        ) in cond
    assert cond.startswith("${{ !cancelled() && ")
    # the deploy job runs after the index only; publishing is gated by --require-smoke
    assert graph["deploy"]["needs"] == "index"
    index_run = next(
        s["run"] for s in graph["index"]["steps"] if "nox -s index" in s.get("run", "")
    )
    assert "--require-smoke" in index_run
    assert 'if [ "${#gates[@]}" -eq 0 ]' in index_run  # no report: nothing is published
    assert "wheels=()" in index_run


def test_large_matrix_graph(large: dict[str, Any]) -> None:
    graph = jobs(large, "release")
    # cuda and rocm have GPU runners, cpu has none: no smoke job for it, and the header says
    # its wheels are never published
    assert {j for j in graph if j.startswith("smoke-")} == {"smoke-cuda", "smoke-rocm"}
    assert graph["smoke-rocm"]["runs-on"] == ["self-hosted", "linux", "x64", "gpu-mi300x"]
    assert set(graph["index"]["needs"]) == {"plan", "build", "smoke-cuda", "smoke-rocm"}
    assert "smoke-cpu" not in graph["index"]["if"]
    pr = jobs(large, "pr")
    assert {j for j in pr if j.startswith("smoke-")} == {"smoke-cuda", "smoke-rocm"}


def test_large_matrix_header_names_unsmoked_families(tmp_path: Path) -> None:
    ci = generate(project(tmp_path, FIXTURES / "matrix-large.yaml"))
    release = next(g.text for g in ci.files if g.path == layout.RELEASE_WORKFLOW)
    assert "not smoke-tested, so never published: cpu (no runners.smoke.cpu)" in release
    assert "profile `release`, 66 cell(s) in 66 build job(s)" in release
    assert "smoke-tested on: cuda (self-hosted, linux, x64, gpu-a100); rocm" in release


def test_pull_requests_from_forks_never_reach_self_hosted_runners(
    reference: dict[str, Any], large: dict[str, Any]
) -> None:
    fork_guard = "github.event.pull_request.head.repo.full_name == github.repository"
    assert fork_guard in jobs(reference, "pr")["smoke-cuda"]["if"]
    assert fork_guard not in jobs(reference, "pr")["smoke-cpu"]["if"]  # a hosted runner
    assert fork_guard in jobs(large, "pr")["smoke-rocm"]["if"]
    for files in (reference, large):
        for name, job in jobs(files, "release").items():
            assert fork_guard not in str(job.get("if", "")), name


def test_pr_workflow_runs_the_drift_check_first(reference: dict[str, Any]) -> None:
    graph = jobs(reference, "pr")
    assert graph["plan"]["needs"] == "drift"
    runs = [s["run"] for s in graph["drift"]["steps"] if "run" in s]
    assert any("nox -s ci -- --check" in r for r in runs)
    assert "deploy" not in graph
    assert reference[layout.PR_WORKFLOW]["on"] == {"pull_request": {}}
    index_run = next(
        s["run"] for s in graph["index"]["steps"] if "nox -s index" in s.get("run", "")
    )
    assert "--base-url ''" in index_run  # the preview links relatively


def test_release_triggers_and_dispatch_inputs(reference: dict[str, Any]) -> None:
    on = reference[layout.RELEASE_WORKFLOW]["on"]
    assert on["push"] == {"tags": ["v*"]}
    inputs = on["workflow_dispatch"]["inputs"]
    assert inputs["only"]["type"] == "string"
    assert inputs["publish"]["type"] == "boolean"
    plan_step = next(
        s for s in jobs(reference, "release")["plan"]["steps"] if s.get("id") == "plan"
    )
    # the input reaches the script through env, never interpolated into it
    assert plan_step["env"] == {"BT_ONLY": "${{ inputs.only }}"}
    assert "nox -s ci -- matrix --profile release" in plan_step["run"]


def test_no_artifact_deploy_without_base_url(tmp_path: Path) -> None:
    text = (
        (REPO / "matrix.yaml")
        .read_text()
        .replace("  base_url: https://example.github.io/bt-scatter/whl\n", "")
    )
    files = workflows(project(tmp_path, REPO / "matrix.yaml", text=text))
    graph = jobs(files, "release")
    assert "deploy" not in graph
    uses = [str(s.get("uses", "")) for _, _, s in steps(files)]
    assert not any("pages" in u for u in uses)
    assert not any("restore-site" in s.get("run", "") for _, _, s in steps(files))


# -- safe by construction -------------------------------------------------------------------


@pytest.mark.parametrize("files_name", ["reference", "large"])
def test_every_action_is_pinned_by_sha_with_its_version(
    files_name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    files = request.getfixturevalue(files_name)
    seen = set()
    for path, job, step in steps(files):
        if "uses" in step:
            assert SHA_USES.match(step["uses"]), (path, job, step["uses"])
            seen.add(step["uses"].split("@")[0])
    assert seen == set(PINS.actions)  # every pinned action is used, nothing unpinned is
    # and the text says which release each SHA is
    source = (
        generate(REPO / "matrix.yaml")
        if files_name == "reference"
        else generate(project(tmp_path, FIXTURES / "matrix-large.yaml"))
    )
    for gen in source.files:
        for line in gen.text.splitlines():
            if "uses:" in line:
                m = re.search(r"uses: ([^@\s]+)@([0-9a-f]{40}) # (v\d+\.\d+\.\d+)$", line)
                assert m, line
                pin = PINS.actions[m.group(1)]
                assert (m.group(2), m.group(3)) == (pin.sha, pin.version)


@pytest.mark.parametrize("files_name", ["reference", "large"])
def test_least_privilege_permissions(files_name: str, request: pytest.FixtureRequest) -> None:
    files = request.getfixturevalue(files_name)
    for path in (layout.RELEASE_WORKFLOW, layout.PR_WORKFLOW):
        assert files[path]["permissions"] == {}
        for name, job in files[path]["jobs"].items():
            perms = job["permissions"]
            if name == "deploy":
                assert perms == {"pages": "write", "id-token": "write"}
                assert job["environment"]["name"] == "github-pages"
            else:
                assert perms == {"contents": "read"}, (path, name)


@pytest.mark.parametrize("files_name", ["reference", "large"])
def test_no_expression_inside_run_scripts(files_name: str, request: pytest.FixtureRequest) -> None:
    files = request.getfixturevalue(files_name)
    runs = 0
    for path, job, step in steps(files):
        if "run" in step:
            runs += 1
            assert "${{" not in step["run"], (path, job, step["name"])
            assert step["run"].startswith("set -euo pipefail") or step["run"].startswith(
                "python -m pip install nox=="
            )
    assert runs > 10


@pytest.mark.parametrize("files_name", ["reference", "large"])
def test_timeouts_concurrency_and_checkouts(
    files_name: str, request: pytest.FixtureRequest
) -> None:
    files = request.getfixturevalue(files_name)
    for path in (layout.RELEASE_WORKFLOW, layout.PR_WORKFLOW):
        doc = files[path]
        assert "group" in doc["concurrency"]
        for name, job in doc["jobs"].items():
            assert "timeout-minutes" in job, (path, name)
        for step in (s for j in doc["jobs"].values() for s in j["steps"]):
            if "actions/checkout@" in str(step.get("uses", "")):
                assert step["with"]["persist-credentials"] is False
    release = files[layout.RELEASE_WORKFLOW]
    assert release["concurrency"]["cancel-in-progress"] is False  # never cancel a publish
    assert files[layout.PR_WORKFLOW]["concurrency"]["cancel-in-progress"] is True


def test_cache_key_comes_from_the_plan(reference: dict[str, Any]) -> None:
    build = jobs(reference, "release")["build"]
    cache = next(s for s in build["steps"] if "actions/cache@" in str(s.get("uses", "")))
    assert cache["with"]["key"] == "${{ matrix.cache_key }}"
    assert build["timeout-minutes"] == "${{ matrix.timeout }}"
    assert build["runs-on"] == "${{ matrix.runner }}"


@pytest.mark.parametrize("files_name", ["reference", "large"])
def test_every_job_step_is_a_nox_session(files_name: str, request: pytest.FixtureRequest) -> None:
    files = request.getfixturevalue(files_name)
    for path in (layout.RELEASE_WORKFLOW, layout.PR_WORKFLOW):
        for name, job in files[path]["jobs"].items():
            if name == "deploy":
                continue
            runs = [s["run"] for s in job["steps"] if "run" in s and "nox==" not in s["run"]]
            if name == "build":
                runs = [r for r in runs if "nox -s" in r]
            assert runs and all("nox -s " in r for r in runs), (path, name)
    build = jobs(files, "release")["build"]
    script = next(s for s in build["steps"] if s.get("name") == "Build (nox -s build)")
    assert 'nox -s build -- "${args[@]}"' in script["run"]
    assert "$GITHUB_STEP_SUMMARY" in script["run"]
    assert "$BT_REPRODUCE" in script["run"]


# -- determinism and drift ------------------------------------------------------------------


def test_committed_workflows_match_the_reference_matrix() -> None:
    ci = generate(REPO / "matrix.yaml")
    assert check_files(ci) == [], "run `nox -s ci` and commit .github/"
    assert (
        main(["ci", "github", "--matrix", str(REPO / "matrix.yaml"), "--check"], out=io.StringIO())
        == 0
    )


def test_generation_is_deterministic(tmp_path: Path) -> None:
    first = generate(project(tmp_path, FIXTURES / "matrix-large.yaml"))
    second = generate(tmp_path / "matrix.yaml")
    assert [(g.path, g.text) for g in first.files] == [(g.path, g.text) for g in second.files]
    for gen in first.files:
        assert gen.text.startswith(f"# {GENERATED_MARKER} from matrix.yaml")
        assert "nox -s ci" in gen.text.splitlines()[1] or gen.path == layout.ACTIONLINT_CONFIG
        assert gen.text.endswith("\n") and not gen.text.endswith("\n\n")
        assert all(line == line.rstrip() for line in gen.text.splitlines())


def test_drift_check_names_the_files_and_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix = project(tmp_path, REPO / "matrix.yaml")
    out = io.StringIO()
    assert main(["ci", "github", "--matrix", str(matrix)], out=out) == 0
    assert "wrote      .github/workflows/release.yml" in out.getvalue()
    assert main(["ci", "github", "--matrix", str(matrix), "--check"], out=io.StringIO()) == 0
    # a ROCm smoke runner appears in matrix.yaml: the workflows no longer match
    matrix.write_text(
        matrix.read_text().replace(
            "smoke: {cpu: ubuntu-24.04,",
            "smoke: {rocm: [self-hosted, gpu-mi300x], cpu: ubuntu-24.04,",
        )
    )
    code = main(["ci", "github", "--matrix", str(matrix), "--check"], out=io.StringIO())
    assert code == ExitCode.CI_DRIFT == 14
    err = capsys.readouterr().err
    assert "no longer match matrix.yaml" in err
    assert ".github/workflows/release.yml: differs" in err
    assert ".github/actionlint.yaml: differs" in err
    assert "+  smoke-rocm:" in err
    assert "regenerate them with `nox -s ci`" in err
    # regenerating fixes it
    assert main(["ci", "github", "--matrix", str(matrix)], out=io.StringIO()) == 0
    assert main(["ci", "github", "--matrix", str(matrix), "--check"], out=io.StringIO()) == 0


def test_drift_check_reports_missing_files(tmp_path: Path) -> None:
    ci = generate(project(tmp_path, REPO / "matrix.yaml"))
    assert check_files(ci) == [f"{g.path}: missing" for g in ci.files]


def test_hand_written_workflows_are_not_overwritten(tmp_path: Path) -> None:
    matrix = project(tmp_path, REPO / "matrix.yaml")
    mine = tmp_path / ".github" / "workflows" / "release.yml"
    mine.parent.mkdir(parents=True)
    mine.write_text("name: my release\n")
    with pytest.raises(CiDriftError, match="not written by `buildtools ci github`"):
        write_files(generate(matrix))
    assert mine.read_text() == "name: my release\n"
    write_files(generate(matrix), force=True)
    assert mine.read_text().startswith(f"# {GENERATED_MARKER}")


def test_matrix_in_a_subdirectory(tmp_path: Path) -> None:
    matrix = project(tmp_path, REPO / "matrix.yaml", name="packaging/matrix.yaml")
    ci = generate(matrix)
    assert ci.matrix == "packaging/matrix.yaml"
    files = {g.path: load(g.text) for g in ci.files}
    runs = [s.get("run", "") for _, _, s in steps(files)]
    assert any(
        "nox -s ci -- matrix --matrix packaging/matrix.yaml --profile release" in r for r in runs
    )
    assert any("nox -s ci -- --matrix packaging/matrix.yaml --check" in r for r in runs)
    assert any("args=(--matrix packaging/matrix.yaml --profile release)" in r for r in runs)
    assert any(
        "nox -s smoke -- wheelhouse --matrix packaging/matrix.yaml --accelerator cuda" in r
        for r in runs
    )


def test_missing_ci_profile_is_a_config_error(tmp_path: Path) -> None:
    text = (
        (REPO / "matrix.yaml").read_text().replace("  release:\n    description: every cell\n", "")
    )
    matrix = project(tmp_path, REPO / "matrix.yaml", text=text)
    code = main(["ci", "github", "--matrix", str(matrix)], out=io.StringIO())
    assert code == ExitCode.CONFIG


# -- the plan job's matrix ------------------------------------------------------------------


def _plan(matrix: Path, profile: str, only: tuple[str, ...] = ()) -> Plan:
    return plan(
        load_matrix(matrix, knowledge=KB), KB, host_python="3.12", profile=profile, only=only
    )


def test_matrix_entries_reproduce_the_build_command() -> None:
    full = _plan(REPO / "matrix.yaml", "release")
    entries = matrix_entries(full, full, profile="release", matrix="matrix.yaml", ci_python="3.12")
    assert len(entries) == len(full.jobs) == 30  # 28 x86_64 + 2 aarch64
    parser = build_parser(_extra_verbs())
    for entry in entries:
        argv = ["build", "--profile", "release"]
        for glob in entry.only:
            argv += ["--only", glob]
        argv += ["--backend", "docker"]
        # the summary's line is what `buildtools build` itself prints and records
        assert entry.reproduce == reproduce_command(parser.parse_args(argv))
        assert entry.python_versions.splitlines()[-1] == "3.12"
    first = entries[0]
    assert first.reproduce == (
        "nox -s build -- --profile release --only torch2.11.0-cpu-cp310 --backend docker"
    )
    assert first.python_versions == "3.10\n3.12"
    assert first.timeout == 60
    assert first.smoke == "nox -s smoke -- wheelhouse --accelerator cpu --out smoke-results"
    rocm = next(e for e in entries if e.family == "rocm")
    assert rocm.smoke == "" and rocm.smoke_runner is None and rocm.timeout == 240


def test_cache_key_covers_the_toolchain(tmp_path: Path) -> None:
    full = _plan(REPO / "matrix.yaml", "release")
    entries = {
        e.id: e
        for e in matrix_entries(
            full, full, profile="release", matrix="matrix.yaml", ci_python="3.12"
        )
    }
    e = entries["torch2.11.0-cu130-cp312"]
    assert (
        e.cache_key.startswith(e.cache_restore)
        and e.cache_restore == "buildtools-torch2.11.0-cu130-cp312-"
    )
    assert len({x.cache_key for x in entries.values()}) == len(entries)
    # another arch list (a toolchain input) gives another key
    text = (
        (REPO / "matrix.yaml")
        .read_text()
        .replace('arch_list: "7.5;8.0;8.6;9.0;10.0;12.0+PTX"', 'arch_list: "8.0;9.0"')
    )
    other = tmp_path / "matrix.yaml"
    other.write_text(text)
    p2 = _plan(other, "release")
    again = {
        x.id: x
        for x in matrix_entries(p2, p2, profile="release", matrix="matrix.yaml", ci_python="3.12")
    }
    assert again["torch2.11.0-cu130-cp312"].cache_key != e.cache_key
    assert again["torch2.11.0-cpu-cp310"].cache_key == entries["torch2.11.0-cpu-cp310"].cache_key


def test_abi3_jobs_get_one_glob_that_selects_exactly_their_cells(tmp_path: Path) -> None:
    text = (FIXTURES / "matrix-large.yaml").read_text().replace("abi: per-python", "abi: abi3")
    matrix = project(tmp_path, FIXTURES / "matrix-large.yaml", text=text)
    full = _plan(matrix, "release")
    entries = matrix_entries(full, full, profile="release", matrix="matrix.yaml", ci_python="3.12")
    ids = [c.id for c in full.cells]
    for entry, job in zip(entries, full.jobs, strict=True):
        assert len(entry.only) == 1
        assert {c for c in ids if fnmatch.fnmatchcase(c, entry.only[0])} == set(job.cell_ids)
    e = next(x for x in entries if x.id == "torch2.13.0-cu130-cp310-abi3")
    assert e.only == ("torch2.13.0-cu130-*",)
    assert e.python_versions == "3.10\n3.11\n3.13\n3.12"


def test_job_globs_fall_back_to_cell_ids() -> None:
    cells = tuple(make_cell(accelerator="cu130", python=p) for p in ("3.10", "3.12"))
    job = make_job(cells=cells, abi="abi3")
    universe = [c.id for c in cells]
    assert job_globs(job, universe) == ("torch2.13.0-cu130-*",)
    # an aarch64 cell of the same torch × accelerator would match the glob: list the ids
    assert job_globs(job, [*universe, "torch2.13.0-cu130-cp310-aarch64"]) == job.cell_ids


def test_dispatch_only_narrows_the_matrix() -> None:
    full = _plan(REPO / "matrix.yaml", "release")
    selected = _plan(REPO / "matrix.yaml", "release", only=("torch2.11.0-cu130-*",))
    entries = matrix_entries(
        selected, full, profile="release", matrix="matrix.yaml", ci_python="3.12"
    )
    assert [e.id for e in entries] == [
        "torch2.11.0-cu130-cp310",
        "torch2.11.0-cu130-cp311",
        "torch2.11.0-cu130-cp312-aarch64",
        "torch2.11.0-cu130-cp312",
        "torch2.11.0-cu130-cp313",
    ]
    outputs = github_outputs(entries)
    assert outputs["has_cuda"] == "true"
    assert outputs["has_cpu"] == "false"  # none selected
    assert outputs["has_rocm"] == "false"
    assert json.loads(outputs["smoke_cpu"]) == {"include": []}
    assert len(json.loads(outputs["smoke_cuda"])["include"]) == 4  # x86 only
    # the aarch64 wheel is smoked on the GH200 runner, in its own job
    assert outputs["has_cuda-aarch64"] == "true" and "has_cpu-aarch64" not in outputs
    (arm,) = json.loads(outputs["smoke_cuda-aarch64"])["include"]
    assert arm["id"] == "torch2.11.0-cu130-cp312-aarch64" and arm["platform"] == "linux_aarch64"
    assert arm["runner"] == "ubuntu-24.04-arm"
    assert all("\n" not in v for v in outputs.values())


def test_outputs_smoke_only_families_with_runners() -> None:
    full = _plan(REPO / "matrix.yaml", "release")
    outputs = github_outputs(
        matrix_entries(full, full, profile="release", matrix="matrix.yaml", ci_python="3.12")
    )
    build = json.loads(outputs["build"])["include"]
    assert {e["family"] for e in build} == {"cpu", "cuda", "rocm"}
    assert outputs["has_rocm"] == "false"  # rocm wheels are built, never smoke-tested
    assert {e["family"] for e in json.loads(outputs["smoke_cuda"])["include"]} == {"cuda"}
    assert isinstance(build[0]["runner"], str)
    cuda = next(e for e in build if e["family"] == "cuda")
    assert cuda["runner"] == "ubuntu-24.04"  # builds run on CPU runners


def test_too_many_jobs_for_one_matrix() -> None:
    full = _plan(REPO / "matrix.yaml", "release")
    many = Plan(
        profile="release",
        cells=full.cells,
        jobs=full.jobs * (MAX_MATRIX_JOBS // len(full.jobs) + 1),
        removed=(),
        excluded=0,
    )
    with pytest.raises(PlanError, match="at most 256"):
        matrix_entries(many, full, profile="release", matrix="matrix.yaml", ci_python="3.12")


def test_cmd_matrix_writes_outputs_and_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setattr("buildtools.planning.host_python", lambda: "3.12")
    monkeypatch.setattr("buildtools.cli.ci.host_python", lambda: "3.12")
    gh_out, summary, plan_json = tmp_path / "out", tmp_path / "summary.md", tmp_path / "plan.json"
    code = main(
        [
            "ci", "matrix", "--profile", "release", "--only", "torch2.13.0-cu130-cp312",
            "--github-output", str(gh_out), "--summary", str(summary), "--plan-json", str(plan_json),
        ],
        out=io.StringIO(),
    )  # fmt: skip
    assert code == 0
    outputs = dict(line.split("=", 1) for line in gh_out.read_text().splitlines())
    build = json.loads(outputs["build"])["include"]
    assert [e["id"] for e in build] == ["torch2.13.0-cu130-cp312"]
    assert build[0]["only"] == "torch2.13.0-cu130-cp312"
    text = summary.read_text()
    assert "`nox -s plan -- --profile release --only torch2.13.0-cu130-cp312`" in text
    assert (
        "nox -s build -- --profile release --only torch2.13.0-cu130-cp312 --backend docker" in text
    )
    assert json.loads(plan_json.read_text())["include"][0]["id"] == "torch2.13.0-cu130-cp312"


def test_summary_says_which_wheels_are_never_published() -> None:
    full = _plan(REPO / "matrix.yaml", "release")
    entries = matrix_entries(full, full, profile="release", matrix="matrix.yaml", ci_python="3.12")
    text = summary_markdown(entries, profile="release", matrix="matrix.yaml", only=())
    assert "No smoke runner for `rocm` (`runners.smoke.rocm`)" in text
    assert "| `torch2.13.0-rocm7.2-cp312` |" in text and "none: not published" in text


def test_current_torch_never_reaches_ci() -> None:
    cell = make_cell(torch="2.13.0+cpu", current=True)
    job = make_job(cells=(cell,), abi="abi3", torch_source="current")
    p = Plan(profile="release", cells=(cell,), jobs=(job,), removed=(), excluded=0)
    with pytest.raises(PlanError, match="torch: current"):
        matrix_entries(p, p, profile="release", matrix="matrix.yaml", ci_python="3.12")


# -- restoring the published site -----------------------------------------------------------


class DirFetcher:
    """Serves a directory at a URL; missing files answer 404."""

    def __init__(self, base: str, root: Path) -> None:
        self.base, self.root, self.urls = base, root, []

    def fetch(self, url: str, dest: Path) -> bool:
        from urllib.parse import unquote

        self.urls.append(url)
        path = self.root / unquote(url.removeprefix(self.base + "/"))
        if not path.is_file():
            return False
        dest.write_bytes(path.read_bytes())
        return True


def _wheel(directory: Path, version: str) -> Path:
    record = json.dumps(
        {"schema": 1, "torch": "2.13.0+cpu", "accelerator": "cpu", "cxx11_abi": True}
    ).encode()
    return make_wheel(
        directory,
        name="bt_scatter",
        version=version,
        tag="cp312-cp312-manylinux_2_28_x86_64",
        files={"bt_scatter/__init__.py": version.encode()},
        requires=["torch==2.13.*"],
        dist_info_files={"buildtools.json": record},
    )


def test_restore_then_publish_keeps_every_published_wheel(tmp_path: Path) -> None:
    base = "https://acme.github.io/proj/whl"
    served = tmp_path / "served"
    old = _wheel(tmp_path / "w1", "0.1.0+pt213cpu")
    publish(served, [read_wheel(old)], IndexSettings(base_url=base), KB)
    fetcher = DirFetcher(base, served)
    restored = restore_site(base, tmp_path / "pages" / "whl", fetcher=fetcher)
    assert restored.wheels == 1 and not restored.first_publish
    assert (
        f"{base}/wheels/bt_scatter-0.1.0%2Bpt213cpu-cp312-cp312-manylinux_2_28_x86_64.whl"
        in fetcher.urls
    )
    new = _wheel(tmp_path / "w2", "0.2.0+pt213cpu")
    publish(restored.site, [read_wheel(new)], IndexSettings(base_url=base), KB)
    names = {w.filename for w in read_manifest(restored.site).wheels}
    assert names == {old.name, new.name}


def test_restore_first_publish_and_damaged_sites(tmp_path: Path) -> None:
    base = "https://acme.github.io/proj/whl"
    empty = restore_site(base, tmp_path / "a", fetcher=DirFetcher(base, tmp_path / "nothing"))
    assert empty.first_publish and not any((tmp_path / "a").iterdir())
    served = tmp_path / "served"
    wheel = _wheel(tmp_path / "w", "0.1.0+pt213cpu")
    publish(served, [read_wheel(wheel)], IndexSettings(base_url=base), KB)
    # a wheel whose bytes differ from what index.json records stops the publish
    (served / "wheels" / wheel.name).write_bytes(b"tampered")
    with pytest.raises(PublishError, match="sha256"):
        restore_site(base, tmp_path / "b", fetcher=DirFetcher(base, served))
    (served / "wheels" / wheel.name).unlink()
    with pytest.raises(PublishError, match="published site is damaged"):
        restore_site(base, tmp_path / "c", fetcher=DirFetcher(base, served))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("x")
    with pytest.raises(PublishError, match="not empty"):
        restore_site(base, tmp_path / "d", fetcher=DirFetcher(base, served))


def test_restore_site_command_writes_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from buildtools.cli.ci import cmd_restore_site

    monkeypatch.chdir(REPO)
    monkeypatch.setenv("GITHUB_REPOSITORY", "example/bt-scatter")
    gh_out = tmp_path / "out"
    args = build_parser(_extra_verbs()).parse_args(
        ["ci", "restore-site", "--site", str(tmp_path / "_site"), "--github-output", str(gh_out)]
    )
    base = "https://example.github.io/bt-scatter/whl"
    out = io.StringIO()
    assert cmd_restore_site(args, out, fetcher=DirFetcher(base, tmp_path / "none")) == 0
    assert gh_out.read_text() == f"path={tmp_path / '_site' / 'whl'}\n"
    assert "first publish" in out.getvalue()


@pytest.mark.parametrize(
    ("url", "repo", "want"),
    [
        ("https://example.github.io/bt-scatter/whl", "example/bt-scatter", "whl"),
        ("https://Example.github.io/bt-scatter", "example/bt-scatter", ""),
        ("https://example.github.io/whl", "example/example.github.io", "whl"),
        ("https://wheels.example.org/torch/whl/", "example/bt-scatter", "torch/whl"),
        ("https://example.github.io/bt-scatter/whl", None, "whl"),
    ],
)
def test_pages_subpath(url: str, repo: str | None, want: str) -> None:
    assert pages_subpath(url, repo) == want


def test_pages_subpath_of_another_owner_is_refused() -> None:
    with pytest.raises(PublishError, match="this repository's Pages URL"):
        pages_subpath("https://upstream.github.io/proj/whl", "fork-owner/proj")


# -- pins -----------------------------------------------------------------------------------


def test_pins_are_full_shas_with_versions_and_sources() -> None:
    for name, pin in PINS.actions.items():
        assert re.fullmatch(r"[0-9a-f]{40}", pin.sha), name
        assert re.fullmatch(r"v\d+\.\d+\.\d+", pin.version), name
        assert pin.source and pin.released
    assert PINS.uses("actions/checkout") == Pinned(
        f"actions/checkout@{PINS.actions['actions/checkout'].sha}",
        PINS.actions["actions/checkout"].version,
    )


def test_bad_pins_file(tmp_path: Path) -> None:
    text = (REPO / "buildtools" / "data" / "actions.yaml").read_text()
    bad = tmp_path / "actions.yaml"
    bad.write_text(text.replace("sha: 3d3c42e5aac5ba805825da76410c181273ba90b1", "sha: v7"))
    with pytest.raises(KnowledgeError, match="not a full commit SHA"):
        load_pins(bad)
    bad.write_text(text.replace("  actions/cache:\n", "  actions/cache-renamed:\n"))
    with pytest.raises(KnowledgeError, match="no pin for actions/cache"):
        load_pins(bad)


def test_ls_remote_parsing_peels_annotated_tags() -> None:
    a, b, c = ("a" * 40, "b" * 40, "c" * 40)
    text = f"{a}\trefs/tags/v4.2.2\n{b}\trefs/tags/v4.10.0\n{c}\trefs/tags/v4.10.0^{{}}\n{a}\trefs/heads/main\n"
    tags = parse_ls_remote(text)
    assert tags == {"v4.2.2": a, "v4.10.0": c}
    assert newest_release(tags) == ("v4.10.0", c)
    assert newest_release(tags, major=5) is None


def test_hosted_labels() -> None:
    assert is_hosted("ubuntu-24.04")
    assert not is_hosted(("self-hosted", "linux", "gpu-h100"))
    assert not is_hosted("gpu-box")


# -- the YAML writer ------------------------------------------------------------------------


def test_yaml_writer_shapes() -> None:
    text = dump(
        {
            "on": {"push": {"tags": ["v*"]}},
            "permissions": {},
            "jobs": {
                "a": {
                    "steps": [{"uses": Pinned("x/y@" + "0" * 40, "v1.2.3"), "with": {"k": True}}]
                },
                "b": {"run": "echo 1\necho '2'\n", "if": "${{ !cancelled() }}", "n": 3},
            },
        },
        header=["hello"],
        gaps=("jobs",),
    )
    assert text.startswith("# hello\n\non:\n")
    assert f"      - uses: x/y@{'0' * 40} # v1.2.3\n" in text
    assert "    run: |\n      echo 1\n      echo '2'\n" in text
    assert "permissions: {}\n" in text
    assert "\n\n  b:\n" in text  # jobs are separated by a blank line


_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=30
) | st.sampled_from(
    ["yes", "no", "on", "off", "null", "~", "3.10", "0x1f", "1e3", "- x", ": x", "a: b", "a #b",
     "${{ matrix.id }}", "'q'", '"q"', "*.whl", "&a", "!x", "|", ">", "@x", "`x`", "%x", " lead"]
)  # fmt: skip
_keys = st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True).filter(lambda k: k != "on")
_lines = st.lists(
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=12),
    min_size=2,
    max_size=4,
).map("\n".join)
_values = st.recursive(
    _text | _lines | st.booleans() | st.integers(-5, 5),
    lambda inner: (
        st.lists(inner.filter(lambda v: not isinstance(v, list)), max_size=3)
        | st.dictionaries(_keys, inner, max_size=3)
    ),
    max_leaves=12,
)


@given(st.dictionaries(_keys, _values, max_size=4))
@settings(max_examples=300, deadline=None)
def test_yaml_writer_round_trips(data: dict[str, Any]) -> None:
    text = dump(data)
    for version in ((1, 2), (1, 1)):
        yaml = YAML(typ="safe", pure=True)
        yaml.version = version
        assert yaml.load(text) == (data or None), text


def test_stale_pins_report_newer_releases() -> None:
    from buildtools.ci.pins import stale_pins

    checkout = PINS.actions["actions/checkout"]
    newer = "f" * 40
    tags = {
        "actions/checkout": {checkout.version: checkout.sha, "v7.1.0": newer, "v8.0.0": "e" * 40},
        "actions/cache": {PINS.actions["actions/cache"].version: PINS.actions["actions/cache"].sha},
    }
    updates = stale_pins(PINS, tags)
    assert [(u.action, u.new_version) for u in updates] == [("actions/checkout", "v8.0.0")]
    same = stale_pins(PINS, tags, same_major=True)
    assert [(u.action, u.new_version, u.new_sha) for u in same] == [
        ("actions/checkout", "v7.1.0", newer)
    ]
    # a release tag moved to another commit is stale too
    moved = {"actions/cache": {PINS.actions["actions/cache"].version: "d" * 40}}
    assert [u.action for u in stale_pins(PINS, moved)] == ["actions/cache"]


def test_drift_check_on_the_large_matrix(tmp_path: Path) -> None:
    matrix = project(tmp_path, FIXTURES / "matrix-large.yaml")
    write_files(generate(matrix))
    assert check_files(generate(matrix)) == []
    # the ROCm GPU runner gets another label: release.yml, pull-request.yml and the
    # actionlint config are stale
    matrix.write_text(matrix.read_text().replace("gpu-mi300x", "gpu-mi355x"))
    stale = check_files(generate(matrix))
    assert [p.split(":")[0] for p in stale] == [
        layout.RELEASE_WORKFLOW,
        layout.PR_WORKFLOW,
        layout.ACTIONLINT_CONFIG,
    ]
    # a torch release more changes the plan, and so the header of both workflows
    write_files(generate(matrix))
    matrix.write_text(matrix.read_text().replace('"2.13.0"]', '"2.12.0", "2.13.0"]', 1))
    stale = check_files(generate(matrix))
    assert [p.split(":")[0] for p in stale] == [layout.RELEASE_WORKFLOW]
    assert "cell(s) in" in stale[0]
