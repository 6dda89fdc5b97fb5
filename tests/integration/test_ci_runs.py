"""The generated workflows run end to end on this machine: every `run:` script by bash,
against stubs (nox's builds and smoke tests, gh, docker), with a local GitHub API (releases
and assets) and a local Pages "CDN" (`fixtures.localrun`).

What they show: a tag is released (wheels attested, verified, uploaded as release assets,
indexed with links to them, recorded, deployed); running it again publishes nothing new;
the next release merges into the record even when the CDN still serves an older index; a
wheel no build job attested stops the publish; a failed smoke test publishes nothing and
the status job says what failed and how to reproduce it; a tag that is not the project's
version, or a manual run from another branch, stops at the plan; a fork's pull request
never reaches the self-hosted workflow, a branch's does; the cache workflow fills the cache.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures.fakegh import FakeGitHub, GitHubHandler
from fixtures.imagepins import PINS_ENV, digest_of, pin_every_base
from fixtures.localrun import LocalRun, Stores
from ruamel.yaml import YAML

from buildtools.backends.docker.images import load_pins
from buildtools.ciplan import layout
from buildtools.workflows.generate import generate, write_files

REPO = Path(__file__).resolve().parents[2]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A repository with the reference matrix, a GitHub API and a Pages site, all local."""
    handler = type("H", (GitHubHandler,), {"store": FakeGitHub(), "log": []})
    api = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    stores = Stores(root=tmp_path / "stores")
    pages = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0),
        functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(stores.served)),
    )
    for server in (api, pages):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "examples" / "scatter", repo / "examples" / "scatter")
    base_url = f"http://127.0.0.1:{pages.server_address[1]}/bt-scatter/whl"
    text = (
        (REPO / "matrix.yaml")
        .read_text()
        .replace("https://example.github.io/bt-scatter/whl", base_url)
    )
    (repo / "matrix.yaml").write_text(text)
    _git(tmp_path, "init", "-q", str(repo))
    write_files(generate(repo / "matrix.yaml"))
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    # every builder base pinned by digest (a release plan stops otherwise), and the
    # stand-in registry serving exactly those digests
    pins = pin_every_base(tmp_path / "image_pins.yaml")
    served = tmp_path / "bases-served"
    served.write_text("".join(f"{i}@{d}\n" for i, d in load_pins(pins).items()))
    env = {
        "GITHUB_API_URL": f"http://127.0.0.1:{api.server_address[1]}/api",
        "BT_BASE_URL": base_url,
        PINS_ENV: str(pins),
        "BT_BASES_SERVED": str(served),
    }
    yield {"repo": repo, "stores": stores, "gh": handler.store, "env": env, "tmp": tmp_path}
    api.shutdown()
    pages.shutdown()


def _workflow(repo: Path, path: str) -> dict[str, Any]:
    result: dict[str, Any] = YAML(typ="safe", pure=True).load((repo / path).read_text())
    return result


_RUNS = iter(range(2001, 3000))


def _release(world: dict[str, Any], tag: str, name: str, **kw: Any) -> LocalRun:
    repo = world["repo"]
    github = kw.pop("github", None) or {
        "event_name": "workflow_run",
        "repository": "example/bt-scatter",
        "ref": "refs/heads/main",
        "event": {
            "workflow_run": {
                "conclusion": "success",
                "event": "push",
                "head_branch": tag,
                "head_sha": _git(repo, "rev-parse", "HEAD"),
                "head_repository": {"full_name": "example/bt-scatter"},
            },
            "repository": {"default_branch": "main"},
        },
    }
    if kw.get("tag_repo", True):
        _git(repo, "tag", "-f", tag)
    run = LocalRun(
        _workflow(repo, layout.RELEASE_WORKFLOW),
        repo=repo,
        work=world["tmp"] / name,
        stores=world["stores"],
        github=github,
        inputs=kw.get("inputs"),
        env={**world["env"], "GITHUB_TOKEN": "t0ken", **kw.get("env", {})},
        run_id=str(next(_RUNS)),
    )
    for job, hook in kw.get("hooks", {}).items():
        run.hooks[job] = hook
    run.run()
    return run


DISPATCH = {
    "event_name": "workflow_dispatch",
    "repository": "example/bt-scatter",
    "ref": "refs/heads/main",
    "event": {"repository": {"default_branch": "main"}},
}
FEW = "torch2.13.0-cpu-cp312 torch2.13.0-cu130-cp312 torch2.13.0-cu126-cp311"


