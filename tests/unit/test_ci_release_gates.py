"""What the generated release.yml guarantees before anything is published (issue 22): the
tag is vetted before any checked-out code runs, every job that can write waits in a
protected environment, installs happen before any step holds a token, a release build
restores caches by exact key only and uses its own run's builder image checked by ID,
the publish attests only what passed its smoke tests and verifies it against the tag's
commit. The scripts themselves run end to end in tests/integration/test_ci_runs.py."""

from __future__ import annotations

import re
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


# what the signing job's scripts may run: bash and the runner image's own tools (the
# scripts' helper functions `api` and `pages` call curl)
_RUNNER_TOOLS = {
    "set", "cd", "if", "then", "else", "fi", "for", "do", "done", "while", "break", "continue",
    "echo", "exit", "printf", "read", "mapfile", "local", "trap", "return", "[",
    "sha256sum", "cut", "grep", "find", "diff", "cat", "sort", "sed", "stat", "mktemp",
    "jq", "curl", "gh", "api", "pages", "}", "{", "api(", "pages(", "[[", "true", ":",
}  # fmt: skip
_COMMAND_START = re.compile(r"(?:^|\$\(|<\(|\|\s|&&\s|\|\|\s|;\s)\s*(?:!\s+)?([^\s;)|]+)")


def _code(script: str) -> str:
    """`script` with the text of every quoted string replaced by Q (what is inside `$( )` of
    a double-quoted string stays: it runs)."""
    out, stack, i = [], ["code"], 0
    while i < len(script):
        c, state = script[i], stack[-1]
        if state == "single":
            if c == "'":
                stack.pop()
            i += 1
            continue
        if c == "\\":
            out.append("Q" if state == "double" else script[i : i + 2])
            i += 2
            continue
        if state == "double" and c == '"':
            stack.pop()
        elif state == "double" and script.startswith("$(", i):
            stack.append("code")
            out.append("$(")
            i += 2
            continue
        elif state == "double":
            out.append("Q")
        elif c == "'":
            stack.append("single")
            out.append("Q")
        elif c == '"':
            stack.append("double")
            out.append("Q")
        elif c == ")" and len(stack) > 1:
            stack.pop()
            out.append(c)
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _programs(script: str) -> set[str]:
    """The first word of every command of `script` (roughly: what a reviewer would list)."""
    found = set()
    code_text = re.sub(r"\[\[.*?\]\]", "[[", _code(script.replace("\\\n", " ")))
    code_text = code_text.replace("$((", "N").replace("$(", " $( ").replace("<(", " <( ")
    # a keyword starts a command after it, as `;` does
    code_text = re.sub(r"\b(?:if|then|do|while|else|elif|until)\s", "; ", code_text)
    for line in code_text.splitlines():
        code = line.split(" # ", 1)[0].strip()
        if not code or code.startswith("#"):
            continue
        for m in _COMMAND_START.finditer(code):
            word = m.group(1)
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\+?=.*", word):
                continue  # an assignment
            found.add(word)
    return found


def test_the_signing_job_checks_out_nothing_and_runs_no_repository_code(
    release: dict[str, Any],
) -> None:
    publish = release["jobs"]["publish"]
    assert publish["environment"] == "release"
    assert publish["permissions"] == {
        "contents": "write",
        "id-token": "write",
        "attestations": "write",
    }
    uses = [s["uses"].split("@")[0] for s in publish["steps"] if "uses" in s]
    # no checkout, no setup-python, no cache: the bundle, the attest action, the artifacts
    assert uses == [
        "actions/download-artifact",
        "actions/attest-build-provenance",
        "actions/attest-build-provenance",
        "actions/upload-artifact",
        "actions/upload-pages-artifact",
    ]
    runs = [s["run"] for s in publish["steps"] if "run" in s]
    assert len(runs) == 3
    programs = set().union(*(_programs(r) for r in runs))
    assert programs <= _RUNNER_TOOLS, programs - _RUNNER_TOOLS
    for forbidden in ("nox", "python", "pip", "buildtools", "uv", "bash", "source", "make"):
        assert forbidden not in programs
    # the bundle it downloads is bound by the digest the prepare job output
    check = _step(publish, "Check the bundle")
    assert check["env"]["BT_BUNDLE"] == "${{ needs.prepare.outputs.bundle }}"
    assert 'if [ "$got" != "$BT_BUNDLE" ]; then' in check["run"]
    assert "sha256sum --check --strict --quiet MANIFEST.sha256" in check["run"]
    assert release["jobs"]["prepare"]["outputs"] == {"bundle": "${{ steps.bundle.outputs.bundle }}"}
    # no token reaches the check; the attestation check and the upload get the job's token
    assert "github.token" not in str(check["env"])


