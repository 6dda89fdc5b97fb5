"""`buildtools ci github`: the generated workflows' jobs, their safety rules, the drift check
and generation itself (no process is started). The job graph's scenarios are simulated in
test_ci_graph.py, the plan job in test_ci_plan.py, the publishing steps in test_ci_publish.py."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from buildtools.ciplan import layout
from buildtools.ciplan.layout import GENERATED_MARKER
from buildtools.cli.main import main
from buildtools.errors import CiDriftError, ExitCode
from buildtools.workflows.generate import check_files, generate, write_files
from buildtools.workflows.pins import load_pins, parse_requirements

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ci"
PINS = load_pins()
HOSTED = set(PINS.hosted_runners.labels)
SHA_USES = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(/[a-z]+)?@[0-9a-f]{40}$")


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
    return {
        g.path: load(g.text)
        for g in generate(matrix).files
        if g.path.startswith(".github/workflows/")
    }


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    return workflows(REPO / "matrix.yaml")


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return workflows(project(tmp_path_factory.mktemp("large"), FIXTURES / "matrix-large.yaml"))


@pytest.fixture(scope="module")
def huge(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return workflows(project(tmp_path_factory.mktemp("huge"), FIXTURES / "matrix-huge.yaml"))


def jobs(files: dict[str, Any], path: str) -> dict[str, Any]:
    result: dict[str, Any] = files[path]["jobs"]
    return result


def all_jobs(files: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, doc in files.items():
        for name, job in doc["jobs"].items():
            yield path, name, job


def steps(files: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, name, job in all_jobs(files):
        for step in job.get("steps", []):
            yield path, name, step


# -- the files and the job graph ------------------------------------------------------------


def test_the_files(reference: dict[str, Any], large: dict[str, Any]) -> None:
    assert set(reference) == {
        layout.TAG_WORKFLOW,
        layout.RELEASE_WORKFLOW,
        layout.PR_WORKFLOW,
        layout.SELF_HOSTED_WORKFLOW,  # the CUDA smoke runner is self-hosted
        layout.CACHES_WORKFLOW,
        ".github/workflows/backfill.yml",
    }
    assert reference[layout.TAG_WORKFLOW]["on"] == {"push": {"tags": ["v*"]}}
    assert reference[layout.RELEASE_WORKFLOW]["on"]["workflow_run"] == {
        "workflows": [layout.TAG_NAME],
        "types": ["completed"],
    }
    assert reference[layout.SELF_HOSTED_WORKFLOW]["on"]["workflow_run"]["workflows"] == [
        layout.PR_NAME
    ]
    assert reference[layout.CACHES_WORKFLOW]["on"]["schedule"] == [{"cron": "23 4 * * 1"}]
    names = {path: doc["name"] for path, doc in reference.items()}
    assert names[layout.TAG_WORKFLOW] == layout.TAG_NAME
    assert names[layout.PR_WORKFLOW] == layout.PR_NAME


def test_release_graph_is_per_family(reference: dict[str, Any]) -> None:
    graph = jobs(reference, layout.RELEASE_WORKFLOW)
    assert list(graph) == [
        "plan", "images", "build-cpu", "build-cuda", "build-rocm", "smoke-cpu",
        "smoke-cpu-aarch64", "smoke-cuda", "smoke-cuda-aarch64", "smoke-window-cpu", "prepare",
        "publish", "pages",
        "status",
    ]  # fmt: skip
    for group in ("cpu", "cuda", "cpu-aarch64", "cuda-aarch64"):
        smoke = graph[f"smoke-{group}"]
        family = group.split("-")[0]
        # a smoke job waits for its own family's builds only
        assert smoke["needs"] == ["plan", f"build-{family}"]
        assert f"(needs.build-{family}.result == 'success' || " in smoke["if"]
        assert smoke["strategy"]["matrix"] == (
            f"${{{{ fromJSON(needs.plan.outputs.smoke_{group.replace('-', '_')}) }}}}"
        )
    assert graph["smoke-cuda"]["runs-on"] == ["self-hosted", "linux", "gpu-h100"]
    # the aarch64 wheels on ARM machines (Grace Hopper: the GH200 runner)
    assert graph["smoke-cuda-aarch64"]["runs-on"] == ["self-hosted", "linux", "arm64", "gh200"]
    assert graph["smoke-cpu-aarch64"]["runs-on"] == "ubuntu-24.04-arm"
    # an aarch64 job on an x86 runner (runners.linux_aarch64.emulate) gets QEMU
    qemu = next(s for s in graph["build-cpu"]["steps"] if s["name"].startswith("Set up QEMU"))
    assert qemu["if"] == "matrix.platform == 'linux_aarch64' && runner.arch != 'ARM64'"
    assert graph["build-cuda"]["needs"] == ["plan", "images"]
    assert "!cancelled()" in graph["build-cuda"]["if"]  # the image job is optional
    # the release is prepared once every build and smoke job passed, or had no work
    gate = graph["prepare"]["if"]
    for job in ("build-cpu", "build-cuda", "build-rocm", "smoke-cpu", "smoke-cuda-aarch64"):
        assert (
            f"(needs.{job}.result == 'success' || (needs.{job}.result == 'skipped' && "
            f"needs.plan.outputs.run_{job.replace('-', '_')} != 'true'))"
        ) in gate
    # and signed only from what the prepare job bundled (its digest, its output)
    assert graph["publish"]["needs"] == ["plan", "prepare", "build-cpu", "build-cuda", "build-rocm"]
    assert "needs.prepare.result == 'success'" in graph["publish"]["if"]
    assert graph["pages"]["needs"] == ["plan", "publish"]
    assert set(graph["status"]["needs"]) == set(graph) - {"status"}
    assert graph["status"]["if"] == "always()"


def test_huge_matrix_splits_a_family_into_matrices_of_256(huge: dict[str, Any]) -> None:
    graph = jobs(huge, layout.RELEASE_WORKFLOW)
    assert [j for j in graph if j.startswith(("build-", "smoke-"))] == [
        "build-cpu", "build-cuda-1", "build-cuda-2", "build-rocm",
        "smoke-cuda-1", "smoke-cuda-2", "smoke-rocm",
    ]  # fmt: skip
    assert graph["smoke-cuda-2"]["needs"] == ["plan", "build-cuda-2"]
    plan = next(s for s in graph["plan"]["steps"] if s.get("id") == "plan")
    assert "--shape 'cpu=1,cuda=2,rocm=1;build=cpu,cuda,rocm;smoke=cuda,rocm;images=" in plan["run"]
    assert graph["plan"]["outputs"]["build_cuda_2"] == "${{ steps.plan.outputs.build_cuda_2 }}"
    # the ROCm build runner is self-hosted: never in the pull request workflow
    assert "build-rocm" not in jobs(huge, layout.PR_WORKFLOW)
    assert "build-rocm" in jobs(huge, layout.SELF_HOSTED_WORKFLOW)


def test_release_triggers_and_dispatch_inputs(reference: dict[str, Any]) -> None:
    on = reference[layout.RELEASE_WORKFLOW]["on"]
    inputs = on["workflow_dispatch"]["inputs"]
    assert inputs["tag"] == {
        "description": "The tag to release or rebuild (e.g. v1.2.0); it is checked out",
        "type": "string",
        "required": True,
    }
    assert inputs["only"]["type"] == inputs["unsmoked"]["type"].replace("boolean", "string")
    assert inputs["publish"]["default"] is True and inputs["unsmoked"]["default"] is False
    plan = jobs(reference, layout.RELEASE_WORKFLOW)["plan"]
    assert plan["if"].startswith("github.event_name == 'workflow_dispatch' || ")
    # a fork's run of a workflow named release-tag does not start a release
    assert "head_repository.full_name == github.repository" in plan["if"]
    # the tag is vetted first, before anything is checked out, then its commit checked out
    vet, checkout = plan["steps"][:2]
    tag = "${{ inputs.tag || github.event.workflow_run.head_branch }}"
    assert vet["id"] == "vet" and "uses" not in vet
    assert vet["env"]["BT_TAG"] == tag and "BT_TAG_PATTERN" in vet["env"]
    assert vet["env"]["BT_EXPECT_SHA"] == "${{ github.event.workflow_run.head_sha }}"
    assert checkout["with"]["ref"] == "${{ steps.vet.outputs.sha }}"
    assert plan["outputs"]["sha"] == "${{ steps.vet.outputs.sha }}"
    step = next(s for s in plan["steps"] if s.get("id") == "plan")
    # inputs reach the script through env, never interpolated into it
    assert step["env"]["BT_TAG"] == "${{ steps.vet.outputs.tag }}"
    assert step["env"]["BT_ONLY"] == "${{ inputs.only }}"
    assert '--tag "$BT_TAG" --sha "$sha" --published-from-releases' in step["run"]
    # every later job checks out the commit the plan resolved the tag to
    for name, job in jobs(reference, layout.RELEASE_WORKFLOW).items():
        checkouts = [s for s in job["steps"] if "actions/checkout@" in str(s.get("uses"))]
        if name != "plan":
            assert all(s["with"]["ref"] == "${{ needs.plan.outputs.sha }}" for s in checkouts)


def test_no_pages_without_base_url(tmp_path: Path) -> None:
    text = (
        (REPO / "matrix.yaml")
        .read_text()
        .replace("  base_url: https://example.github.io/bt-scatter/whl\n", "")
    )
    files = workflows(project(tmp_path, REPO / "matrix.yaml", text=text))
    graph = jobs(files, layout.RELEASE_WORKFLOW)
    assert "pages" not in graph and "pages" not in graph["publish"]["permissions"]
    uses = [str(s.get("uses", "")) for _, _, s in steps(files)]
    assert not any("pages" in u for u in uses)
    # the record and the site artifact still are
    assert any(
        "Upload to the draft release, record" in s["name"] for s in graph["publish"]["steps"]
    )
    assert any(s["name"] == "Upload site" for s in graph["publish"]["steps"])


def test_pypi_is_off_by_default_and_reviewed_when_on(
    reference: dict[str, Any], tmp_path: Path
) -> None:
    assert not any("pypi" in j for j in jobs(reference, layout.RELEASE_WORKFLOW))
    text = (REPO / "matrix.yaml").read_text() + (
        "ci:\n  pypi: {torch: '2.13.0', accelerator: cu130, environment: release-pypi}\n"
    )
    graph = jobs(
        workflows(project(tmp_path, REPO / "matrix.yaml", text=text)), layout.RELEASE_WORKFLOW
    )
    dist, pypi = graph["pypi-dist"], graph["pypi"]
    assert dist["needs"] == ["plan", "publish"] and "id-token" not in dist["permissions"]
    download = next(s for s in dist["steps"] if "Download the variant" in s["name"])
    assert download["with"]["pattern"] == "wheels-torch2.13.0-cu130-*"
    assert pypi["environment"] == {
        "name": "release-pypi",
        "url": "https://pypi.org/project/bt-scatter/",
    }
    assert pypi["permissions"] == {"id-token": "write"}
    publish = pypi["steps"][-1]
    assert publish["uses"].startswith("pypa/gh-action-pypi-publish@")
    assert publish["with"] == {"packages-dir": "dist/", "attestations": True}
    assert [s.get("run") for s in pypi["steps"] if "run" in s] == []  # only the action


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The reference matrix with a registry for the builder images and PyPI publishing."""
    text = (REPO / "matrix.yaml").read_text() + (
        "ci:\n  image_registry: ghcr.io/example/builder\n"
        "  pypi: {torch: '2.13.0', accelerator: cu130}\n"
    )
    return workflows(project(tmp_path_factory.mktemp("registry"), REPO / "matrix.yaml", text=text))