def _manual(world: dict[str, Any], tag: str, name: str, only: str = FEW, **kw: Any) -> LocalRun:
    """A manual run of the release workflow for `tag`, narrowed to a few cells."""
    inputs = {"tag": tag, "only": only, "unsmoked": False, "publish": True, **kw.pop("inputs", {})}
    return _release(world, tag, name, github=DISPATCH, inputs=inputs, **kw)


def _served(world: dict[str, Any]) -> dict[str, Any]:
    return json.loads((world["stores"].served / "bt-scatter" / "whl" / "index.json").read_text())


def _assets(world: dict[str, Any], tag: str) -> set[str]:
    release = world["gh"].release(tag)
    return {a["name"] for a in release["assets"]} if release else set()


def test_a_release_end_to_end_then_again(world: dict[str, Any]) -> None:
    run = _release(world, "v0.1.0", "first")
    results = {j: r.result for j, r in run.jobs.items()}
    assert results == {
        "plan": "success", "images": "success", "build-cpu": "success", "build-cuda": "success",
        "build-rocm": "skipped", "smoke-cpu": "success", "smoke-cpu-aarch64": "success",
        "smoke-cuda": "success", "smoke-cuda-aarch64": "success",
        "smoke-window-cpu": "skipped",  # no window asked for: release day's path stays off
        "prepare": "success", "publish": "success", "pages": "success", "status": "success",
    }, run.leg_log("status")[-3000:] + run.leg_log("publish")[-3000:]  # fmt: skip
    wheels = {a for a in _assets(world, "v0.1.0") if a.endswith(".whl")}
    # CPU and CUDA (24 x86_64, 2 aarch64); ROCm has no smoke runner, so it is not built
    assert len(wheels) == 26
    assert sum(w.endswith("_aarch64.whl") for w in wheels) == 2
    assert "index.json" in _assets(world, "v0.1.0")  # the record
    served = _served(world)
    assert {w["filename"] for w in served["wheels"]} == wheels
    assert all(
        w["url"].startswith("https://github.com/example/bt-scatter/releases/download/v0.1.0/")
        for w in served["wheels"]
    )
    # the site holds the index only: the wheels are release assets
    assert not (world["stores"].served / "bt-scatter" / "whl" / "wheels").exists()
    calls = run.calls()
    # the publish job attested the 26 wheels and the record, and verified each (this run,
    # the tag's commit); nothing was verified before: there was no record to authenticate
    assert sum(c.startswith("gh attestation verify") for c in calls) == 26 + 1
    attested = [json.loads(line) for line in world["stores"].attested.read_text().splitlines()]
    assert len(attested) == 2 * 27  # SLSA provenance and the release statement, each
    assert {a["predicate"].get("tag") for a in attested if "tag" in a["predicate"]} == {"v0.1.0"}
    assert {a["predicate"].get("commit") for a in attested if "tag" in a["predicate"]} == {
        _git(world["repo"], "rev-parse", "v0.1.0")
    }
    # the signing job ran no repository code: nox (and so buildtools) ran in the jobs
    # before it only, and its workspace held the bundle and nothing checked out
    (publish_ws,) = run.work.glob("ws*-publish")
    assert sorted(p.name for p in publish_ws.iterdir() if not p.name.startswith(".")) == [
        "release-bundle"
    ]
    assert "release bundle" in run.leg_log("publish") and "published" in run.leg_log("publish")
    assert world["gh"].release("v0.1.0")["draft"] is False
    assert any(c.startswith("nox -s build -- --profile release --only") for c in calls)
    assert "### Published: 26 wheel(s)" in run.leg_log("status")
    # the same tag again (a manual rebuild): everything is published already, nothing is
    # built, nothing is uploaded
    again = _release(world, "v0.1.0", "again", tag_repo=False)
    assert {j for j, r in again.jobs.items() if r.result == "success"} == {"plan", "status"}
    assert "already published as" in again.leg_log("status")
    assert len(_served(world)["wheels"]) == 26


