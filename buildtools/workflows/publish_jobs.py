"""The jobs after the builds: prepare and publish the release, Pages, PyPI, status.

- `prepare` runs only when every build and smoke job with work passed, with read
  permissions only: it keeps the wheels a smoke report of their own family passed and a
  build leg reported, restores the published record (authenticated: `cisteps.record`),
  indexes the selection with links to the release assets (`--wheel-url`), writes what to
  attest (the release statement names the tag's commit and the run:
  `cisteps.provenance`), and bundles all of it (`cisteps.bundle`), outputting the
  bundle's digest.
- `publish` signs and publishes, in the protected environment `ci.environment` (its
  reviewers approve each publish) and the Pages concurrency group (`ci.pages_group`,
  never cancelled). It checks nothing out and runs no repository code: the bundle is
  checked against the prepare job's digest and the builds' outputs, attested by the
  pinned action, the attestations verified with `gh`, the release's assets uploaded,
  checked, recorded and published through the REST API (`workflows.signing`).
- `pages` deploys the uploaded pages: `pages: write` and `id-token: write` only, the
  `github-pages` environment, no checkout, no install.
- `pypi-dist` / `pypi` (optional, `ci.pypi`): the one variant without its local label, and
  an sdist, published by trusted publishing from a reviewed environment.
- `status` always runs last: the one required check, with the final summary.
"""

from __future__ import annotations

__all__ = [
    "commit_status_job",
    "drift_job",
    "gate_condition",
    "pages_job",
    "prepare_job",
    "preview_job",
    "publish_job",
    "pypi_jobs",
    "status_job",
]

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import quote

from ..ciplan import layout
from ..ecosystem import load_ecosystem
from .jobparts import WorkflowSpec
from .publish_scripts import (
    ATTEST_DIR,
    bundle_script,
    index_script,
    preview_script,
    pypi_dist_script,
    pypi_verify_script,
    restore_script,
    select_script,
    subjects_script,
)
from .scripts import bash, commit_status_script, status_script
from .signing import BUNDLE_DIR, attestation_check_script, bundle_check_script, release_script
from .window_jobs import window_built_env, window_plan_output

_WHEELS = f"{layout.ARTIFACTS}/wheels"
_SMOKE = f"{layout.ARTIFACTS}/smoke"
_ATTEST = f"{BUNDLE_DIR}/{ATTEST_DIR}"
_BUNDLE_SITE = f"{BUNDLE_DIR}/site"


def pages_enabled(wf: WorkflowSpec) -> bool:
    """Deploy to GitHub Pages when `index.base_url` says where the site is served."""
    return bool(wf.mf.matrix.index.base_url)


def gate_condition(jobs: list[str], flag: str) -> str:
    """Run only when the plan passed, `flag` is set, and each of `jobs` passed or had no work."""
    parts = [
        "!cancelled()",
        "needs.plan.result == 'success'",
        f"needs.plan.outputs.{layout.run_flag(flag)} == 'true'",
    ]
    for job in jobs:
        result = f"needs.{job}.result"
        parts.append(
            f"({result} == 'success' || ({result} == 'skipped' && "
            f"needs.plan.outputs.{layout.run_flag(job)} != 'true'))"
        )
    return "${{ " + " && ".join(parts) + " }}"


def _after(job: str, flag: str) -> str:
    """Run when `job` passed and the plan set `flag` (explicit: a default success() would be
    false for any job skipped further up, such as an image job with nothing to build)."""
    return (
        f"${{{{ !cancelled() && needs.{job}.result == 'success' && "
        f"needs.plan.outputs.{layout.run_flag(flag)} == 'true' }}}}"
    )


def _tag_env() -> dict[str, str]:
    """The vetted tag and its commit (the plan job's vetting step resolved them)."""
    return {"BT_TAG": "${{ needs.plan.outputs.tag }}", "BT_SHA": "${{ needs.plan.outputs.sha }}"}


def _downloads(wf: WorkflowSpec) -> list[dict[str, Any]]:
    return [
        wf.download(_WHEELS, pattern="wheels-*", title="Download the wheels"),
        wf.download(_SMOKE, pattern="smoke-*", title="Download the smoke reports"),
    ]


def _built_env(job: str) -> str:
    """The variable holding a build job's outputs: `build-cuda-2` → BT_BUILT_BUILD_CUDA_2."""
    return "BT_BUILT_" + layout.output_name(job).upper()


def _windows(gated: list[str], families: Mapping[str, str]) -> dict[str, str]:
    """The smoke-only jobs' families → their wheels' variable: the plan job's output of the
    record's bytes stands for the build leg that would have reported them."""
    return {
        families[j]: window_built_env(families[j]) for j in gated if j.startswith("smoke-window-")
    }