@pytest.mark.parametrize("path", [layout.RELEASE_WORKFLOW, layout.CACHES_WORKFLOW])
def test_images_through_a_registry(registry: dict[str, Any], path: str) -> None:
    """The job that builds an image runs the repository's code and only reads; the one that
    pushes checks nothing out, runs no repository code and takes only the archive whose
    sha256 (and image ID) the images job output."""
    graph = jobs(registry, path)
    images, push = graph["images"], graph["push-images"]
    assert images["permissions"] == {"contents": "read", "packages": "read"}
    build = next(s for s in images["steps"] if s.get("id") == "image")["run"]
    assert "--push" not in build and '--save "builder-image/$IMAGE_FILE"' in build
    assert '{ echo "image_$BT_SLOT=$id"; echo "archive_$BT_SLOT=$sha"; }' in build
    slots = len(images["outputs"]) // 2
    assert slots and images["outputs"] == {
        f"{name}_{n}": f"${{{{ steps.image.outputs.{name}_{n} }}}}"
        for n in range(1, slots + 1)
        for name in ("image", "archive")
    }
    assert push["permissions"] == {"packages": "write"}
    assert push["needs"] == ["plan", "images"] and push["runs-on"] in HOSTED
    assert push["outputs"] == {
        f"image_{n}": f"${{{{ steps.image.outputs.image_{n} }}}}" for n in range(1, slots + 1)
    }
    uses = [s["uses"].split("@")[0] for s in push["steps"] if "uses" in s]
    assert uses == ["actions/download-artifact"]
    names = [s["name"] for s in push["steps"]]
    check = push["steps"][
        names.index("Check the archive and the image against the images job's outputs")
    ]
    assert check["env"]["BT_IMAGES"] == "${{ toJSON(needs.images.outputs) }}"
    assert "github.token" not in str(check["env"])
    run = check["run"]
    assert (
        run.index('if [ "$got" != "$sha" ]; then')
        < run.index("docker load")
        < run.index('if [ "$loaded" != "$id" ]; then')
    )
    # the token reaches only the login, after the check; the push follows it
    login = names.index("Log in to ghcr.io")
    assert names.index(check["name"]) < login < names.index("Push the builder image")
    for step in push["steps"][login:]:
        assert step["if"] == "steps.load.outputs.push == 'true'", step["name"]
    if path == layout.RELEASE_WORKFLOW:
        # the builds pull by the digest the push job output, never by tag
        build_job = graph["build-cpu"]
        assert build_job["needs"] == ["plan", "images", "push-images"]
        assert build_job["permissions"] == {"contents": "read", "packages": "read"}
        pull = next(s for s in build_job["steps"] if s["name"].startswith("Pull this run's"))
        assert pull["env"]["BT_IMAGES"] == "${{ toJSON(needs.push-images.outputs) }}"
    else:
        assert "docker manifest inspect" in build  # the cache run skips what is there
    pr_build = jobs(registry, layout.PR_WORKFLOW)["build-cpu"]
    assert pr_build["permissions"] == {"contents": "read", "packages": "read"}
    pull = next(s for s in pr_build["steps"] if s["name"] == "Pull the builder image")
    assert pull["env"]["REGISTRY"] == "ghcr.io/example/builder"