def test_the_next_release_merges_into_the_record_not_the_cdn(world: dict[str, Any]) -> None:
    _manual(world, "v0.1.0", "first")
    stale = world["stores"].served / "bt-scatter" / "whl" / "index.json"
    first_index = stale.read_text()
    init = world["repo"] / "examples" / "scatter" / "src" / "bt_scatter" / "__init__.py"
    init.write_text(init.read_text().replace('__version__ = "0.1.0"', '__version__ = "0.2.0"'))
    _git(world["repo"], "commit", "-qam", "0.2.0")
    # the CDN still serves an index from before the first release: the record decides
    stale.write_text(
        json.dumps({"schema": "torch-buildtools/index/v1", "wheels": [], "generated": []})
    )
    run = _manual(world, "v0.2.0", "second")
    assert run.jobs["publish"].result == "success", run.leg_log("publish")
    assert "in the record, not served yet" in run.leg_log("prepare")
    # the first release's record was authenticated before the second merged into it
    assert any(
        c.startswith("gh attestation verify") and "/index.json " not in c for c in run.calls()
    )
    # the prepare job's summary has the coverage map of what the site now lists
    (summary,) = run.work.glob("ws*-prepare/.step_summary")
    assert "### Coverage of the index" in summary.read_text()
    assert "| 2.13.0 | CUDA 13.0 | **missing** | **missing** | 📦 published | **missing** |" in (
        summary.read_text()
    )
    versions = {w["version"].split("+")[0] for w in _served(world)["wheels"]}
    assert versions == {"0.1.0", "0.2.0"}
    assert len(_served(world)["wheels"]) == 6
    assert first_index


def test_a_wheel_no_build_made_is_never_published(world: dict[str, Any]) -> None:
    """Something on a smoke machine uploads one more wheel under a wheels-* name, with a
    smoke report that passes it: no build leg reported those bytes, so nothing is
    attested or published."""

    def plant(run: LocalRun) -> None:
        evil, report = run.artifacts / "wheels-evil", run.artifacts / "smoke-evil"
        evil.mkdir()
        report.mkdir()
        first = next((run.artifacts).glob("wheels-*/*.whl"))
        wheel = evil / first.name.replace("cp312", "cp39")
        wheel.write_bytes(first.read_bytes() + b"\0")
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        result = {"wheel": wheel.name, "sha256": sha, "cell": None, "status": "passed"}
        (report / "report.json").write_text(
            json.dumps({"schema": "torch-buildtools/smoke-report/v1", "results": [result]})
        )

    run = _manual(world, "v0.1.0", "evil", hooks={"prepare": plant})
    assert run.jobs["prepare"].result == "failure"
    assert run.jobs["publish"].result == "skipped"
    log = run.leg_log("prepare")
    assert "no build job of this run" in log and "something else put it into an artifact" in log
    assert run.jobs["pages"].result == "skipped" and run.jobs["status"].result == "failure"
    assert not any(c.startswith("gh attestation") for c in run.calls())  # nothing attested
    assert world["stores"].attested.read_text() == ""
    assert world["gh"].release("v0.1.0") is None


def _tamper(run: LocalRun, change: str) -> None:
    """What another job of the run could do to the bundle artifact after the prepare job
    made it (every job of a run can write its artifacts)."""
    bundle = run.artifacts / "release-bundle"
    wheel = next((bundle / "wheels").glob("*cp312*.whl"))
    if change == "bytes":  # another wheel's bytes, the manifest left alone
        wheel.write_bytes(wheel.read_bytes() + b"\0")
    elif change == "extra":  # one more file the manifest does not list
        (bundle / "wheels" / wheel.name.replace("cp312", "cp39")).write_bytes(b"evil")
    elif change == "manifest":  # the wheel and the manifest changed together
        wheel.write_bytes(wheel.read_bytes() + b"\0")
        manifest = bundle / "MANIFEST.sha256"
        rel = f"wheels/{wheel.name}"
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        lines = [f"{sha}  {rel}" if line.endswith(f"  {rel}") else line
                 for line in manifest.read_text().splitlines()]  # fmt: skip
        manifest.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ("bytes", "WARNING: 1 computed checksum did NOT match"),
        ("extra", "holds files its manifest does not list"),
        ("manifest", "but the prepare job made"),
    ],
)
def test_the_signing_job_refuses_a_bundle_the_prepare_job_did_not_make(
    world: dict[str, Any], change: str, why: str
) -> None:
    run = _manual(
        world,
        "v0.1.0",
        f"tamper-{change}",
        only="torch2.13.0-cpu-cp312",
        hooks={"publish": lambda r: _tamper(r, change)},
    )
    assert run.jobs["prepare"].result == "success"
    assert run.jobs["publish"].result == "failure"
    log = run.leg_log("publish")
    assert why in log, log[-2000:]
    assert world["stores"].attested.read_text() == ""  # nothing was signed
    assert world["gh"].release("v0.1.0") is None  # nothing uploaded
    assert run.jobs["pages"].result == "skipped" and run.jobs["status"].result == "failure"