def _smoked_env(job: str) -> str:
    """The variable holding a smoke job's outputs: `smoke-cuda-aarch64` → BT_SMOKED_…."""
    return "BT_SMOKED_" + layout.output_name(job).removeprefix("smoke_").upper()


def prepare_job(wf: WorkflowSpec, families: Mapping[str, str]) -> dict[str, Any]:
    """Everything the release needs the repository's code for, with read permissions only:
    select, restore the record, index, say what to attest; the bundle and its digest.

    `families`: each build and smoke job of the run → its family. A wheel is selected only
    when a build leg reported its bytes and a smoke leg of its own family reported the
    report that passed it (both through their job outputs).
    """
    gated = list(families)
    site = {"SITE": "${{ steps.site.outputs.path }}"}
    builds = [j for j in gated if j.startswith("build-")]
    smokes = [j for j in gated if j.startswith("smoke-")]
    windows = _windows(gated, families)
    steps: list[dict[str, Any]] = [
        wf.checkout(),
        wf.setup_python(),
        wf.install_tools(),
        *_downloads(wf),
        {
            "name": "Select the smoke-tested wheels the builds reported",
            "env": {
                **{_built_env(job): f"${{{{ toJSON(needs.{job}.outputs) }}}}" for job in builds},
                **{var: window_plan_output(f) for f, var in windows.items()},
                **{_smoked_env(job): f"${{{{ toJSON(needs.{job}.outputs) }}}}" for job in smokes},
            },
            "run": select_script(
                wf.matrix,
                built=[f"{families[j]}={_built_env(j)}" for j in builds]
                + [f"{f}={var}" for f, var in windows.items()],
                smoked=tuple(f"{families[j]}={_smoked_env(j)}" for j in smokes),
            ),
        },
        wf.upload("selection", layout.SELECTION),
        {
            "name": "Restore the published record (authenticated, checked against Pages)",
            "id": "site",
            "env": {"GITHUB_TOKEN": "${{ github.token }}", "GH_TOKEN": "${{ github.token }}"},
            "run": restore_script(wf.matrix),
        },
        {
            "name": "Index the selection with links to the release (nox -s index)",
            "env": {**_tag_env(), **site},
            "run": index_script(wf.matrix),
        },
        {
            "name": "What to attest: the selection and the record",
            "env": {**_tag_env(), **site},
            "run": subjects_script(wf.matrix),
        },
        {
            "name": "Bundle what the signing job publishes (its digest: this job's output)",
            "id": "bundle",
            "env": {
                "BT_TAG": "${{ needs.plan.outputs.tag }}",
                **site,
                "BT_RECORD": "${{ steps.site.outputs.record }}",
            },
            "run": bundle_script(wf.matrix),
        },
        wf.upload(BUNDLE_DIR, f"{BUNDLE_DIR}/", hidden=True),
    ]
    return {
        "name": "prepare the release",
        "needs": ["plan", *gated],
        "if": gate_condition(gated, "publish"),
        "runs-on": wf.control,
        "timeout-minutes": layout.ASSETS_TIMEOUT,
        # reads the published record and verifies its release attestation
        "permissions": {"contents": "read", "attestations": "read"},
        "outputs": {"bundle": "${{ steps.bundle.outputs.bundle }}"},
        "steps": steps,
    }


def _attest(wf: WorkflowSpec, *, release: bool) -> dict[str, Any]:
    with_: dict[str, Any] = {"subject-checksums": f"{_ATTEST}/subjects.sha256"}
    if release:
        with_ |= {
            "predicate-type": layout.RELEASE_PREDICATE,
            "predicate-path": f"{_ATTEST}/predicate.json",
        }
    return {
        "name": "Attest the release (tag, commit, run)" if release else "Attest provenance (SLSA)",
        "uses": wf.pins.uses("actions/attest-build-provenance"),
        "with": with_,
    }