# -- safe by construction ---------------------------------------------------------------------


@pytest.mark.parametrize("files_name", ["reference", "large", "huge"])
def test_every_action_is_pinned_by_sha_with_its_version(
    files_name: str, request: pytest.FixtureRequest
) -> None:
    files = request.getfixturevalue(files_name)
    seen = set()
    for path, job, step in steps(files):
        if "uses" in step:
            assert SHA_USES.match(step["uses"]), (path, job, step["uses"])
            seen.add("/".join(step["uses"].split("@")[0].split("/")[:2]))
    # pypa/gh-action-pypi-publish: only with ci.pypi; actions/github-script: only with
    # build.compiler_cache: sccache (test_sccache_actions_cache_only_for_pull_requests…)
    optional = {"pypa/gh-action-pypi-publish", "actions/github-script"}
    assert seen == set(PINS.actions) - optional
    source = generate(REPO / "matrix.yaml")
    for gen in source.files:
        for line in gen.text.splitlines():
            if line.strip().startswith(("uses:", "- uses:")):
                m = re.search(r"uses: ([^@\s]+)@([0-9a-f]{40}) # (v\d+\.\d+\.\d+)$", line)
                assert m, line
                pin = PINS.actions["/".join(m.group(1).split("/")[:2])]
                assert (m.group(2), m.group(3)) == (pin.sha, pin.version)