def test_a_gpu_machine_cannot_pass_another_familys_wheels(world: dict[str, Any]) -> None:
    """The CUDA smoke machine is compromised: its leg sees the ROCm wheels too (planted in
    its artifact) and its report passes them; it also rewrites the CPU family's report.
    A report counts only for its own family's wheels and only with the digest its leg
    output, so the ROCm wheels (no smoke runner) are held back, and the rewritten CPU
    report stops the publish."""
    cells = "torch2.13.0-rocm7.2-cp312 torch2.13.0-cu130-cp312 torch2.13.0-cpu-cp312"

    def widen(run: LocalRun) -> None:  # before the CUDA smoke job: its wheels + ROCm's
        for wheel in (run.artifacts / "wheels-torch2.13.0-rocm7.2-cp312").glob("*.whl"):
            shutil.copy2(wheel, run.artifacts / "wheels-torch2.13.0-cu130-cp312" / wheel.name)

    run = _manual(world, "v0.1.0", "widen", only=cells, inputs={"unsmoked": True},
                  hooks={"smoke-cuda": widen})  # fmt: skip
    assert run.jobs["publish"].result == "success", run.leg_log("prepare")[-3000:]
    published = {a for a in _assets(world, "v0.1.0") if a.endswith(".whl")}
    assert published == {
        "bt_scatter-0.1.0+pt213cpu-cp312-cp312-manylinux_2_28_x86_64.whl",
        "bt_scatter-0.1.0+pt213cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
    }
    select = run.leg_log("prepare").split("--- Select")[1].split("--- ")[0]
    assert "held back  bt_scatter-0.1.0+pt213rocm7.2-cp312" in select, select
    assert "no smoke report of the rocm family in this run" in select

    def rewrite(run: LocalRun) -> None:  # before prepare: another family's report rewritten
        report = run.artifacts / "smoke-torch2.13.0-cpu-cp312" / "report.json"
        report.write_text(report.read_text().replace('"results": [', '"results": [ '))

    _bump = "0.1.1"
    init = world["repo"] / "examples" / "scatter" / "src" / "bt_scatter" / "__init__.py"
    init.write_text(init.read_text().replace('__version__ = "0.1.0"', f'__version__ = "{_bump}"'))
    _git(world["repo"], "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", _bump)
    forged = _manual(world, f"v{_bump}", "forged", only=cells, hooks={"prepare": rewrite})
    assert forged.jobs["prepare"].result == "failure"
    assert "no smoke leg of this run reported a report with these bytes" in forged.leg_log(
        "prepare"
    )
    assert forged.jobs["publish"].result == "skipped"
    assert world["gh"].release(f"v{_bump}") is None


def test_a_failed_smoke_test_publishes_nothing_and_says_why(world: dict[str, Any]) -> None:
    run = _manual(world, "v0.1.0", "smoke", env={"BT_FAIL_SMOKE": "*pt213cu130-cp312*"})
    assert run.jobs["smoke-cuda"].result == "failure"
    assert run.jobs["smoke-cpu"].result == "success"
    assert run.jobs["prepare"].result == run.jobs["publish"].result == "skipped"
    status = run.leg_log("status")
    assert run.jobs["status"].result == "failure"
    assert (
        "`torch2.13.0-cu130-cp312`: smoke segfault; reproduce: `nox -s build -- --profile "
        "release --only torch2.13.0-cu130-cp312 --backend docker --offline && nox -s smoke"
    ) in status
    assert _assets(world, "v0.1.0") == set()


def test_a_failed_build_holds_back_only_its_family(world: dict[str, Any]) -> None:
    run = _manual(world, "v0.1.0", "build", env={"BT_FAIL_BUILD": "torch2.13.0-cu126-cp311"})
    assert run.jobs["build-cuda"].result == "failure"
    assert run.jobs["smoke-cpu"].result == "success"  # the CPU family goes on
    assert run.jobs["smoke-cuda"].result == "skipped"
    status = run.leg_log("status")
    assert "`torch2.13.0-cu126-cp311`: build failed: nvcc fatal: boom" in status
    assert "Re-run failed jobs" in status
    # the failed leg uploaded no wheels artifact, so re-running it can upload one
    assert not (run.artifacts / "wheels-torch2.13.0-cu126-cp311").exists()
    assert (run.artifacts / "build-report-torch2.13.0-cu126-cp311").exists()