def test_a_programs_list_that_can_fail() -> None:
    """The tool list above catches a repository step in the signing job's scripts."""
    assert "nox" in _programs("set -euo pipefail\nnox -s ci -- bundle --out x\n")
    assert "python" in _programs('x="$(python -c 1)"\n')
    assert "./tool" in _programs("if ./tool; then echo; fi\n")
    assert _programs('a="$(jq -r .id <<< "$b")"\n') == {"jq"}


def test_the_prepare_job_holds_no_write_permission_and_bundles_the_release(
    release: dict[str, Any],
) -> None:
    prepare = release["jobs"]["prepare"]
    assert prepare["permissions"] == {"contents": "read", "attestations": "read"}
    assert "environment" not in prepare and "concurrency" not in prepare
    names = [s["name"] for s in prepare["steps"]]
    order = [
        "Select the smoke-tested wheels the builds reported",
        "Restore the published record (authenticated, checked against Pages)",
        "Index the selection with links to the release (nox -s index)",
        "What to attest: the selection and the record",
        "Bundle what the signing job publishes (its digest: this job's output)",
        "Upload release-bundle",
    ]
    assert [n for n in names if n in order] == order
    bundle = _step(prepare, "Bundle what the signing job publishes")
    assert bundle["env"]["BT_RECORD"] == "${{ steps.site.outputs.record }}"
    assert "nox -s ci -- bundle --out release-bundle --wheels selected" in bundle["run"]
    upload = _step(prepare, "Upload release-bundle")
    assert upload["with"]["include-hidden-files"] is True
    # select and index run without the token
    for name in ("Select the smoke-tested wheels", "Index the selection"):
        assert "github.token" not in str(_step(prepare, name).get("env"))


def test_the_publish_attests_only_the_bundle_and_verifies_it_first(
    release: dict[str, Any],
) -> None:
    steps = release["jobs"]["publish"]["steps"]
    names = [s["name"] for s in steps]
    order = [
        "Download the release bundle",
        "Check the bundle: the prepare job's digest, the builds' wheels",
        "Attest provenance (SLSA)",
        "Attest the release (tag, commit, run)",
        "Verify each file's attestation (this run, the tag's commit)",
        "Upload to the draft release, record, publish it",
    ]
    assert [n for n in names if n in order] == order
    slsa, ours = (steps[names.index(n)] for n in order[2:4])
    assert slsa["with"] == {"subject-checksums": "release-bundle/attest/subjects.sha256"}
    assert ours["with"] == {
        "subject-checksums": "release-bundle/attest/subjects.sha256",
        "predicate-type": RELEASE_PREDICATE,
        "predicate-path": "release-bundle/attest/predicate.json",
    }
    check = steps[names.index(order[1])]["run"]
    assert "attest/subjects.sha256 is not the bundle's wheels and record" in check
    verify = steps[names.index(order[4])]
    assert (
        "gh attestation verify" in verify["run"] and "--deny-self-hosted-runners" in verify["run"]
    )
    assert verify["env"]["BT_SHA"] == "${{ needs.plan.outputs.sha }}"
    upload = steps[names.index(order[5])]["run"]
    assert upload.index("base-record") < upload.index("POST") < upload.index("linked.tsv")
    assert upload.index("linked.tsv") < upload.index("name=index.json") < upload.index("PATCH")
    assert "exit 11" in upload
    # the build jobs sign nothing
    for name, job in release["jobs"].items():
        if name.startswith(("build-", "smoke-", "images")) or name == "prepare":
            assert "id-token" not in job["permissions"], name
            assert not any("attest" in str(s.get("uses")) for s in job["steps"]), name