# the permissions each job may have; anything else is a test failure
PERMISSIONS = {
    # build jobs never sign: the publish job attests what passed its smoke tests
    "build": [{"contents": "read"}],
    "plan": [{"contents": "read"}, {"contents": "read", "attestations": "read"}],
    "publish": [{"contents": "write", "id-token": "write", "attestations": "write"}],
    # reads the published record and verifies its attestation; signs nothing
    "prepare": [{"contents": "read", "attestations": "read"}],
    "pages": [{"pages": "write", "id-token": "write"}],
    "index": [{"contents": "read"}],  # the pull request's preview
    "pypi-dist": [{"contents": "read", "attestations": "read"}],
    "pypi": [{"id-token": "write"}],
    "tag": [{}],
    "smoke": [{"contents": "read"}, {"contents": "read", "actions": "read"}],
    "status": [{"contents": "read"}],
    # self-hosted.yml: posts the status job's verdict, nothing checked out
    "commit-status": [{"statuses": "write"}],
    # backfill.yml: one job reads the tag and the record, another starts release.yml
    "dispatch": [{"actions": "write"}],
}


@pytest.mark.parametrize("files_name", ["reference", "large", "registry"])
def test_no_job_that_can_write_runs_repository_code(
    files_name: str, request: pytest.FixtureRequest
) -> None:
    """A job holding a write permission or `id-token` checks nothing out and runs no nox,
    pip or python: the runner's tools and pinned actions only."""
    files = request.getfixturevalue(files_name)
    seen = set()
    for path, name, job in all_jobs(files):
        if not _can_write(files[path], job):
            continue
        seen.add(name)
        uses = [str(s.get("uses", "")) for s in job["steps"]]
        runs = "\n".join(str(s.get("run", "")) for s in job["steps"])
        assert not any(
            u.startswith(("actions/checkout@", "actions/setup-python@")) for u in uses
        ), (path, name)
        for word in ("nox ", "pip ", "python", "buildtools "):
            assert word not in runs, (path, name, word)
    expected = {"publish", "pages", "commit-status", "dispatch"}
    if files_name == "registry":
        expected |= {"push-images", "pypi"}
    assert expected <= seen, seen