def test_the_plan_stops_a_wrong_tag_and_a_run_from_another_branch(world: dict[str, Any]) -> None:
    wrong = _release(world, "v9.9.9", "wrong")
    assert wrong.jobs["plan"].result == "failure"
    assert "tag v9.9.9 releases 9.9.9, but" in wrong.leg_log("plan")
    assert wrong.jobs["status"].result == "failure"
    branch = {**DISPATCH, "ref": "refs/heads/feature"}
    run = _release(world, "v0.1.0", "branch", github=branch, inputs={"tag": "v0.1.0", "only": ""})
    assert run.jobs["plan"].result == "failure"
    assert "run the release from main (chosen: refs/heads/feature)" in run.leg_log("plan")


def test_a_manual_run_rebuilds_a_selection_of_the_tag(world: dict[str, Any]) -> None:
    run = _manual(
        world,
        "v0.1.0",
        "manual",
        only="torch2.13.0-rocm7.2-cp31[23] torch2.13.0-cpu-cp312",
        inputs={"unsmoked": True},
    )
    assert run.jobs["build-rocm"].result == "success"
    assert run.jobs["build-cuda"].result == "skipped"
    assert {a for a in _assets(world, "v0.1.0") if a.endswith(".whl")} == {
        "bt_scatter-0.1.0+pt213cpu-cp312-cp312-manylinux_2_28_x86_64.whl"
    }  # the ROCm wheels have no smoke runner: built, held back
    assert "no smoke report" in run.leg_log("status") or "smoke not run" in run.leg_log("status")


def test_pull_requests_from_a_fork_and_from_a_branch(world: dict[str, Any]) -> None:
    repo = world["repo"]
    pr = LocalRun(
        _workflow(repo, layout.PR_WORKFLOW),
        repo=repo,
        work=world["tmp"] / "pr",
        stores=world["stores"],
        github={"event_name": "pull_request", "repository": "example/bt-scatter"},
        env=world["env"],
    )
    pr.run()
    assert {j: r.result for j, r in pr.jobs.items()} == {
        "drift": "success", "plan": "success", "build-cpu": "success", "build-cuda": "success",
        "smoke-cpu": "success", "smoke-cpu-aarch64": "success", "index": "success",
        "status": "success",
    }, pr.leg_log("drift")  # fmt: skip
    assert (pr.artifacts / "site-preview" / "index.json").is_file()
    follow_up = _workflow(repo, layout.SELF_HOSTED_WORKFLOW)
    event = {"event": "pull_request", "conclusion": "success", "id": 7,
             "head_sha": _git(repo, "rev-parse", "HEAD")}  # fmt: skip
    for head, expect in (
        ("mallory/bt-scatter", set()),
        (
            "example/bt-scatter",
            {"plan", "smoke-cuda", "smoke-cuda-aarch64", "status", "commit-status"},
        ),
    ):
        run = LocalRun(
            follow_up,
            repo=repo,
            work=world["tmp"] / f"sh-{head.split('/')[0]}",
            stores=world["stores"],
            github={
                "event_name": "workflow_run",
                "repository": "example/bt-scatter",
                "event": {"workflow_run": {**event, "head_repository": {"full_name": head}}},
            },
            env={**world["env"], "BT_OTHER_RUN_ARTIFACTS": str(pr.artifacts)},
        )
        run.run()
        assert {j for j, r in run.jobs.items() if r.result == "success"} == expect, head
    # the branch's verdict is posted on its commit
    assert any(
        c.startswith("gh api --method POST repos/example/bt-scatter/statuses/")
        and "state=success" in c
        for c in run.calls()
    )


def test_the_cache_workflow_seeds_downloads_and_images(world: dict[str, Any]) -> None:
    repo = world["repo"]
    run = LocalRun(
        _workflow(repo, layout.CACHES_WORKFLOW),
        repo=repo,
        work=world["tmp"] / "caches",
        stores=world["stores"],
        github={"event_name": "schedule", "repository": "example/bt-scatter"},
        env=world["env"],
    )
    run.run()
    assert {j: r.result for j, r in run.jobs.items()} == {
        "plan": "success", "images": "success", "prefetch": "success", "status": "success",
    }, run.leg_log("images")[-4000:]  # fmt: skip
    saved = sorted(p.name for p in (world["stores"].root / "cache").iterdir())
    assert any(k.startswith("bt-rel-image-cuda-") for k in saved)
    assert any(k.startswith("bt-rel-dl-linux_x86_64-torch2.13.0-cu130-") for k in saved)
    assert any(
        c.startswith("nox -s ci -- prefetch --profile release --group bt-rel-dl-")
        for c in run.calls()
    )