def test_the_pages_deploy_holds_only_pages_and_id_token(release: dict[str, Any]) -> None:
    pages = release["jobs"]["pages"]
    assert pages["permissions"] == {"pages": "write", "id-token": "write"}
    assert pages["environment"]["name"] == "github-pages"
    assert [s["uses"].split("@")[0] for s in pages["steps"]] == ["actions/deploy-pages"]
    upload = _step(release["jobs"]["publish"], "Upload the pages")
    assert upload["uses"].startswith("actions/upload-pages-artifact@")


def test_release_builds_read_no_cache_and_check_their_image(release: dict[str, Any]) -> None:
    """A release reads no cache a lower-trust job could write (downloads, compiler cache),
    saves none, and uses this run's builder image checked by the ID its images job output."""
    outputs = release["jobs"]["images"]["outputs"]
    count = len(outputs) // 2
    names = [f"{what}_{n}" for n in range(1, count + 1) for what in ("image", "archive")]
    assert list(outputs) == names and outputs
    plan = _step(release["jobs"]["plan"], "Plan the release profile")
    assert f";images={count};legs=cpu:" in plan["run"]
    # every slot's output reaches the step as JSON; the script picks its slot's (no computed
    # index inside an expression: zizmor's obfuscation audit)
    expected = "${{ toJSON(needs.images.outputs) }}"
    for name, job in release["jobs"].items():
        uses = [str(s.get("uses", "")) for s in job["steps"]]
        assert not any(u.startswith(("actions/cache", "actions/github-script")) for u in uses), name
        if not name.startswith("build-"):
            continue
        check = _step(job, "Load the builder image and check its ID")
        assert check["env"]["BT_IMAGES"] == expected
        assert check["env"]["BT_SLOT"] == "${{ matrix.image_slot }}"
        # the archive's sha256 before docker reads a byte of it, then the image's ID
        run = check["run"]
        assert run.index('if [ "$got_sha" != "$sha" ]; then') < run.index("docker load")
        assert run.index("docker load") < run.index('[ "$got" != "$expected" ]')
        download = _step(job, "Download this run's builder image")
        assert download["with"]["name"] == "builder-image-${{ matrix.image_slot }}"
        # the build's cache directory is an emptied one of its own: downloads from the
        # index only, no compiler cache from another run, and it says so
        build = _step(job, "Build (nox -s build)")["run"]
        lines = build.splitlines()
        assert lines[1:5] == [
            'export BUILDTOOLS_CACHE_DIR="${RUNNER_TEMP:?}/torch-buildtools"',
            'rm -rf "$BUILDTOOLS_CACHE_DIR"',
            'mkdir -p "$BUILDTOOLS_CACHE_DIR"',
            'export PIP_CACHE_DIR="$BUILDTOOLS_CACHE_DIR/pip"',
        ]
        assert "unset BUILDTOOLS_CCACHE_DIR BUILDTOOLS_UNITS_DIR" in lines
        assert "a release build reads no cache" in build
        assert lines.index('nox -s build -- "${args[@]}"') > 5
    image = _step(release["jobs"]["images"], "Build the builder image")
    assert '{ echo "image_$BT_SLOT=$id"; echo "archive_$BT_SLOT=$sha"; }' in image["run"]


def test_the_push_job_runs_only_the_runners_tools(tmp_path: Path) -> None:
    """With a registry, the job that can write to it (`packages: write`) checks nothing
    out, installs nothing and runs no repository code: docker, jq and coreutils of the
    hosted runner on the archive whose sha256 the images job output; the images job, which
    runs the repository's code, only reads."""
    extra = "ci:\n  image_registry: ghcr.io/example/builder\n"
    for path, doc in _files(tmp_path, extra).items():
        if "push-images" not in doc["jobs"]:
            assert path not in (layout.RELEASE_WORKFLOW, layout.CACHES_WORKFLOW), path
            continue
        push = doc["jobs"]["push-images"]
        assert push["permissions"] == {"packages": "write"}, path
        assert "write" not in doc["jobs"]["images"]["permissions"].values(), path
        uses = [s["uses"].split("@")[0] for s in push["steps"] if "uses" in s]
        assert uses == ["actions/download-artifact"], path
        runs = [s["run"] for s in push["steps"] if "run" in s]
        programs = set().union(*(_programs(r) for r in runs))
        allowed = _RUNNER_TOOLS | {"docker", "rm", "sudo", "df", "output", "output("}
        assert programs <= allowed, programs - allowed
        for forbidden in ("nox", "python", "pip", "buildtools", "uv", "bash", "source", "make"):
            assert forbidden not in programs
        assert "docker" in programs and "sha256sum" in programs