def _can_write(doc: dict[str, Any], job: dict[str, Any]) -> bool:
    """Whether a job's token has a write scope or may mint an OIDC token (`id-token`)."""
    grants = job.get("permissions", doc.get("permissions"))
    if grants is None or isinstance(grants, str):
        return grants != "read-all"  # no permissions anywhere: the repository's default
    return any(level == "write" for level in grants.values())


# a package installed from an index, by the tools a workflow could call
_INSTALL = re.compile(
    r"\b(?:pip3?|uv\s+pip|python3?\s+-m\s+pip)\s+(?:[^\n]*\s)?(?:install|download|sync)\b"
    r"|\buv\s+(?:sync|tool\s+install|add|run|pip\s+sync)\b|\b(?:pipx|uvx)\b"
)


def unhashed_installs(path: str, doc: dict[str, Any]) -> list[str]:
    """Every job of a workflow that holds a write scope or `id-token` and checks the
    repository out, runs nox (whose sessions install from the project's noxfile: a project
    `buildtools init` adopted installs buildtools by version, unhashed) or installs a package
    without `--require-hashes`."""
    found = []
    for name, job in doc["jobs"].items():
        if not _can_write(doc, job):
            continue
        for step in job.get("steps", []):
            where = f"{path}: {name}: {step.get('name', step.get('uses'))}"
            if str(step.get("uses", "")).startswith("actions/checkout@"):
                found.append(f"{where}: checks out the repository")
            script = str(step.get("run", "")).replace("\\\n", " ")
            for line in script.splitlines():
                code = line.split(" #", 1)[0]
                if re.search(r"(?:^|[;&|(]\s*|\s)nox(?:\s|$)", code):
                    found.append(f"{where}: runs nox ({code.strip()})")
                elif _INSTALL.search(code) and "--require-hashes" not in code:
                    found.append(f"{where}: installs without --require-hashes ({code.strip()})")
    return found


@pytest.mark.parametrize("files_name", ["reference", "large", "huge", "registry"])
def test_no_unhashed_install_where_a_token_can_write(
    files_name: str, request: pytest.FixtureRequest
) -> None:
    """Every generated workflow: no job that holds a write scope or `id-token` checks the
    repository out, runs nox or installs a package unhashed."""
    files = request.getfixturevalue(files_name)
    assert set(files) >= {layout.RELEASE_WORKFLOW, layout.CACHES_WORKFLOW, layout.PR_WORKFLOW}
    found = [problem for path, doc in files.items() for problem in unhashed_installs(path, doc)]
    assert found == []


def test_the_unhashed_install_check_can_fail(registry: dict[str, Any]) -> None:
    """The shape before the push job (the images job holding `packages: write` while it
    checks out and runs nox, as a registry's release had it) is caught, and so is any
    install without hashes; a hashed one, or a job that cannot write, is not."""
    release = registry[layout.RELEASE_WORKFLOW]
    old = dict(release["jobs"]["images"])
    old["permissions"] = {"contents": "read", "packages": "write"}
    found = unhashed_installs("release.yml", {"jobs": {"images": old}, "permissions": {}})
    assert any(p.endswith("checks out the repository") for p in found), found
    assert any("runs nox (nox -s ci -- builder-image" in p for p in found), found
    for script, caught in (
        ("pip install torch-buildtools==0.1.0", True),
        ("python -m pip install -r requirements.txt", True),
        ("uv pip install --system x", True),
        ("uv sync", True),
        ("pipx run twine upload dist/*", True),
        ("  if ok; then nox -s build; fi", True),
        ("python -m pip install --require-hashes --no-deps -r .github/ci-requirements.txt", False),
        ("echo 'no pip here'; docker push x", False),
    ):
        job = {"permissions": {"id-token": "write"}, "steps": [{"name": "s", "run": script}]}
        assert bool(unhashed_installs("w.yml", {"jobs": {"j": job}})) is caught, script
        job["permissions"] = {"contents": "read"}
        assert unhashed_installs("w.yml", {"jobs": {"j": job}}) == [], script