def _plant(run: LocalRun, *, ccache_key: str) -> None:
    """A newer ninja wheel under every downloads key of this run's plan, and a compiler
    object under every compiler-cache key (`ccache_key`: the workflow's key for an entry's
    `ccache_key`), in the Actions cache: what a branch's code in self-hosted.yml could save
    with the runner's token."""
    entries = json.loads((run.artifacts / "plan" / "entries.json").read_text())
    store = run.stores.root / "cache"
    for entry in entries["build"]:
        downloads = store / entry["prefetch_key"]
        downloads.mkdir(parents=True, exist_ok=True)
        (downloads / "ninja-99.0.0-py3-none-any.whl").write_bytes(b"planted")
        if entry.get("ccache_key"):
            objects = store / ccache_key.format(entry["ccache_key"])
            objects.mkdir(parents=True, exist_ok=True)
            (objects / "planted.o").write_text("PLANTED OBJECT\n")


def _built(run: LocalRun, job: str) -> tuple[str, str]:
    """(the ninja version the wheel of `job` was built with, the objects it linked)."""
    import zipfile

    (wheel,) = (run.artifacts / f"wheels-{job}").glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        record = json.loads(zf.read(next(n for n in names if n.endswith("/buildtools.json"))))
        objects = next((zf.read(n).decode() for n in names if n.endswith("/_objects.txt")), "")
    return record["ninja"], objects


def test_planted_downloads_and_compiler_objects_never_reach_a_release(
    world: dict[str, Any],
) -> None:
    """A newer `ninja` wheel in the downloads cache and an object in the compiler cache,
    under every key a release used to read: the release's build reads no cache (it says
    so), so its wheel has the index's ninja and no planted object. The same plants reach a
    pull request's wheel (which reads the caches): the stand-in build models the threat."""
    cell = "torch2.13.0-cpu-cp312"
    run = _manual(world, "v0.1.0", "planted", only=cell,
                  hooks={"build-cpu": lambda r: _plant(r, ccache_key="bt-rel-{}")})  # fmt: skip
    assert run.jobs["publish"].result == "success", run.leg_log("build-cpu")[-3000:]
    log = run.leg_log("build-cpu")
    assert "a release build reads no cache:" in log and "starts empty" in log
    assert f"fake build {cell}: ninja 1.13.0" in log and "0 cached object(s)" in log
    assert _built(run, cell) == ("1.13.0", "")
    assert not any(
        line.startswith("--- Restore") for line in log.splitlines()
    )  # no cache step at all
    repo = world["repo"]
    pr = LocalRun(
        _workflow(repo, layout.PR_WORKFLOW),
        repo=repo,
        work=world["tmp"] / "pr-planted",
        stores=world["stores"],
        github={
            "event_name": "pull_request",
            "repository": "example/bt-scatter",
            "event": {"pull_request": {"number": 5}},
        },
        env=world["env"],
    )
    pr.hooks["build-cpu"] = lambda r: _plant(r, ccache_key="bt-pr5-{}-0")
    pr.run()
    assert pr.jobs["build-cpu"].result == "success", pr.leg_log("build-cpu")[-3000:]
    ninja, objects = _built(pr, cell)
    assert ninja == "99.0.0" and objects == "PLANTED OBJECT\n"


def test_a_base_whose_digest_changed_stops_the_build(world: dict[str, Any]) -> None:
    """The CPU base's tag was pushed again: the registry serves another digest, the one the
    pins name is gone. The release builds FROM the pinned digest only, so the image and the
    build stop (as docker's pull does), and nothing is published."""
    cpu = "pytorch/manylinux2_28-builder:cpu"
    served = Path(world["env"]["BT_BASES_SERVED"])
    pinned = load_pins(Path(world["env"][PINS_ENV]))[cpu]
    served.write_text(served.read_text().replace(pinned, digest_of(cpu, "re-pushed")))
    run = _manual(world, "v0.1.0", "repushed", only="torch2.13.0-cpu-cp312")
    message = f"manifest for {cpu}@{pinned} not found: manifest unknown"
    assert run.jobs["images"].result == "failure" and message in run.leg_log("images")
    assert run.jobs["build-cpu"].result == "failure" and message in run.leg_log("build-cpu")
    assert run.jobs["publish"].result == "skipped" and run.jobs["status"].result == "failure"
    assert world["gh"].release("v0.1.0") is None


