"""The release gates of issue 22, run end to end: every `run:` script of the generated
release.yml by bash, with the local GitHub of test_ci_runs.py (its releases API, the tag
API and attestations through the `gh` stub, Pages).

What they show: a tag that is not a release tag (or an input built to escape the script)
is refused before anything is checked out, with exit 4; a draft release's record is
skipped and named; a record someone uploaded by hand, or one linking wheels outside this
repository's release downloads, stops the release at the plan with exit 19; re-running
the publish job keeps the assets whose bytes are there and refuses other bytes under a
published name (exit 11); a builder image that is not the one this run's images job
built stops the build.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from fixtures.attestations import attest, certificate
from fixtures.localrun import LocalRun

from buildtools.ciplan import layout
from buildtools.cisteps.provenance import RELEASE_PREDICATE, release_predicate

from .test_ci_runs import DISPATCH, _assets, _git, _manual, _workflow, world

__all__ = ["world"]  # the fixture, shared with test_ci_runs.py

ONE = "torch2.13.0-cpu-cp312"


def _plan_only(world: dict[str, Any], name: str, *, github: Any, inputs: Any = None) -> LocalRun:
    """Only the plan job of release.yml (the vetting runs there, before any checkout)."""
    workflow = _workflow(world["repo"], layout.RELEASE_WORKFLOW)
    workflow["jobs"] = {"plan": workflow["jobs"]["plan"]}
    run = LocalRun(
        workflow,
        repo=world["repo"],
        work=world["tmp"] / name,
        stores=world["stores"],
        github=github,
        inputs=inputs,
        env={**world["env"], "GITHUB_TOKEN": "t0ken"},
    )
    run.run()
    return run


def _pushed(world: dict[str, Any], tag: str) -> dict[str, Any]:
    return {
        "event_name": "workflow_run",
        "repository": "example/bt-scatter",
        "ref": "refs/heads/main",
        "event": {
            "workflow_run": {
                "conclusion": "success",
                "event": "push",
                "head_branch": tag,
                "head_sha": _git(world["repo"], "rev-parse", "HEAD"),
                "head_repository": {"full_name": "example/bt-scatter"},
            },
            "repository": {"default_branch": "main"},
        },
    }


def test_a_tag_that_is_not_a_release_tag_is_refused_before_checkout(
    world: dict[str, Any],
) -> None:
    repo = world["repo"]
    _git(repo, "tag", "x1.0")
    _git(repo, "tag", "v0.1.0")
    cases = {
        # a pushed tag that is not v<version>
        "pushed": (_pushed(world, "x1.0"), None, "tag 'x1.0' is not a release tag"),
        # a manual run: the input is the tag name, nothing else
        "input": (
            DISPATCH,
            {"tag": 'v0.1.0"; touch "$HOME/pwned'},
            "is not a release tag (ci.tag_pattern: ^v(",
        ),
        "missing": (DISPATCH, {"tag": "v7.0.0"}, "tag v7.0.0 does not exist"),
        "branch": (
            {**DISPATCH, "ref": "refs/heads/feature"},
            {"tag": "v0.1.0"},
            "run the release from main (chosen: refs/heads/feature)",
        ),
    }
    for name, (github, inputs, why) in cases.items():
        run = _plan_only(world, f"vet-{name}", github=github, inputs=inputs)
        log = run.leg_log("plan")
        assert run.jobs["plan"].result == "failure", name
        assert why in log and "[exit 4]" in log, (name, log)
        # the vetting step failed first: nothing was checked out, nothing of the tag ran
        assert "checkout" not in log and not any(c.startswith("nox") for c in run.calls())
        assert not list(world["tmp"].glob(f"vet-{name}/ws*/.home/pwned"))


def test_an_annotated_tag_is_peeled_to_its_commit(world: dict[str, Any]) -> None:
    repo = world["repo"]
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "tag", "-a", "v0.1.0", "-m", "0.1.0")
    run = _plan_only(world, "annotated", github=_pushed(world, "v0.1.0"))
    assert run.jobs["plan"].result == "success", run.leg_log("plan")
    commit = _git(repo, "rev-parse", "v0.1.0^{commit}")
    assert commit != _git(repo, "rev-parse", "v0.1.0")  # the tag object is not the commit
    assert run.jobs["plan"].outputs["sha"] == commit
    assert f"tag v0.1.0 (version 0.1.0) is commit {commit}" in run.leg_log("plan")


def test_a_moved_tag_is_refused(world: dict[str, Any]) -> None:
    github = _pushed(world, "v0.1.0")
    github["event"]["workflow_run"]["head_sha"] = "0" * 40  # the push named another commit
    _git(world["repo"], "tag", "v0.1.0")
    run = _plan_only(world, "moved", github=github)
    assert "the tag moved; push a new tag" in run.leg_log("plan")


def _bump(world: dict[str, Any], version: str) -> None:
    init = world["repo"] / "examples" / "scatter" / "src" / "bt_scatter" / "__init__.py"
    text = init.read_text()
    old = text.split('__version__ = "', 1)[1].split('"', 1)[0]
    init.write_text(text.replace(f'__version__ = "{old}"', f'__version__ = "{version}"'))
    _git(world["repo"], "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", version)


def _record_of(world: dict[str, Any], tag: str) -> bytes:
    release = world["gh"].release(tag)
    asset = next(a for a in release["assets"] if a["name"] == "index.json")
    data: bytes = world["gh"].blobs[asset["id"]]
    return data


def test_a_draft_record_is_skipped_and_a_foreign_one_stops_the_release(
    world: dict[str, Any],
) -> None:
    first = _manual(world, "v0.1.0", "first", only=ONE)
    assert first.jobs["publish"].result == "success", first.leg_log("publish")
    record = _record_of(world, "v0.1.0")
    # an unfinished publish (or a planted draft) holds a newer index.json: not the record
    world["gh"].put("v0.1.9", "index.json", b'{"schema": "nothing"}', draft=True)
    _bump(world, "0.2.0")
    second = _manual(world, "v0.2.0", "second", only=ONE)
    assert second.jobs["publish"].result == "success", second.leg_log("publish")
    assert "skipped the index.json of the draft release v0.1.9" in second.leg_log("prepare")
    # a person uploads an index.json to a published release: the next release stops at
    # its plan, before anything is built, naming who uploaded what
    world["gh"].put("v0.2.1", "index.json", record, uploader="mallory")
    _bump(world, "0.3.0")
    third = _manual(world, "v0.3.0", "third", only=ONE)
    plan = third.leg_log("plan")
    assert third.jobs["plan"].result == "failure" and "[exit 19]" in plan
    assert "index.json of the release v0.2.1 was uploaded by mallory, not by the release" in plan
    assert third.jobs["status"].result == "failure"
    assert {j for j, r in third.jobs.items() if r.result == "success"} == set()


def test_a_record_linking_outside_the_release_downloads_stops_the_release(
    world: dict[str, Any],
) -> None:
    first = _manual(world, "v0.1.0", "first", only=ONE)
    assert first.jobs["publish"].result == "success", first.leg_log("publish")
    manifest = json.loads(_record_of(world, "v0.1.0"))
    for wheel in manifest["wheels"]:
        wheel["url"] = "https://evil.example/" + wheel["filename"]
    data = json.dumps(manifest).encode()
    # uploaded by the workflow's identity and attested by release.yml at main: only its
    # links give it away
    asset = world["gh"].put("v0.1.1", "index.json", data)
    predicate = release_predicate(
        tag="v0.1.1", commit="c" * 40, repository="example/bt-scatter", run_id="7", run_attempt="1"
    )
    attest(
        world["stores"].attested,
        [(hashlib.sha256(data).hexdigest(), "index.json")],
        predicate_type=RELEASE_PREDICATE,
        predicate=predicate,
        cert=certificate(run_id="7"),
    )
    assert asset["uploader"]["login"] == "github-actions[bot]"
    _bump(world, "0.2.0")
    run = _manual(world, "v0.2.0", "second", only=ONE)
    plan = run.leg_log("plan")
    assert run.jobs["plan"].result == "failure" and "[exit 19]" in plan, plan
    assert "links wheels outside this repository's release downloads" in plan
    assert "https://evil.example/bt_scatter-0.1.0" in plan


def test_a_rerun_of_the_publish_keeps_the_same_bytes_and_refuses_others(
    world: dict[str, Any],
) -> None:
    run = _manual(world, "v0.1.0", "first", only="torch2.13.0-cpu-cp312 torch2.13.0-cpu-cp311")
    assert run.jobs["publish"].result == "success", run.leg_log("publish")
    wheels = sorted(a for a in _assets(world, "v0.1.0") if a.endswith(".whl"))
    assert len(wheels) == 2
    again = run.rerun("publish")
    log = "\n".join(again.logs)
    assert again.result == "success", log
    for wheel in wheels:
        assert f"present    {wheel} (same bytes)" in log
    assert "0 uploaded, 2 already there" in log and "release v0.1.0: published already" in log
    assert sorted(a for a in _assets(world, "v0.1.0") if a.endswith(".whl")) == wheels
    # an asset of the same name with other bytes (someone replaced it): stop, say so
    gh = world["gh"]
    asset = next(a for a in gh.release("v0.1.0")["assets"] if a["name"] == wheels[0])
    gh.blobs[asset["id"]] = gh.blobs[asset["id"]] + b"\0"
    asset["size"] += 1
    asset["digest"] = "sha256:" + "0" * 64
    refused = run.rerun("publish")
    log = "\n".join(refused.logs)
    assert refused.result == "failure" and "[exit 11]" in log
    assert f"{wheels[0]}: the release v0.1.0 has an asset of this name with other bytes" in log


def test_a_record_made_between_prepare_and_publish_stops_the_publish(
    world: dict[str, Any],
) -> None:
    """Another release records its index.json after this run's prepare job merged the site:
    recording this one would drop that release's wheels, so the signing job stops."""
    first = _manual(world, "v0.1.0", "first", only=ONE)
    assert first.jobs["publish"].result == "success", first.leg_log("publish")
    _bump(world, "0.2.0")

    def meanwhile(run: LocalRun) -> None:
        world["gh"].put("v0.1.5", "index.json", _record_of(world, "v0.1.0"))

    run = _manual(world, "v0.2.0", "second", only=ONE, hooks={"publish": meanwhile})
    log = run.leg_log("publish")
    assert run.jobs["prepare"].result == "success"
    assert run.jobs["publish"].result == "failure", log
    assert "the release v0.1.5 recorded index.json" in log and "re-run the prepare job" in log
    assert world["gh"].release("v0.2.0") is None  # nothing uploaded


def test_a_builder_image_that_is_not_this_runs_stops_the_build(world: dict[str, Any]) -> None:
    def swap(run: LocalRun) -> None:
        for archive in run.artifacts.glob("builder-image-*/*.tar"):
            image = json.loads(archive.read_text())
            archive.write_text(json.dumps({**image, "id": "sha256:" + "e" * 64}))

    run = _manual(world, "v0.1.0", "image", only=ONE, hooks={"build-cpu": swap})
    log = run.leg_log("build-cpu")
    assert run.jobs["build-cpu"].result == "failure"
    # refused by the archive's sha256 (the images job's output) before docker loads it
    assert "but this run's images job made" in log and "not building with it" in log
    assert not any(c.startswith("docker load") for c in run.calls())
    assert "Build (nox -s build)" not in log.split("Load the builder image")[1].split("---")[1]
    assert run.jobs["publish"].result == "skipped"