def publish_job(wf: WorkflowSpec, families: Mapping[str, str]) -> dict[str, Any]:
    """Sign and publish the prepare job's bundle, in the protected environment, one publish
    at a time (Pages group): no checkout, no repository code, nothing installed; the
    runner's bash, coreutils, curl, jq and gh, and actions pinned by commit."""
    gated = list(families)
    builds = [j for j in gated if j.startswith("build-")]
    windows = _windows(gated, families)
    steps: list[dict[str, Any]] = [
        wf.download(BUNDLE_DIR, name=BUNDLE_DIR, title="Download the release bundle"),
        {
            "name": "Check the bundle: the prepare job's digest, the builds' wheels",
            "env": {
                "BT_BUNDLE": "${{ needs.prepare.outputs.bundle }}",
                **{_built_env(job): f"${{{{ toJSON(needs.{job}.outputs) }}}}" for job in builds},
                **{var: window_plan_output(f) for f, var in windows.items()},
            },
            "run": bundle_check_script([_built_env(j) for j in builds] + list(windows.values())),
        },
        _attest(wf, release=False),
        _attest(wf, release=True),
        {
            "name": "Verify each file's attestation (this run, the tag's commit)",
            "env": {**_tag_env(), "GH_TOKEN": "${{ github.token }}"},
            "run": attestation_check_script(),
        },
        {
            "name": "Upload to the draft release, record, publish it",
            "env": {"BT_TAG": "${{ needs.plan.outputs.tag }}", "GH_TOKEN": "${{ github.token }}"},
            "run": release_script(),
        },
        wf.upload("site", _BUNDLE_SITE, hidden=True),
    ]
    if pages_enabled(wf):
        steps.append(
            {
                "name": "Upload the pages",
                "uses": wf.pins.uses("actions/upload-pages-artifact"),
                "with": {"path": _BUNDLE_SITE, "retention-days": 1},
            }
        )
    return {
        "name": "publish the release",
        "needs": ["plan", "prepare", *builds],
        "if": "${{ !cancelled() && needs.prepare.result == 'success' && "
        f"needs.plan.outputs.{layout.run_flag('publish')} == 'true' }}}}",
        "runs-on": wf.control,
        "timeout-minutes": layout.ASSETS_TIMEOUT,
        # record → deploy, one at a time across releases and Pages workflows
        "concurrency": {"group": wf.mf.matrix.ci.pages_group, "cancel-in-progress": False},
        # required reviewers approve every publish (docs/ci.md, repository settings)
        "environment": wf.mf.matrix.ci.environment,
        "permissions": {"contents": "write", "id-token": "write", "attestations": "write"},
        "steps": steps,
    }


def pages_job(wf: WorkflowSpec) -> dict[str, Any]:
    """Deploy the pages the publish job uploaded: nothing checked out, nothing installed."""
    return {
        "name": "deploy to GitHub Pages",
        "needs": ["plan", "publish"],
        "if": _after("publish", "publish"),
        "runs-on": wf.control,
        "timeout-minutes": layout.INDEX_TIMEOUT,
        "concurrency": {"group": wf.mf.matrix.ci.pages_group, "cancel-in-progress": False},
        "environment": {"name": "github-pages", "url": "${{ steps.deployment.outputs.page_url }}"},
        "permissions": {"pages": "write", "id-token": "write"},
        "steps": [
            {
                "name": "Deploy to GitHub Pages",
                "id": "deployment",
                "uses": wf.pins.uses("actions/deploy-pages"),
            }
        ],
    }


def preview_job(wf: WorkflowSpec, gated: list[str]) -> dict[str, Any]:
    """A pull request's index preview artifact (`site-preview`, relative links)."""
    return {
        "name": "index preview",
        "needs": ["plan", *gated],
        "if": gate_condition(gated, "index"),
        "runs-on": wf.control,
        "timeout-minutes": layout.INDEX_TIMEOUT,
        "permissions": {"contents": "read"},
        "steps": [
            wf.checkout(),
            wf.setup_python(),
            wf.install_tools(),
            *_downloads(wf),
            {
                "name": "Index preview of the smoke-tested wheels (nox -s index)",
                "env": {"SITE": layout.SITE},
                "run": preview_script(wf.matrix),
            },
            wf.upload("site-preview", layout.SITE, hidden=True),
        ],
    }


def pypi_jobs(wf: WorkflowSpec) -> dict[str, dict[str, Any]]:
    """`pypi-dist` (the variant without its local label, an sdist) and `pypi` (publish)."""
    pypi = wf.mf.matrix.ci.pypi
    assert pypi is not None
    project = PurePosixPath(wf.matrix).parent / wf.mf.matrix.project.path
    dist_steps: list[dict[str, Any]] = [
        wf.checkout(),
        wf.setup_python(),
        wf.install_tools(),
        wf.download(
            _WHEELS,
            pattern=f"wheels-torch{pypi.torch}-{pypi.accelerator}-*",
            title="Download the variant's wheels",
        ),
        wf.download(f"{layout.ARTIFACTS}/selection", name="selection"),
        {
            "name": "Verify the wheels' release attestation (this run, the tag's commit)",
            "env": {**_tag_env(), "GH_TOKEN": "${{ github.token }}"},
            "run": pypi_verify_script(wf.matrix),
        },
        {
            "name": "Wheels without the local label, and an sdist",
            "env": {
                "PIP_EXTRA_INDEX_URL": load_ecosystem().pytorch_index + "/cpu",
                **({"BT_PROJECT": project.as_posix()} if pypi.sdist else {}),
            },
            "run": pypi_dist_script(wf.matrix, sdist=pypi.sdist),
        },
        wf.upload("pypi-dist", "dist/"),
    ]
    name = wf.mf.matrix.project.name
    environment: dict[str, Any] = {"name": pypi.environment}
    if name:
        # percent-encoded: nothing of the name can form an expression or leave the URL
        environment["url"] = f"https://pypi.org/project/{quote(name, safe='')}/"
    return {
        "pypi-dist": {
            "name": "PyPI distributions",
            "needs": ["plan", "publish"],
            "if": _after("publish", "pypi"),
            "runs-on": wf.control,
            "timeout-minutes": layout.ASSETS_TIMEOUT,
            "permissions": {"contents": "read", "attestations": "read"},
            "steps": dist_steps,
        },
        "pypi": {
            "name": "publish to PyPI",
            "needs": ["plan", "pypi-dist"],
            "if": "${{ !cancelled() && needs.pypi-dist.result == 'success' }}",
            "runs-on": wf.control,
            "timeout-minutes": layout.INDEX_TIMEOUT,
            # trusted publishing: PyPI trusts this workflow in this environment, no token
            "environment": environment,
            "permissions": {"id-token": "write"},
            "steps": [
                wf.download("dist", name="pypi-dist", title="Download the distributions"),
                {
                    "name": "Publish (trusted publishing, with attestations)",
                    "uses": wf.pins.uses("pypa/gh-action-pypi-publish"),
                    "with": {"packages-dir": "dist/", "attestations": True},
                },
            ],
        },
    }