def _reconfigure(world: dict[str, Any], extra: str) -> None:
    """Append to matrix.yaml, regenerate the workflows and commit them."""
    repo = world["repo"]
    (repo / "matrix.yaml").write_text((repo / "matrix.yaml").read_text() + extra)
    write_files(generate(repo / "matrix.yaml"))
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "ci settings")


def test_a_release_with_a_registry_and_pypi(world: dict[str, Any]) -> None:
    _reconfigure(
        world,
        "ci:\n  image_registry: ghcr.io/example/builder\n"
        "  pypi: {torch: '2.13.0', accelerator: cu130}\n",
    )
    tag = LocalRun(
        _workflow(world["repo"], layout.TAG_WORKFLOW),
        repo=world["repo"],
        work=world["tmp"] / "tag",
        stores=world["stores"],
        github={"event_name": "push", "ref": "refs/tags/v0.1.0", "ref_name": "v0.1.0"},
        env=world["env"],
    )
    assert tag.run() == {"tag": "success"}
    run = _manual(world, "v0.1.0", "pypi")
    results = {j: r.result for j, r in run.jobs.items()}
    assert results["pypi-dist"] == results["pypi"] == "success", run.leg_log("pypi-dist")
    assert sorted(p.name for p in (world["stores"].root / "pypi").iterdir()) == [
        "bt_scatter-0.1.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        "bt_scatter-0.1.0.tar.gz",
    ]
    calls = run.calls()
    assert any(c.startswith("docker login ghcr.io --username octocat") for c in calls)
    # the images job (the repository's code, read-only) saved each image; the push job
    # (no checkout) checked the archive, pushed it, and the builds pull the digest it output
    assert run.jobs["push-images"].result == "success", run.leg_log("push-images")
    assert any(
        c.startswith("nox -s ci -- builder-image --profile release --only")
        and "--save builder-image/" in c
        for c in calls
    )
    assert not any("--push" in c for c in calls)
    pushed = [c for c in calls if c.startswith("docker push ghcr.io/example/builder:")]
    assert pushed and "archive sha256" in run.leg_log("push-images")
    assert any(c.startswith("docker pull --quiet ghcr.io/example/builder@sha256:") for c in calls)
    assert not any(c.startswith("docker pull --quiet ghcr.io/example/builder:") for c in calls)
    assert "python -m build --sdist --outdir dist examples/scatter" in calls
    # the push job's workspace held nothing of the repository (it checks nothing out)
    push_ws = sorted((world["tmp"] / "pypi").glob("ws*-push-images"))
    assert push_ws and all(not (ws / "matrix.yaml").exists() for ws in push_ws)


def test_the_push_job_pushes_only_the_archive_the_images_job_made(
    world: dict[str, Any],
) -> None:
    """Another job of the run rewrites a builder image's archive (the run's artifacts are
    writable by all its jobs): the push job refuses it before docker reads it, pushes
    nothing, and the builds make their own image from the pinned base."""
    _reconfigure(world, "ci:\n  image_registry: ghcr.io/example/builder\n")

    def rewrite(run: LocalRun) -> None:
        for archive in sorted(run.artifacts.glob("builder-image-*/*.tar")):
            data = json.loads(archive.read_text())
            archive.write_text(json.dumps({**data, "id": "sha256:" + "e" * 64}))

    run = _manual(world, "v0.1.0", "tampered", only="torch2.13.0-cpu-cp312",
                  hooks={"push-images": rewrite})  # fmt: skip
    log = run.leg_log("push-images")
    assert run.jobs["push-images"].result == "failure", log
    assert "but the images job made" in log and "nothing is pushed" in log
    calls = run.calls()
    assert not any(c.startswith("docker push") for c in calls), calls
    assert "the build makes its own" in run.leg_log("build-cpu")
    assert run.jobs["build-cpu"].result == "success", run.leg_log("build-cpu")[-3000:]