def test_branch_code_never_shares_a_key_a_release_reads(tmp_path: Path) -> None:
    text = REFERENCE.replace(
        "build: {cpu: ubuntu-24.04, cuda: ubuntu-24.04, rocm: ubuntu-24.04}",
        "build: {cpu: ubuntu-24.04, cuda: [self-hosted, linux, x64, big], rocm: ubuntu-24.04}",
    )
    files = _files(tmp_path, text=text)
    # self-hosted.yml runs a branch's code in the default branch's cache scope: it has no
    # compiler cache, and saves nothing (and no release reads any cache: above)
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
    # with sccache: the pull request reads and writes its own scope; the release and
    # self-hosted.yml get no Actions cache at all
    (tmp_path / "sccache").mkdir()
    default = _files(tmp_path / "sccache", text=text, extra="\nbuild:\n  compiler_cache: sccache\n")
    for path in (layout.RELEASE_WORKFLOW, layout.SELF_HOSTED_WORKFLOW):
        for name, job in default[path]["jobs"].items():
            assert "SCCACHE" not in str(job["steps"]), (path, name)
    script = _step(default[layout.PR_WORKFLOW]["jobs"]["build-cpu"], "Compiler cache: sccache")
    assert "'SCCACHE_GHA_RW_MODE', 'READ_WRITE'" in script["with"]["script"]


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
    select = _step(jobs["prepare"], "Select the smoke-tested wheels")
    assert select["env"]["BT_BUILT_BUILD_CUDA"] == "${{ toJSON(needs.build-cuda.outputs) }}"
    assert (
        "--built-env cpu=BT_BUILT_BUILD_CPU --built-env cuda=BT_BUILT_BUILD_CUDA" in select["run"]
    )
    # and the signing job checks the bundle's wheels against the same outputs again
    check = _step(jobs["publish"], "Check the bundle")
    assert check["env"]["BT_BUILT_BUILD_CUDA"] == "${{ toJSON(needs.build-cuda.outputs) }}"
    assert (
        "for var in BT_BUILT_BUILD_CPU BT_BUILT_BUILD_CUDA BT_BUILT_BUILD_ROCM "
        "BT_BUILT_WINDOW_CPU; do" in (check["run"])
    )


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


def test_each_smoke_leg_outputs_its_reports_digest_and_the_selection_binds_it(
    release: dict[str, Any],
) -> None:
    """A smoke report counts only for its own family and with the digest its leg output
    (`report_<leg>`): the selection gets every smoke job's outputs with its family."""
    jobs = release["jobs"]
    for name, family in (("smoke-cpu", "CPU"), ("smoke-cuda-aarch64", "CUDA_AARCH64")):
        smoke = jobs[name]
        assert smoke["outputs"]["report_0"] == "${{ steps.smoked.outputs.report_0 }}"
        step = _step(smoke, "Report the smoke report's sha256")
        assert step["env"] == {"BT_LEG": "${{ strategy.job-index }}"}
        assert 'echo "report_$BT_LEG=$sha" >> "$GITHUB_OUTPUT"' in step["run"]
        names = [s["name"] for s in smoke["steps"]]
        assert names.index("Smoke test (nox -s smoke)") < names.index(step["name"])
        select = _step(jobs["prepare"], "Select the smoke-tested wheels")
        assert select["env"][f"BT_SMOKED_{family}"] == f"${{{{ toJSON(needs.{name}.outputs) }}}}"
    run = _step(jobs["prepare"], "Select the smoke-tested wheels")["run"]
    assert "--built-env cpu=BT_BUILT_BUILD_CPU --built-env cuda=BT_BUILT_BUILD_CUDA" in run
    assert "--smoked-env cpu=BT_SMOKED_CPU --smoked-env cpu=BT_SMOKED_CPU_AARCH64" in run
    assert "--smoked-env cuda=BT_SMOKED_CUDA --smoked-env cuda=BT_SMOKED_CUDA_AARCH64" in run
    # the ROCm family has no smoke runner: no smoke job, so its wheels are never passed
    assert "rocm=BT_SMOKED" not in run and "smoke-rocm" not in jobs
