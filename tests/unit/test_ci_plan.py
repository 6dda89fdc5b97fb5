"""The plan job (`buildtools ci matrix`): matrix entries, cache keys, which workflow runs
which job, the split into matrices of 256, the tag and published checks (no process)."""

from __future__ import annotations

import dataclasses
import fnmatch
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from fixtures.attestations import AttestedRunner, published_record
from fixtures.crafted import make_wheel
from fixtures.factories import make_cell, make_job
from fixtures.fakegh import FakeGitHub
from fixtures.imagepins import PINS_ENV, pin_every_base
from packaging.version import Version

from buildtools.ciplan import layout
from buildtools.ciplan.entries import MatrixEntry, job_globs, matrix_entries
from buildtools.ciplan.shapes import Shape, assignments, github_outputs, select, shape_of
from buildtools.cisteps.tagcheck import check_tag, project_version, published_jobs
from buildtools.cli.build import reproduce_command
from buildtools.cli.main import _extra_verbs, build_parser, main
from buildtools.errors import PlanError
from buildtools.index.publish import publish
from buildtools.index.settings import IndexSettings
from buildtools.index.wheels import read_wheel
from buildtools.knowledge import load_knowledge
from buildtools.matrix.config import load_matrix
from buildtools.planner import Plan, Selection, plan
from buildtools.workflows.pins import load_pins

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ci"
KB = load_knowledge()
HOSTED = load_pins().hosted_runners.labels
REGEN = "nox -s ci"


def _plan(matrix: Path, profile: str, only: tuple[str, ...] = ()) -> Plan:
    return plan(
        load_matrix(matrix, knowledge=KB),
        KB,
        host_python="3.12",
        selection=Selection(profile=profile, only=only),
    )


def _entries(p: Plan, full: Plan | None = None, **kw: Any) -> list[MatrixEntry]:
    return matrix_entries(
        p, full or p, profile="release", matrix="matrix.yaml", ci_python="3.12", hosted=HOSTED, **kw
    )


