"""What the generated release.yml guarantees before anything is published (issue 22): the
tag is vetted before any checked-out code runs, every job that can write waits in a
protected environment, installs happen before any step holds a token, a release build
restores caches by exact key only and uses its own run's builder image checked by ID,
the publish attests only what passed its smoke tests and verifies it against the tag's
commit. The scripts themselves run end to end in tests/integration/test_ci_runs.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from buildtools.ciplan import layout
from buildtools.cisteps.provenance import RELEASE_PREDICATE
from buildtools.errors import ConfigError
from buildtools.matrix.ciconfig import DEFAULT_TAG_PATTERN
from buildtools.workflows.generate import generate
from buildtools.workflows.release import tag_glob

REPO = Path(__file__).resolve().parents[2]
REFERENCE = (REPO / "matrix.yaml").read_text(encoding="utf-8")


def _files(tmp_path: Path, extra: str = "", text: str = REFERENCE) -> dict[str, Any]:
    (tmp_path / ".git").mkdir(exist_ok=True)
    if not (tmp_path / "examples").exists():
        (tmp_path / "examples").symlink_to(REPO / "examples")
    (tmp_path / "matrix.yaml").write_text(text + extra)
    load = YAML(typ="safe", pure=True).load
    return {
        g.path: load(g.text)
        for g in generate(tmp_path / "matrix.yaml").files
        if "workflows/" in g.path
    }


@pytest.fixture(scope="module")
def release() -> dict[str, Any]:
    text = next(
        g.text for g in generate(REPO / "matrix.yaml").files if g.path.endswith("release.yml")
    )
    result: dict[str, Any] = YAML(typ="safe", pure=True).load(text)
    return result


def _step(job: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in job["steps"] if s.get("name", "").startswith(name))


def test_the_tag_is_vetted_before_anything_is_checked_out(release: dict[str, Any]) -> None:
    plan = release["jobs"]["plan"]
    vet = plan["steps"][0]
    assert vet["id"] == "vet" and set(vet) == {"name", "id", "env", "run"}
    assert vet["env"]["BT_TAG_PATTERN"] == DEFAULT_TAG_PATTERN
    # the tag and the dispatch input reach the script through env only
    assert vet["env"]["BT_TAG"] == "${{ inputs.tag || github.event.workflow_run.head_branch }}"
    assert "$BT_TAG =~ $BT_TAG_PATTERN" in vet["run"] and "exit 4" in vet["run"]
    # resolved through the API (no checkout): the commit every later job checks out
    assert 'gh api "repos/$GITHUB_REPOSITORY/git/ref/tags/$BT_TAG"' in vet["run"]
    assert plan["steps"][1]["with"]["ref"] == "${{ steps.vet.outputs.sha }}"
    for name, job in release["jobs"].items():
        for step in job["steps"]:
            if "actions/checkout@" in str(step.get("uses")) and name != "plan":
                assert step["with"]["ref"] == "${{ needs.plan.outputs.sha }}", name


def test_tag_pattern_and_environment_come_from_matrix_yaml(tmp_path: Path) -> None:
    extra = "ci:\n  tag_pattern: '^release-([0-9]+(\\.[0-9]+)*)$'\n  environment: ship-it\n"
    files = _files(tmp_path, extra)
    assert files[layout.TAG_WORKFLOW]["on"]["push"]["tags"] == ["release-*"]
    jobs = files[layout.RELEASE_WORKFLOW]["jobs"]
    assert jobs["plan"]["steps"][0]["env"]["BT_TAG_PATTERN"] == r"^release-([0-9]+(\.[0-9]+)*)$"
    assert jobs["publish"]["environment"] == "ship-it"


@pytest.mark.parametrize(
    ("pattern", "glob"),
    [
        (DEFAULT_TAG_PATTERN, "v*"),
        (r"^release-v([0-9.]+)$", "release-v*"),
        (r"^ext\.v([0-9.]+)$", "ext.v*"),
        (r"^vx?([0-9.]+)$", "v*"),
        (r"^([0-9.]+)$", "**"),
    ],
)
def test_the_tag_workflow_triggers_on_the_literal_start_of_the_pattern(
    pattern: str, glob: str
) -> None:
    assert tag_glob(pattern) == glob


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (r"^v(\\d+)$", "bash's extended regular expressions"),
        ("^v(.*)", "anchor the pattern"),
        ("^v[0-9]+$", "the first group"),
        ("^v((?:1))$", "bash's extended regular expressions"),
        ("^v([$", "is not a regular expression"),
    ],
)
def test_a_tag_pattern_bash_cannot_read_is_refused(
    tmp_path: Path, pattern: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=r"matrix\.yaml:\d+: ci\.tag_pattern") as err:
        _files(tmp_path, f"ci:\n  tag_pattern: '{pattern}'\n")
    assert message in str(err.value)


def test_publishing_waits_for_reviewers_and_installs_before_any_token(
    release: dict[str, Any],
) -> None:
    publish = release["jobs"]["publish"]
    assert publish["environment"] == "release"
    assert publish["permissions"] == {
        "contents": "write",
        "id-token": "write",
        "attestations": "write",
    }
    steps = publish["steps"]
    holds = [i for i, s in enumerate(steps) if "${{ github.token }}" in str(s.get("env"))]
    installs = [
        i
        for i, s in enumerate(steps)
        if "pip install" in s.get("run", "") or "--install-only" in s.get("run", "")
    ]
    assert installs and holds and max(installs) < min(holds)
    for step in steps[min(holds) :]:
        # nothing is installed once a step has held the token: every nox call reuses
        for line in step.get("run", "").splitlines():
            if line.lstrip().startswith("nox "):
                assert line.lstrip().startswith("nox --no-install "), line
    # select and index run without the token
    for name in ("Select the smoke-tested wheels", "Index the selection"):
        assert "github.token" not in str(_step(publish, name).get("env"))


def test_the_publish_attests_only_the_selection_and_verifies_it_first(
    release: dict[str, Any],
) -> None:
    steps = release["jobs"]["publish"]["steps"]
    names = [s["name"] for s in steps]
    order = [
        "Select the smoke-tested wheels the builds reported",
        "Restore the published record (authenticated, checked against Pages)",
        "Index the selection with links to the release (nox -s index)",
        "What to attest: the selection and the record",
        "Attest provenance (SLSA)",
        "Attest the release (tag, commit, run)",
        "Verify each file's attestation (this run, the tag's commit)",
        "Upload to the draft release, record, publish it",
    ]
    assert [n for n in names if n in order] == order
    slsa, ours = (steps[names.index(n)] for n in order[4:6])
    assert slsa["with"] == {"subject-checksums": "attest/subjects.sha256"}
    assert ours["with"] == {
        "subject-checksums": "attest/subjects.sha256",
        "predicate-type": RELEASE_PREDICATE,
        "predicate-path": "attest/predicate.json",
    }
    subjects = steps[names.index(order[3])]["run"]
    assert "find selected -name '*.whl'" in subjects and 'files+=("$SITE/index.json")' in subjects
    verify = steps[names.index(order[6])]
    assert "verify-provenance" in verify["run"] and verify["env"]["BT_SHA"] == (
        "${{ needs.plan.outputs.sha }}"
    )
    upload = steps[names.index(order[7])]["run"]
    assert upload.index("upload-assets") < upload.index("record --tag") < upload.index("--publish")
    # the build jobs sign nothing any more
    for name, job in release["jobs"].items():
        if name.startswith(("build-", "smoke-", "images")):
            assert "id-token" not in job["permissions"], name
            assert not any("attest" in str(s.get("uses")) for s in job["steps"]), name


def test_the_pages_deploy_holds_only_pages_and_id_token(release: dict[str, Any]) -> None:
    pages = release["jobs"]["pages"]
    assert pages["permissions"] == {"pages": "write", "id-token": "write"}
    assert pages["environment"]["name"] == "github-pages"
    assert [s["uses"].split("@")[0] for s in pages["steps"]] == ["actions/deploy-pages"]
    upload = _step(release["jobs"]["publish"], "Upload the pages")
    assert upload["uses"].startswith("actions/upload-pages-artifact@")


def test_release_builds_restore_by_exact_key_and_check_their_image(
    release: dict[str, Any],
) -> None:
    slots = release["jobs"]["images"]["outputs"]
    assert list(slots) == [f"image_{n}" for n in range(1, len(slots) + 1)] and slots
    plan = _step(release["jobs"]["plan"], "Plan the release profile")
    assert f";images={len(slots)};legs=cpu:" in plan["run"]
    # every slot's output reaches the step as JSON; the script picks its slot's (no computed
    # index inside an expression: zizmor's obfuscation audit)
    expected = "${{ toJSON(needs.images.outputs) }}"
    for name, job in release["jobs"].items():
        if not name.startswith("build-"):
            continue
        restores = [s for s in job["steps"] if "actions/cache/restore@" in str(s.get("uses"))]
        assert restores and all("restore-keys" not in s["with"] for s in restores), name
        assert {s["with"]["key"] for s in restores} == {
            "${{ matrix.prefetch_key }}",
            "bt-rel-${{ matrix.ccache_key }}",
        }
        check = _step(job, "Load the builder image and check its ID")
        assert check["env"]["BT_IMAGES"] == expected
        assert check["env"]["BT_SLOT"] == "${{ matrix.image_slot }}"
        assert '[ "$got" != "$expected" ]' in check["run"]
        download = _step(job, "Download this run's builder image")
        assert download["with"]["name"] == "builder-image-${{ matrix.image_slot }}"
        # the downloads are re-checked against their index (pip re-verifies each file)
        build = _step(job, "Build (nox -s build)")
        assert 'rm -rf "$BUILDTOOLS_CACHE_DIR/prefetch/.prefetched"' in build["run"]
    image = _step(release["jobs"]["images"], "Build the builder image")
    assert 'echo "image_$BT_SLOT=$id" >> "$GITHUB_OUTPUT"' in image["run"]
    assert not any("cache" in str(s.get("uses")) for s in release["jobs"]["images"]["steps"])


def test_branch_code_never_shares_a_key_a_release_reads(tmp_path: Path) -> None:
    text = REFERENCE.replace(
        "build: {cpu: ubuntu-24.04, cuda: ubuntu-24.04, rocm: ubuntu-24.04}",
        "build: {cpu: ubuntu-24.04, cuda: [self-hosted, linux, x64, big], rocm: ubuntu-24.04}",
    )
    files = _files(tmp_path, text=text)
    # self-hosted.yml runs a branch's code in the default branch's cache scope: it has no
    # compiler cache, and saves nothing
    for name, job in files[layout.SELF_HOSTED_WORKFLOW]["jobs"].items():
        for step in job["steps"]:
            uses = str(step.get("uses"))
            assert "actions/cache/save@" not in uses, name
            if "actions/cache/restore@" in uses:
                assert "ccache" not in step["with"]["key"], name
    # a pull request's compiler cache lives under its own number, in its own scope
    build = files[layout.PR_WORKFLOW]["jobs"]["build-cpu"]
    ccache = _step(build, "Save the compiler cache")["with"]["key"]
    assert ccache == (
        "bt-pr${{ github.event.pull_request.number }}-${{ matrix.ccache_key }}-${{ github.run_id }}"
    )
    for path in (layout.PR_WORKFLOW, layout.SELF_HOSTED_WORKFLOW):
        for job in files[path]["jobs"].values():
            for step in job["steps"]:
                if "actions/cache/save@" in str(step.get("uses")):
                    assert not step["with"]["key"].startswith("bt-rel-"), path
    # with sccache: the release writes its version, the pull request reads it read-only,
    # self-hosted.yml gets no Actions cache at all
    (tmp_path / "sccache").mkdir()
    default = _files(tmp_path / "sccache", text=text, extra="\nbuild:\n  compiler_cache: sccache\n")
    release = _step(
        default[layout.RELEASE_WORKFLOW]["jobs"]["build-cpu"], "Compiler cache: sccache"
    )
    assert "'SCCACHE_GHA_RW_MODE', 'READ_WRITE'" in release["with"]["script"]
    for name, job in default[layout.SELF_HOSTED_WORKFLOW]["jobs"].items():
        assert "SCCACHE" not in str(job["steps"]), name
    script = _step(default[layout.PR_WORKFLOW]["jobs"]["build-cpu"], "Compiler cache: sccache")
    assert "'SCCACHE_GHA_RW_MODE', 'READ_ONLY'" in script["with"]["script"]


def test_the_publish_takes_only_the_bytes_the_build_legs_reported(release: dict[str, Any]) -> None:
    """Each build leg outputs what it built (`wheels_<leg>`, only it can set that): the
    selection refuses any other file a wheels-* artifact holds."""
    jobs = release["jobs"]
    for name in ("build-cpu", "build-cuda"):
        outputs = jobs[name]["outputs"]
        assert outputs["wheels_0"] == "${{ steps.built.outputs.wheels_0 }}"
        report = _step(jobs[name], "Report the wheels this job built")
        assert report["env"] == {"BT_LEG": "${{ strategy.job-index }}"}
        assert 'echo "wheels_$BT_LEG=$built" >> "$GITHUB_OUTPUT"' in report["run"]
    select = _step(jobs["publish"], "Select the smoke-tested wheels")
    assert select["env"]["BT_BUILT_BUILD_CUDA"] == "${{ toJSON(needs.build-cuda.outputs) }}"
    assert "--built-env BT_BUILT_BUILD_CPU --built-env BT_BUILT_BUILD_CUDA" in select["run"]


def test_zizmor_ignores_name_exactly_the_designed_lines() -> None:
    """The generated .github/zizmor.yml ignores `workflow_run` and the self-hosted runs-on
    lines, each at its line: any other finding still fails the lint."""
    files = {g.path: g.text for g in generate(REPO / "matrix.yaml").files}
    config = YAML(typ="safe", pure=True).load(files[layout.ZIZMOR_CONFIG])
    assert set(config["rules"]) == {"dangerous-triggers", "self-hosted-runner"}
    seen = 0
    for rule, body in config["rules"].items():
        for entry in body["ignore"]:
            name, line = entry.split(":")
            text = files[f"{layout.WORKFLOWS_DIR}/{name}"].splitlines()[int(line) - 1]
            if rule == "dangerous-triggers":
                assert text == "  workflow_run:", entry
            else:
                assert text == "    runs-on:", entry  # a list of labels: self-hosted
            seen += 1
    # release.yml and self-hosted.yml start on workflow_run; the GPU smoke jobs are self-hosted
    assert config["rules"]["dangerous-triggers"]["ignore"] == [
        "release.yml:16",
        "self-hosted.yml:13",
    ]
    assert seen == 6