@pytest.mark.parametrize("files_name", ["reference", "large"])
def test_least_privilege_permissions(files_name: str, request: pytest.FixtureRequest) -> None:
    files = request.getfixturevalue(files_name)
    for path, name, job in all_jobs(files):
        assert files[path]["permissions"] == {}
        kind = name.split("-")[0] if name.split("-")[0] in ("build", "smoke") else name
        allowed = PERMISSIONS.get(kind, [{"contents": "read"}])
        assert job["permissions"] in allowed, (path, name, job["permissions"])
        writes = {k for k, v in job["permissions"].items() if v == "write"}
        if writes & {"contents", "pages", "id-token"}:
            # every job that can publish waits for the reviewers of a protected environment
            environment = job["environment"]
            name_ = environment if isinstance(environment, str) else environment["name"]
            assert name_ in ("release", "github-pages", "pypi"), (path, name)
            assert path == layout.RELEASE_WORKFLOW
        if job["permissions"].get("pages") == "write":
            assert job["environment"]["name"] == "github-pages"
            # the deploy checks nothing out and runs nothing: one action
            assert [s.get("uses", "").split("@")[0] for s in job["steps"]] == [
                "actions/deploy-pages"
            ]


@pytest.mark.parametrize("files_name", ["reference", "large", "huge"])
def test_pull_request_workflow_uses_hosted_runners_only(
    files_name: str, request: pytest.FixtureRequest
) -> None:
    files = request.getfixturevalue(files_name)
    for name, job in jobs(files, layout.PR_WORKFLOW).items():
        label = job["runs-on"]
        if label == "${{ matrix.runner }}":
            continue  # build jobs: the plan keeps only hosted ones (test_ci_graph.py)
        assert isinstance(label, str) and label in HOSTED, (name, label)
    # and the trusted workflows run only on trusted events
    for path in (layout.RELEASE_WORKFLOW, layout.SELF_HOSTED_WORKFLOW, layout.CACHES_WORKFLOW):
        if path in files:
            assert not {"pull_request", "pull_request_target", "push"} & set(files[path]["on"])


@pytest.mark.parametrize("files_name", ["reference", "large", "huge"])
def test_no_expression_inside_run_scripts(files_name: str, request: pytest.FixtureRequest) -> None:
    files = request.getfixturevalue(files_name)
    runs = 0
    for path, job, step in steps(files):
        if "run" in step:
            runs += 1
            assert "${{" not in step["run"], (path, job, step["name"])
            assert step["run"].startswith(("set -euo pipefail", "python -m pip install")) or (
                "docker login" in step["run"]
            )
    assert runs > 20


@pytest.mark.parametrize("files_name", ["reference", "large"])
def test_timeouts_concurrency_checkouts_and_artifacts(
    files_name: str, request: pytest.FixtureRequest
) -> None:
    files = request.getfixturevalue(files_name)
    for path, name, job in all_jobs(files):
        assert "timeout-minutes" in job, (path, name)
        for step in job["steps"]:
            uses = str(step.get("uses", ""))
            if "actions/checkout@" in uses:
                assert step["with"]["persist-credentials"] is False
            if "actions/upload-artifact@" in uses and step["with"]["name"].startswith("wheels-"):
                # a wheel artifact is never replaced; kept a bounded time; not zipped twice
                assert "overwrite" not in step["with"]
                assert step["with"]["compression-level"] == 0
                assert step["with"]["retention-days"] == (
                    30 if path == layout.RELEASE_WORKFLOW else 7
                )
            if "run" in step and "pip install" in step["run"]:
                assert "--require-hashes" in step["run"] and "--only-binary :all:" in step["run"]
    release = files[layout.RELEASE_WORKFLOW]
    # two runs of one tag wait for each other; builds of different tags run side by side;
    # only the publish (restore → record → deploy) is serialized, in the Pages group
    assert release["concurrency"] == {
        "group": "release-${{ inputs.tag || github.event.workflow_run.head_branch }}",
        "cancel-in-progress": False,
    }
    grouped = {n: j["concurrency"] for _, n, j in all_jobs({0: release}) if "concurrency" in j}
    pages = {"group": "pages", "cancel-in-progress": False}
    assert grouped == {"publish": pages, "pages": pages}
    assert files[layout.PR_WORKFLOW]["concurrency"]["cancel-in-progress"] is True


def test_caches_are_saved_only_in_their_own_namespace(reference: dict[str, Any]) -> None:
    for path, name, step in steps(reference):
        if "actions/cache/save@" in str(step.get("uses", "")):
            key = step["with"]["key"]
            if path == layout.PR_WORKFLOW:
                # a pull request saves only its compiler cache, under its own number
                assert key.startswith("bt-pr${{ github.event.pull_request.number }}-"), key
            else:
                # the scheduled cache workflow; a release reads no cache and saves none
                assert path == layout.CACHES_WORKFLOW, (path, name)
    build = jobs(reference, layout.PR_WORKFLOW)["build-cuda"]
    restore = {
        s["name"]: s["with"] for s in build["steps"] if "cache/restore@" in str(s.get("uses"))
    }
    assert restore["Restore downloads (torch, toolkit, build requirements)"] == {
        "path": "~/.cache/torch-buildtools/prefetch",
        "key": "${{ matrix.prefetch_key }}",
        "restore-keys": "${{ matrix.prefetch_restore }}",
    }
    assert restore["Restore the compiler cache"]["path"] == "${{ matrix.ccache_path }}"
    caches = jobs(reference, layout.CACHES_WORKFLOW)
    assert set(caches) == {"plan", "images", "prefetch", "status"}