@pytest.fixture(autouse=True)
def _ci_python(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    # a release plan needs every base pinned by digest: made-up digests for the tests
    pins = pin_every_base(tmp_path_factory.mktemp("pins") / "image_pins.yaml")
    monkeypatch.setenv(PINS_ENV, str(pins))
    monkeypatch.setattr("buildtools.planning.host_python", lambda: "3.12")
    monkeypatch.setattr("buildtools.cli.ci.matrix.host_python", lambda: "3.12")


# -- entries ----------------------------------------------------------------------------------


def test_matrix_entries_reproduce_the_build_command() -> None:
    full = _plan(REPO / "matrix.yaml", "release")
    entries = _entries(full)
    assert len(entries) == len(full.jobs) == 30  # 28 x86_64 + 2 aarch64
    parser = build_parser(_extra_verbs())
    for entry in entries:
        argv = ["build", "--profile", "release"]
        for glob in entry.only:
            argv += ["--only", glob]
        argv += ["--backend", "docker", "--offline"]
        # the summary's line is what `buildtools build` itself prints and records
        assert entry.reproduce == reproduce_command(parser.parse_args(argv))
        assert entry.python_versions.splitlines()[-1] == "3.12"
    first = entries[0]
    assert first.reproduce == (
        "nox -s build -- --profile release --only torch2.11.0-cpu-cp310 --backend docker --offline"
    )
    assert first.python_versions == "3.10\n3.12"
    assert (first.timeout, first.build_hosted, first.smoke_hosted) == (60, True, True)
    assert first.smoke == "nox -s smoke -- wheelhouse --accelerator cpu --out smoke-results"
    cuda = next(e for e in entries if e.family == "cuda")
    assert cuda.build_hosted and not cuda.smoke_hosted  # the GPU runner is self-hosted
    rocm = next(e for e in entries if e.family == "rocm")
    assert rocm.smoke == "" and rocm.smoke_runner is None and rocm.timeout == 240
    assert (rocm.local, rocm.python_tag) == ("pt213rocm7.2", "cp310")


def test_download_keys_follow_torch_accelerator_and_toolkit_pins(tmp_path: Path) -> None:
    full = _plan(REPO / "matrix.yaml", "release")
    entries = {e.id: e for e in _entries(full)}
    a, b = entries["torch2.11.0-cu130-cp310"], entries["torch2.11.0-cu130-cp312"]
    # one download cache per torch × accelerator × toolkit: every Python of it shares it
    assert a.prefetch_key == b.prefetch_key and a.prefetch_key.startswith(a.prefetch_restore)
    # the release namespace: what the trusted workflows save on the default branch
    assert a.prefetch_restore.startswith("bt-rel-dl-linux_x86_64-torch2.11.0-cu130-")
    assert entries["torch2.11.0-cu126-cp310"].prefetch_key != a.prefetch_key
    # ccache (the default): the job and its toolchain; each workflow adds its namespace
    assert re.fullmatch(r"ccache-torch2\.11\.0-cu130-cp310-[0-9a-f]{10}", a.ccache_key)
    assert a.ccache_key != entries["torch2.11.0-cu130-cp312"].ccache_key
    assert a.ccache_path == "~/.cache/torch-buildtools/ccache/torch2.11.0-cu130-cp310"
    # sccache keys each compile itself, on the Actions cache: no directory
    sccache = tmp_path / "sccache" / "matrix.yaml"
    sccache.parent.mkdir()
    sccache.write_text((REPO / "matrix.yaml").read_text() + "\nbuild:\n  compiler_cache: sccache\n")
    s = {e.id: e for e in _entries(_plan(sccache, "release"))}["torch2.11.0-cu130-cp310"]
    assert s.ccache_key == s.ccache_path == ""
    assert a.image == "" and a.image_key == ""  # no Dockerfiles given: no shared image
    # the arch list is not a download input; another torch index is
    text = (REPO / "matrix.yaml").read_text()
    other = tmp_path / "matrix.yaml"
    other.write_text(text.replace('"7.5;8.0;8.6;9.0;10.0;12.0+PTX"', '"8.0;9.0"'))
    again = {e.id: e for e in _entries(_plan(other, "release"))}
    assert again["torch2.11.0-cu130-cp310"].prefetch_key == a.prefetch_key
    other.write_text(text.replace("whl/{accelerator}\n  rocm:", "whl/test/{accelerator}\n  rocm:"))
    again = {e.id: e for e in _entries(_plan(other, "release"))}
    assert again["torch2.11.0-cu130-cp310"].prefetch_key != a.prefetch_key
    # the project's own build requirements are downloaded too: a new one is a new key
    scm = {e.id: e for e in _entries(full, build_requires=["setuptools-scm>=8"])}
    c = scm["torch2.11.0-cu130-cp310"]
    assert c.prefetch_key != a.prefetch_key and c.prefetch_key.startswith(c.prefetch_restore)
    assert c.prefetch_key == scm["torch2.11.0-cu130-cp312"].prefetch_key


def test_builder_images_are_one_per_recipe() -> None:
    full = _plan(REPO / "matrix.yaml", "release")
    entries = _entries(full, env={"BUILDTOOLS_DOCKER_DIR": str(REPO / "docker")})
    by_accel: dict[tuple[str, str], set[str]] = {}
    for e in entries:
        assert e.image.startswith("torch-buildtools/builder:")
        by_accel.setdefault((e.accelerator, e.platform), set()).add(e.image)
    # every job of one accelerator and platform shares one builder image; the others differ
    assert all(len(images) == 1 for images in by_accel.values())
    assert len({next(iter(v)) for v in by_accel.values()}) == len(by_accel)
    cuda = next(e for e in entries if e.accelerator == "cu130" and e.platform == "linux_x86_64")
    assert cuda.image_key == "bt-rel-image-cuda-" + cuda.image.rsplit(":", 1)[1]
    assert cuda.image_file == "builder-" + cuda.image.rsplit(":", 1)[1] + ".tar"
    release = select(entries, layout.RELEASE_NAME)
    assert len(release.images) == len({e.image for e in release.build})
    # the generated release declares one image output per recipe, which bounds the images
    shape = shape_of(_entries(full), layout.RELEASE_NAME)
    assert shape.images == len({e.recipe for e in entries}) >= len(release.images)


def test_abi3_jobs_get_one_glob_that_selects_exactly_their_cells(tmp_path: Path) -> None:
    text = (FIXTURES / "matrix-large.yaml").read_text().replace("abi: per-python", "abi: abi3")
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(text)
    full = _plan(matrix, "release")
    entries = _entries(full)
    ids = [c.id for c in full.cells]
    for entry, job in zip(entries, full.jobs, strict=True):
        assert len(entry.only) == 1
        assert {c for c in ids if fnmatch.fnmatchcase(c, entry.only[0])} == set(job.cell_ids)
    e = next(x for x in entries if x.id == "torch2.13.0-cu130-cp310-abi3")
    assert e.only == ("torch2.13.0-cu130-*",)
    assert e.python_tag == ""  # one wheel for several Pythons


def test_job_globs_fall_back_to_cell_ids() -> None:
    cells = tuple(make_cell(accelerator="cu130", python=p) for p in ("3.10", "3.12"))
    job = make_job(cells=cells, abi="abi3")
    universe = [c.id for c in cells]
    assert job_globs(job, universe) == ("torch2.13.0-cu130-*",)
    assert job_globs(job, [*universe, "torch2.13.0-cu130-cp310-aarch64"]) == job.cell_ids


def test_current_torch_never_reaches_ci() -> None:
    cell = make_cell(torch="2.13.0+cpu", current=True)
    job = make_job(cells=(cell,), torch_source="current")
    p = Plan(profile="release", cells=(cell,), jobs=(job,), removed=(), excluded=0)
    with pytest.raises(PlanError, match="torch: current"):
        _entries(p)


# -- which workflow runs what ---------------------------------------------------------------------


def test_selection_per_workflow(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text((FIXTURES / "matrix-large.yaml").read_text())
    entries = _entries(_plan(matrix, "pr"))
    families = {e.family: e for e in entries}
    # the large fixture: CUDA builds on a self-hosted runner, ROCm on a hosted one, both
    # smoke-tested on self-hosted GPUs, CPU never smoke-tested
    assert not families["cuda"].build_hosted and families["rocm"].build_hosted
    pr = select(entries, layout.PR_NAME)
    assert {e.family for e in pr.build} == {"cpu", "rocm"}
    assert pr.smoke == ()
    assert {why for _, why in pr.skipped} == {
        "self-hosted build runner: built by self-hosted.yml (not for forks)",
        "smoke-tested by self-hosted.yml (not for forks)",
    }
    follow_up = select(entries, layout.SELF_HOSTED_NAME)
    assert {e.family for e in follow_up.build} == {"cuda"}
    assert {(e.family, src) for e, src in follow_up.smoke} == {
        ("cuda", "run"),
        ("rocm", "pull-request"),
    }
    release = select(_entries(_plan(matrix, "release")), layout.RELEASE_NAME)
    assert {e.family for e in release.build} == {"cuda", "rocm"}  # no CPU smoke runner
    assert select(_entries(_plan(matrix, "release")), layout.RELEASE_NAME, unsmoked=True).build
    caches = select(_entries(_plan(matrix, "release")), layout.CACHES_NAME)
    assert not caches.build and len(caches.prefetch) == len({e.prefetch_key for e in caches.order})


def _many(entries: list[MatrixEntry], family: str, n: int) -> list[MatrixEntry]:
    base = next(e for e in entries if e.family == family)
    return [dataclasses.replace(base, id=f"{base.id}-{i}") for i in range(n)]


def test_a_family_past_256_jobs_is_split() -> None:
    entries = _entries(_plan(REPO / "matrix.yaml", "release"))
    many = _many(entries, "cuda", 300) + [e for e in entries if e.family == "cpu"]
    shape = shape_of(many, layout.RELEASE_NAME)
    assert shape.chunks == {"cpu": 1, "cuda": 2}
    assert shape.build_jobs("cuda") == ["build-cuda-1", "build-cuda-2"]
    assert Shape.parse(layout.RELEASE_NAME, shape.arg()) == shape
    jobs = assignments(select(many, layout.RELEASE_NAME), shape, regenerate=REGEN)
    assert [len(jobs[j]) for j in ("build-cuda-1", "build-cuda-2", "smoke-cuda-1", "smoke-cuda-2")] == [
        256, 44, 256, 44,
    ]  # fmt: skip
    outputs = github_outputs(jobs, build_count=300 + 12)
    assert outputs["run_build_cuda_2"] == "true" and "\n" not in "".join(outputs.values())
    # the smoke matrix carries only what a smoke job reads
    assert set(json.loads(outputs["smoke_cuda_1"])["include"][0]) == {
        "id", "family", "python_versions", "reproduce", "smoke", "wheels_from",
    }  # fmt: skip
    # a plan that outgrew the workflow it runs in stops with the remedy
    small = shape_of(entries, layout.RELEASE_NAME)
    with pytest.raises(PlanError, match=r"need 2 matrices .* regenerate it \(`nox -s ci`\)"):
        assignments(select(many, layout.RELEASE_NAME), small, regenerate=REGEN)
    # a workflow generated before the matrix grew ROCm jobs, or aarch64 smoke runners
    groups = ("cpu", "cpu-aarch64", "cuda", "cuda-aarch64")
    no_rocm = Shape(
        kind="release", chunks={"cpu": 1, "cuda": 1}, build=("cpu", "cuda"), smoke=groups
    )
    with pytest.raises(PlanError, match="no build job for rocm"):
        assignments(select(entries, layout.RELEASE_NAME, unsmoked=True), no_rocm, regenerate=REGEN)
    no_arm = Shape(
        kind="release",
        chunks={"cpu": 1, "cuda": 1, "rocm": 1},
        build=("cpu", "cuda", "rocm"),
        smoke=("cpu", "cuda"),
    )
    with pytest.raises(PlanError, match="no smoke-cpu-aarch64 job for cpu"):
        assignments(select(entries, layout.RELEASE_NAME), no_arm, regenerate=REGEN)


def test_outputs_past_the_job_output_cap_are_refused() -> None:
    entries = _entries(_plan(REPO / "matrix.yaml", "release"))
    rows = [e.to_json() | {"pad": "x" * 4000} for e in _many(entries, "cuda", 256)]
    with pytest.raises(PlanError, match="at most 1 MB"):
        github_outputs({"build-cuda": rows}, build_count=256)


# -- the tag and the published record ------------------------------------------------------------


def test_project_version_sources(tmp_path: Path) -> None:
    assert project_version(REPO / "examples" / "scatter", name="bt-scatter") == "0.1.0"
    p = tmp_path / "a"
    p.mkdir()
    (p / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "1.2.0"\n')
    assert project_version(p, name=None) == "1.2.0"
    (p / "pyproject.toml").write_text(
        '[project]\nname = "x"\ndynamic = ["version"]\n'
        '[tool.setuptools.dynamic]\nversion = {attr = "pkg.__version__"}\n'
    )
    (p / "src" / "pkg").mkdir(parents=True)
    (p / "src" / "pkg" / "__init__.py").write_text('"""doc"""\n__version__ = "2.0.0"\n')
    assert project_version(p, name=None) == "2.0.0"
    q = tmp_path / "b"
    q.mkdir()
    (q / "setup.cfg").write_text("[metadata]\nname = y\nversion = 3.1\n")
    assert project_version(q, name=None) == "3.1"
    r = tmp_path / "c"
    r.mkdir()
    (r / "setup.py").write_text('setup(name="z", version="0.4.0")\n')
    assert project_version(r, name=None) == "0.4.0"
    (r / "VERSION.py").write_text('__version__ = "0.5.0"\n')
    assert project_version(r, name=None, version_file="VERSION.py") == "0.5.0"
    assert project_version(tmp_path / "empty", name="nothing") is None


def test_check_tag() -> None:
    assert check_tag("v0.1.0", "0.1.0", where="x") == Version("0.1.0")
    assert check_tag("v1.0", "1.0.0", where="x") == Version("1.0.0")
    with pytest.raises(
        PlanError, match=r"tag v0\.2\.0 releases 0\.2\.0, but x declares version 0\.1\.0"
    ):
        check_tag("v0.2.0", "0.1.0", where="x")
    for tag in ("0.1.0", "x", "v0.1.0+cu130", "v01.0", "v1.0\nv2.0", "vv1.0"):
        with pytest.raises(PlanError, match=r"is not a release tag: ci\.tag_pattern is"):
            check_tag(tag, "0.1.0", where="x")
    with pytest.raises(PlanError, match=r"set ci\.version_file"):
        check_tag("v0.1.0", None, where="x")
    # ci.tag_pattern: group 1 is the version
    assert check_tag("release-2.1", "2.1", where="x", pattern=r"^release-([0-9.]+)$") == (
        Version("2.1")
    )
    with pytest.raises(PlanError, match="no local label"):
        check_tag("v0.1.0+cu130", "0.1.0", where="x", pattern="^v(.+)$")


def _published_site(tmp_path: Path) -> Path:
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
    publish(site, [read_wheel(wheel, wheel_url_template=url)], IndexSettings(), KB)
    return site


def test_published_jobs_are_not_built_again(tmp_path: Path) -> None:
    from buildtools.index.manifest import read_manifest

    full = _plan(REPO / "matrix.yaml", "release")
    wheels = read_manifest(_published_site(tmp_path)).wheels
    found = published_jobs(full.jobs, project="bt-scatter", version=Version("0.1.0"), wheels=wheels)
    assert found == {"torch2.13.0-cpu-cp312": wheels[0].filename}
    assert (
        published_jobs(full.jobs, project="bt-scatter", version=Version("0.2.0"), wheels=wheels)
        == {}
    )
    assert published_jobs(full.jobs, project=None, version=Version("0.1.0"), wheels=wheels) == {}


def test_cmd_matrix_for_a_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from buildtools.cli.ci.matrix import cmd_matrix

    monkeypatch.chdir(REPO)
    monkeypatch.setenv("GITHUB_REPOSITORY", "example/bt-scatter")
    monkeypatch.setenv("BT_DEFAULT_BRANCH", "main")
    gh, runner = FakeGitHub(), AttestedRunner()
    published_record(gh, runner, "v0.1.0", _published_site(tmp_path) / "index.json")
    gh_out, summary = tmp_path / "out", tmp_path / "summary.md"
    plan_json, entries = tmp_path / "plan" / "plan.json", tmp_path / "plan" / "entries.json"
    shape = (
        "cpu=1,cuda=1,rocm=1;build=cpu,cuda,rocm;smoke=cpu,cpu-aarch64,cuda,cuda-aarch64;images=6"
    )
    args = build_parser(_extra_verbs()).parse_args(
        ["ci", "matrix", "--profile", "release", "--workflow", "release", "--shape", shape,
         "--tag", "v0.1.0", "--sha", "f" * 40, "--published-from-releases",
         "--only", "torch2.13.0-cpu-*", "--only", "torch2.13.0-rocm7.2-cp312",
         "--github-output", str(gh_out), "--summary", str(summary),
         "--plan-json", str(plan_json), "--entries-json", str(entries)]
    )  # fmt: skip
    assert cmd_matrix(args, io.StringIO(), api=gh, runner=runner) == 0
    # the record's attestation was verified: this repository's release.yml, its tag
    (verify,) = runner.matching("gh", "attestation", "verify")
    assert verify.argv[-7:] == (
        "--signer-workflow", "example/bt-scatter/.github/workflows/release.yml",
        "--predicate-type", "https://torch-buildtools.github.io/attestation/release/v1",
        "--deny-self-hosted-runners", "--format", "json",
    )  # fmt: skip
    outputs = dict(line.split("=", 1) for line in gh_out.read_text().splitlines())
    built = [e["id"] for e in json.loads(outputs["build_cpu"])["include"]]
    # cp312 (x86_64) is published already: not built again; its aarch64 twin is not; rocm
    # has no smoke runner: not built
    assert built == [
        "torch2.13.0-cpu-cp310",
        "torch2.13.0-cpu-cp311",
        "torch2.13.0-cpu-cp312-aarch64",
        "torch2.13.0-cpu-cp313",
    ]
    assert outputs["run_build_rocm"] == "false" and outputs["run_build_cuda"] == "false"
    assert (outputs["tag"], outputs["sha"]) == ("v0.1.0", "f" * 40)
    assert outputs["run_publish"] == "true"
    text = summary.read_text()
    assert "`torch2.13.0-cpu-cp312`: already published as bt_scatter-0.1.0+pt213cpu" in text
    assert "no runners.smoke.rocm: not built for a release" in text
    assert "tag `v0.1.0` releases version 0.1.0 of `bt-scatter`" in text
    assert "published record: 1 wheel(s) (`index.json` of the release v0.1.0)" in text
    data = json.loads(entries.read_text())
    assert [e["job"] for e in data["build"]] == ["build-cpu"] * 4
    assert {e["id"]: e["job"] for e in data["smoke"]}["torch2.13.0-cpu-cp312-aarch64"] == (
        "smoke-cpu-aarch64"
    )
    assert {tuple(s) for s in data["skipped"]} >= {
        (
            "torch2.13.0-cpu-cp312",
            "already published as bt_scatter-0.1.0+pt213cpu-cp312-cp312-manylinux_2_28_x86_64.whl",
        )
    }
    assert json.loads(plan_json.read_text())["include"][0]["id"] == "torch2.13.0-cpu-cp310"


def test_cmd_matrix_refuses_a_tag_that_is_not_the_version(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)
    code = main(
        ["ci", "matrix", "--profile", "release", "--tag", "v9.9.9", "--github-output", "/dev/null"],
        out=io.StringIO(),
    )
    assert code == PlanError.exit_code
    assert "tag v9.9.9 releases 9.9.9, but" in capsys.readouterr().err


def test_cmd_matrix_for_a_pull_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    gh_out = tmp_path / "out"
    code = main(
        [
            "ci",
            "matrix",
            "--profile",
            "pr",
            "--workflow",
            "pull-request",
            "--github-output",
            str(gh_out),
        ],
        out=io.StringIO(),
    )
    assert code == 0
    outputs = dict(line.split("=", 1) for line in gh_out.read_text().splitlines())
    # the CUDA smoke runner is self-hosted: its smoke tests are not in this workflow
    assert "smoke_cuda" not in outputs and outputs["run_smoke_cpu"] == "true"
    assert outputs["run_build_cuda"] == "true" and outputs["run_index"] == "true"
    with pytest.raises(SystemExit):
        main(["ci", "matrix", "--profile", "pr", "--workflow", "nope"], out=io.StringIO())
    assert (
        main(
            ["ci", "matrix", "--profile", "pr", "--workflow", "pull-request", "--tag", "v1"],
            out=io.StringIO(),
        )
        == PlanError.exit_code
    )


def test_a_release_plan_stops_on_a_base_without_a_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A release builds only FROM bases pinned by digest: an unpinned one stops its plan
    (exit 4) naming the base and the refresh script; a pull request's plan only notes it."""
    monkeypatch.chdir(REPO)
    pins = pin_every_base(tmp_path / "pins.yaml")
    text = pins.read_text()
    # the CPU base loses its digest (a new base the refresh has not seen yet)
    cpu = "- image: pytorch/manylinux2_28-builder:cpu\n"
    start = text.index(cpu)
    pins.write_text(text[:start] + cpu + "  digest:\n" + text[text.index("\n-", start + 1) + 1 :])
    monkeypatch.setenv(PINS_ENV, str(pins))
    release = ["ci", "matrix", "--profile", "release", "--workflow", "release",
               "--only", "torch2.13.0-*-cp312", "--github-output", str(tmp_path / "o1")]  # fmt: skip
    assert main(release, out=io.StringIO()) == PlanError.exit_code
    err = capsys.readouterr().err
    assert "a release builds only FROM bases pinned by digest" in err
    assert "has none for pytorch/manylinux2_28-builder:cpu (" in err
    assert "run `python ci/refresh-image-pins.py` where the registry is reachable" in err
    assert len(err.strip().splitlines()) == 1
    # the committed pins have no digest at all (no registry here): the same, every base
    monkeypatch.delenv(PINS_ENV)
    assert main(release, out=io.StringIO()) == PlanError.exit_code
    assert "image_pins.yaml has none for" in capsys.readouterr().err
    # every base pinned: the plan goes on
    monkeypatch.setenv(PINS_ENV, str(pin_every_base(tmp_path / "all.yaml")))
    assert main(release, out=io.StringIO()) == 0
    # a pull request builds by tag and says so
    monkeypatch.setenv(PINS_ENV, str(pins))
    summary = tmp_path / "summary.md"
    pr = ["ci", "matrix", "--profile", "pr", "--workflow", "pull-request",
          "--github-output", str(tmp_path / "o2"), "--summary", str(summary)]  # fmt: skip
    assert main(pr, out=io.StringIO()) == 0
    assert "`pytorch/manylinux2_28-builder:cpu`" in summary.read_text()
    assert "a release stops on them" in summary.read_text()