def status_job(
    wf: WorkflowSpec, needs: list[str], *, commit_status: bool = False
) -> dict[str, Any]:
    """The required check: the final summary; fails unless every job with work passed.

    `commit_status` (self-hosted.yml): it also outputs the verdict (`state`,
    `description`), which `commit_status_job` posts on the pull request's commit.
    """
    reports = f"{layout.ARTIFACTS}/reports"
    steps: list[dict[str, Any]] = [
        wf.checkout(),
        wf.setup_python(),
        wf.install_tools(),
        wf.download(f"{reports}/plan", name="plan", optional=True, title="Download the plan"),
        wf.download(
            reports, pattern="build-report-*", optional=True, title="Download the build reports"
        ),
        wf.download(reports, pattern="smoke-*", optional=True, title="Download the smoke reports"),
    ]
    if wf.kind == layout.RELEASE_NAME:
        steps.append(
            wf.download(
                f"{reports}/selection",
                name="selection",
                optional=True,
                title="Download the selection",
            )
        )
    steps.append(
        {
            "name": "Summary: published, held back, failed",
            "id": "status",
            "env": {"NEEDS": "${{ toJSON(needs) }}"},
            "run": status_script(wf.matrix, wf.kind),
        }
    )
    job: dict[str, Any] = {
        "name": "status",
        "needs": needs,
        "if": "always()",
        "runs-on": wf.control,
        "timeout-minutes": layout.STATUS_TIMEOUT,
        "permissions": {"contents": "read"},
    }
    if commit_status:
        # a fork's pull request is never tested on the project's machines: no verdict
        job["if"] = "always() && needs.plan.result != 'skipped'"
        job["outputs"] = {
            "state": "${{ steps.status.outputs.state }}",
            "description": "${{ steps.status.outputs.description }}",
        }
    job["steps"] = steps
    return job


def commit_status_job(wf: WorkflowSpec) -> dict[str, Any]:
    """Post the status job's verdict on the pull request's commit: the one job that can
    write (`statuses`), so it checks nothing out and runs no repository code (gh only)."""
    return {
        "name": "post the verdict on the commit",
        "needs": ["plan", "status"],
        "if": "always() && needs.plan.result != 'skipped'",
        "runs-on": wf.control,
        "timeout-minutes": layout.STATUS_TIMEOUT,
        "permissions": {"statuses": "write"},
        "steps": [
            {
                "name": "Post the verdict on the pull request's commit",
                "env": {
                    "GH_TOKEN": "${{ github.token }}",
                    "BT_HEAD_SHA": "${{ github.event.workflow_run.head_sha }}",
                    "BT_STATE": "${{ needs.status.outputs.state || 'error' }}",
                    "BT_DESCRIPTION": "${{ needs.status.outputs.description || 'see the run' }}",
                },
                "run": commit_status_script(),
            }
        ],
    }


def drift_job(wf: WorkflowSpec) -> dict[str, Any]:
    """The pull request's first job: the committed workflows still match matrix.yaml."""
    return {
        "name": "workflows match matrix.yaml",
        "runs-on": wf.control,
        "timeout-minutes": layout.PLAN_TIMEOUT,
        "permissions": {"contents": "read"},
        "steps": [
            wf.checkout(),
            wf.setup_python(),
            wf.install_tools(),
            {
                "name": "Drift check (nox -s ci -- --check)",
                "run": bash(layout.join(["nox", "-s", "ci", "--", *wf.margs, "--check"])),
            },
        ],
    }