def _sccache_steps(files: dict[str, Any], path: str) -> list[dict[str, Any]]:
    return [
        step
        for _, name, step in steps({path: files[path]})
        if name.startswith("build") and "actions/github-script@" in str(step.get("uses", ""))
    ]


def _with(tmp_path: Path, tool: str) -> dict[str, Any]:
    text = (REPO / "matrix.yaml").read_text(encoding="utf-8")
    assert "\nbuild:" not in text
    return workflows(
        project(tmp_path, REPO / "matrix.yaml", text=f"{text}\nbuild:\n  compiler_cache: {tool}\n")
    )


def test_sccache_actions_cache_only_for_pull_requests_in_their_own_scope(
    tmp_path: Path,
) -> None:
    """Trust: a pull request reads and writes sccache's Actions backend (the cache service
    scopes its writes to the pull request); the release reads no compiler cache at all
    (its objects cannot be verified), and self-hosted.yml (a branch's code in the default
    branch's scope) and the cache workflow get none either."""
    reference = _with(tmp_path, "sccache")
    found = _sccache_steps(reference, layout.PR_WORKFLOW)
    assert found
    for step in found:
        script = step["with"]["script"]
        assert "${{" not in script  # nothing of the run's context in the script
        exported = dict(re.findall(r"exportVariable\('(\w+)', '([^']*)'\)", script))
        assert exported["SCCACHE_GHA_ENABLED"] == "on"
        assert exported["SCCACHE_GHA_VERSION"] == "bt-rel-sccache-1"
        assert exported["SCCACHE_GHA_RW_MODE"] == "READ_WRITE"
        for var in ("ACTIONS_RESULTS_URL", "ACTIONS_RUNTIME_TOKEN"):
            assert f"exportVariable('{var}', process.env.{var} || '')" in script
    for path, doc in reference.items():
        if path != layout.PR_WORKFLOW:
            assert not _sccache_steps(reference, path), path
            text = str(doc)
            assert "SCCACHE_GHA" not in text and "ccache_path" not in text, path
    # the build step runs after the export (GITHUB_ENV reaches later steps only)
    build = jobs(reference, layout.PR_WORKFLOW)["build-cpu"]["steps"]
    names = [s.get("name", "") for s in build]
    assert names.index("Build (nox -s build)") > next(
        i for i, n in enumerate(names) if n.startswith("Compiler cache: sccache")
    )


def test_the_reference_ccache_keeps_its_directory_cache(reference: dict[str, Any]) -> None:
    """ccache (the default): no Actions backend, its directory restored per job."""
    for path in (layout.RELEASE_WORKFLOW, layout.PR_WORKFLOW):
        assert not _sccache_steps(reference, path)
        assert "SCCACHE" not in str(reference[path])


# -- determinism and drift ------------------------------------------------------------------


def test_committed_workflows_match_the_reference_matrix() -> None:
    ci = generate(REPO / "matrix.yaml")
    assert check_files(ci) == [], "run `nox -s ci` and commit .github/"
    out = io.StringIO()
    assert main(["ci", "github", "--matrix", str(REPO / "matrix.yaml"), "--check"], out=out) == 0


def test_generation_is_deterministic(tmp_path: Path) -> None:
    first = generate(project(tmp_path, FIXTURES / "matrix-large.yaml"))
    second = generate(tmp_path / "matrix.yaml")
    assert [(g.path, g.text) for g in first.files] == [(g.path, g.text) for g in second.files]
    for gen in first.files:
        assert gen.text.startswith(f"# {GENERATED_MARKER} from matrix.yaml")
        assert gen.text.endswith("\n") and not gen.text.endswith("\n\n")
        assert all(line == line.rstrip() for line in gen.text.splitlines())


def test_requirements_file_is_the_hashed_data(reference: dict[str, Any]) -> None:
    gen = next(g for g in generate(REPO / "matrix.yaml").files if g.path == layout.REQUIREMENTS)
    pins = parse_requirements(gen.text)
    assert pins["nox"][0] == PINS.python.nox
    assert {"virtualenv", "packaging", "build"} <= set(pins)