def test_self_hosted_builds_of_a_pull_request(world: dict[str, Any]) -> None:
    repo = world["repo"]
    text = (
        (repo / "matrix.yaml")
        .read_text()
        .replace(
            "build: {cpu: ubuntu-24.04, cuda: ubuntu-24.04, rocm: ubuntu-24.04}",
            "build: {cpu: ubuntu-24.04, cuda: [self-hosted, linux, x64, build-xl], rocm: ubuntu-24.04}",
        )
    )
    (repo / "matrix.yaml").write_text(text)
    _reconfigure(world, "")
    pr = LocalRun(
        _workflow(repo, layout.PR_WORKFLOW),
        repo=repo,
        work=world["tmp"] / "pr",
        stores=world["stores"],
        github={"event_name": "pull_request", "repository": "example/bt-scatter"},
        env=world["env"],
    )
    pr.run()
    # only the aarch64 CUDA build (on GitHub's ARM runner) is in the pull request's run
    assert pr.jobs["status"].result == "success"
    assert [e["id"] for e, _ in pr.jobs["build-cuda"].legs] == ["torch2.11.0-cu130-cp312-aarch64"]
    run = LocalRun(
        _workflow(repo, layout.SELF_HOSTED_WORKFLOW),
        repo=repo,
        work=world["tmp"] / "sh",
        stores=world["stores"],
        github={
            "event_name": "workflow_run",
            "repository": "example/bt-scatter",
            "event": {
                "workflow_run": {
                    "event": "pull_request",
                    "conclusion": "success",
                    "id": 7,
                    "head_sha": _git(repo, "rev-parse", "HEAD"),
                    "head_repository": {"full_name": "example/bt-scatter"},
                }
            },
        },
        env={**world["env"], "BT_OTHER_RUN_ARTIFACTS": str(pr.artifacts)},
    )
    run.run()
    assert {j: r.result for j, r in run.jobs.items()} == {
        "plan": "success", "build-cuda": "success", "smoke-cuda": "success",
        "smoke-cuda-aarch64": "success", "status": "success", "commit-status": "success",
    }, run.leg_log("plan")  # fmt: skip
    # the x86 CUDA wheel was built here, the aarch64 one by the pull request's run
    assert [e["id"] for e, _ in run.jobs["build-cuda"].legs] == ["torch2.11.0-cu130-cp312"]
    # caches are restored, never saved, by a pull request's code
    assert not any("saved bt-" in log for job in run.jobs.values() for log in job.logs)


def _backfill(world: dict[str, Any], name: str) -> LocalRun:
    run = LocalRun(
        _workflow(world["repo"], ".github/workflows/backfill.yml"),
        repo=world["repo"],
        work=world["tmp"] / name,
        stores=world["stores"],
        github={
            "event_name": "schedule",
            "repository": "example/bt-scatter",
            "ref": "refs/heads/main",
            "event": {"repository": {"default_branch": "main"}},
        },
        env={**world["env"], "GITHUB_TOKEN": "t0ken"},
    )
    run.run()
    return run


def test_a_backfill_releases_what_the_latest_tag_lacks_then_nothing(
    world: dict[str, Any],
) -> None:
    _manual(world, "v0.1.0", "first")  # a release that published three cells only
    assert len(_served(world)["wheels"]) == 3
    run = _backfill(world, "backfill")
    assert run.jobs["missing"].result == "success", run.leg_log("missing")[-3000:]
    [dispatch] = [c for c in run.calls() if c.startswith("gh workflow run")]
    prefix = "gh workflow run release.yml --repo example/bt-scatter --ref main -f tag=v0.1.0 "
    assert dispatch.startswith(prefix + "-f only=")
    fields, _, window = dispatch.removeprefix(prefix + "-f only=").partition(" -f window=")
    only = fields.split()
    assert window.strip() == ""  # no new torch inside a stable window: nothing smoke-only
    # every smoke-tested cell of the release profile but the three published (ROCm has no
    # smoke runner: never published, never backfilled)
    assert len(only) == 26 - 3 and "torch2.13.0-cpu-cp312" not in only
    assert not any("rocm" in cell for cell in only)
    assert "23 cell(s) missing, released now" in run.leg_log("missing")
    # what the dispatch starts: release.yml for the tag, narrowed to exactly those cells
    second = _manual(world, "v0.1.0", "backfilled", only=" ".join(only), tag_repo=False)
    assert len(_served(world)["wheels"]) == 26, second.leg_log("status")[-3000:]
    again = _backfill(world, "again")
    assert again.jobs["missing"].result == "success"
    assert not any(c.startswith("gh workflow run") for c in again.calls())
    assert again.jobs["dispatch"].result == "skipped"
    assert "Nothing is missing: nothing is built." in again.leg_log("missing")