def test_nox_sessions_install_buildtools_from_the_hashed_lock() -> None:
    """Every workflow that runs nox names the lock (the noxfile installs from it), emitted."""
    files = generate(REPO / "matrix.yaml").files
    lock = next(g for g in files if g.path == layout.LOCK)
    assert parse_requirements(lock.text) == parse_requirements(PINS.lock)
    assert {"pydantic-core", "ruamel-yaml", "uv", "cibuildwheel"} <= set(
        parse_requirements(lock.text)
    )
    named = []
    for gen in files:
        if not gen.path.startswith(".github/workflows/"):
            continue
        doc = YAML(typ="safe").load(gen.text)
        steps = [s for job in doc["jobs"].values() for s in job.get("steps", [])]
        if any("nox -s" in s.get("run", "") for s in steps):
            assert doc["env"][layout.LOCK_ENV] == layout.LOCK, gen.path
            named.append(gen.path)
    assert {
        layout.RELEASE_WORKFLOW,
        layout.PR_WORKFLOW,
        layout.SELF_HOSTED_WORKFLOW,
        layout.CACHES_WORKFLOW,
    } <= set(named)


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
    assert ".github/workflows/release.yml: differs" in err
    assert ".github/actionlint.yaml: differs" in err
    assert "+  smoke-rocm:" in err
    assert "regenerate them with `nox -s ci`" in err
    assert main(["ci", "github", "--matrix", str(matrix)], out=io.StringIO()) == 0
    assert main(["ci", "github", "--matrix", str(matrix), "--check"], out=io.StringIO()) == 0


def test_a_file_no_longer_generated_is_stale(tmp_path: Path) -> None:
    matrix = project(tmp_path, REPO / "matrix.yaml")
    write_files(generate(matrix))
    # the last self-hosted runner goes: self-hosted.yml is obsolete
    text = matrix.read_text().replace("cuda: [self-hosted, linux, gpu-h100]", "cuda: ubuntu-24.04")
    matrix.write_text(
        text.replace("cuda: [self-hosted, linux, arm64, gh200]", "cuda: ubuntu-24.04-arm")
    )
    ci = generate(matrix)
    assert (
        check_files(ci)[0]
        == f"{layout.SELF_HOSTED_WORKFLOW}: no longer generated from matrix.yaml; remove it"
    )
    assert (layout.SELF_HOSTED_WORKFLOW, "removed") in write_files(ci)
    assert not (tmp_path / layout.SELF_HOSTED_WORKFLOW).exists()
    assert check_files(generate(matrix)) == []


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
    files = {g.path: load(g.text) for g in ci.files if g.path.startswith(".github/workflows/")}
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


def test_headers_say_what_each_workflow_does(tmp_path: Path) -> None:
    ci = generate(project(tmp_path, FIXTURES / "matrix-large.yaml"))
    release = next(g.text for g in ci.files if g.path == layout.RELEASE_WORKFLOW)
    assert "not smoke-tested, so never published: cpu (no runners.smoke.cpu)" in release
    assert "profile `release`, 66 cell(s) in 66 build job(s)" in release
    assert "smoke-tested on: cuda (self-hosted, linux, x64, gpu-a100); rocm" in release
    pr = next(g.text for g in ci.files if g.path == layout.PR_WORKFLOW)
    assert "GitHub-hosted runners only: a fork can edit this file." in pr


def test_drift_check_on_the_large_matrix(tmp_path: Path) -> None:
    matrix = project(tmp_path, FIXTURES / "matrix-large.yaml")
    write_files(generate(matrix))
    assert check_files(generate(matrix)) == []
    # the ROCm GPU runner gets another label: every workflow that names it, and the
    # actionlint config, are stale
    matrix.write_text(matrix.read_text().replace("gpu-mi300x", "gpu-mi355x"))
    stale = check_files(generate(matrix))
    # (zizmor's ignores name lines of the workflows: they follow whatever moves them)
    assert [p.split(":")[0] for p in stale if not p.startswith(layout.ZIZMOR_CONFIG)] == [
        layout.RELEASE_WORKFLOW,
        layout.PR_WORKFLOW,
        layout.SELF_HOSTED_WORKFLOW,
        layout.CACHES_WORKFLOW,
        layout.ACTIONLINT_CONFIG,
    ]
    # a torch release more changes the release plan: the workflows planned from it
    write_files(generate(matrix))
    matrix.write_text(matrix.read_text().replace('"2.13.0"]', '"2.12.0", "2.13.0"]', 1))
    stale = check_files(generate(matrix))
    assert [p.split(":")[0] for p in stale if not p.startswith(layout.ZIZMOR_CONFIG)] == [
        layout.RELEASE_WORKFLOW,
        layout.CACHES_WORKFLOW,
    ]
    assert "cell(s) in" in stale[0]
