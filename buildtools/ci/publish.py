"""The jobs after the builds: release assets, index (restore → index → deploy), PyPI, status.

- `assets` (contents: write) runs only when every build and smoke job with work passed: it
  verifies each wheel's provenance (attested by a build job of this run), keeps the wheels
  a smoke report passed, and uploads them to the tag's GitHub Release: the durable record.
- `index` is the only job in the Pages concurrency group (`ci.pages_group`, shared with
  any other workflow that deploys Pages; never cancelled): it restores the published
  record from the release assets (checked against the live site), indexes the same
  selection with links to the release assets (`--wheel-url`), records the new manifest
  as the release's `index.json`, and deploys the pages (the site holds the index only).
- `pypi-dist` / `pypi` (optional, `ci.pypi`): the one variant without its local label, and
  an sdist, published by trusted publishing from a reviewed environment.
- `status` always runs last: the one required check, with the final summary.
"""

from __future__ import annotations

__all__ = [
    "assets_job",
    "drift_job",
    "gate_condition",
    "index_job",
    "preview_job",
    "pypi_jobs",
    "status_job",
]

from pathlib import PurePosixPath
from typing import Any
from urllib.parse import quote

from ..ecosystem import load_ecosystem
from . import layout
from .publish_scripts import (
    assets_script,
    index_script,
    preview_script,
    pypi_dist_script,
    restore_script,
    verify_script,
)
from .scripts import bash, commit_status_script, status_script
from .steps import Context

_WHEELS = f"{layout.ARTIFACTS}/wheels"
_SMOKE = f"{layout.ARTIFACTS}/smoke"


def pages_enabled(ctx: Context) -> bool:
    """Deploy to GitHub Pages when `index.base_url` says where the site is served."""
    return bool(ctx.mf.matrix.index.base_url)


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
    return {"BT_TAG": "${{ needs.plan.outputs.tag }}"}


def _verify(ctx: Context) -> dict[str, Any]:
    hosted = all(
        ctx.hosted(label if isinstance(label, str) else tuple(label))
        for label in ctx.mf.matrix.runners.build.values()
    )
    return {
        "name": "Verify each wheel's provenance (gh attestation verify)",
        "env": {"GH_TOKEN": "${{ github.token }}"},
        "run": verify_script(deny_self_hosted=hosted),
    }


def _downloads(ctx: Context, *, selection: bool = False) -> list[dict[str, Any]]:
    steps = [
        ctx.download(_WHEELS, pattern="wheels-*", title="Download the wheels"),
        ctx.download(_SMOKE, pattern="smoke-*", title="Download the smoke reports"),
    ]
    if selection:
        steps.append(
            ctx.download(
                f"{layout.ARTIFACTS}/selection", name="selection", title="Download the selection"
            )
        )
    return steps


def assets_job(ctx: Context, gated: list[str]) -> dict[str, Any]:
    """Verify, select and upload the smoke-tested wheels to the tag's GitHub Release."""
    return {
        "name": "release assets",
        "needs": ["plan", *gated],
        "if": gate_condition(gated, "assets"),
        "runs-on": ctx.control,
        "timeout-minutes": layout.ASSETS_TIMEOUT,
        "permissions": {"contents": "write", "attestations": "read"},
        "steps": [
            ctx.checkout(),
            ctx.setup_python(),
            ctx.install_tools(),
            *_downloads(ctx),
            _verify(ctx),
            {
                "name": "Upload the smoke-tested wheels to the release (nox -s ci -- upload-assets)",
                "env": {**_tag_env(), "GITHUB_TOKEN": "${{ github.token }}"},
                "run": assets_script(ctx.matrix),
            },
            ctx.upload("selection", layout.SELECTION),
        ],
    }


def index_job(ctx: Context) -> dict[str, Any]:
    """Restore the record, index the release's wheels, record the manifest, deploy Pages."""
    pages = pages_enabled(ctx)
    permissions = {"contents": "write", "attestations": "read"}
    steps: list[dict[str, Any]] = [
        ctx.checkout(),
        ctx.setup_python(),
        ctx.install_tools(),
        *_downloads(ctx, selection=True),
        _verify(ctx),
        {
            "name": "Restore the published record (release assets, checked against Pages)",
            "id": "site",
            "env": {"GITHUB_TOKEN": "${{ github.token }}"},
            "run": restore_script(ctx.matrix),
        },
        {
            "name": "Index the release's wheels and record it (nox -s index)",
            "env": {
                **_tag_env(),
                "SITE": "${{ steps.site.outputs.path }}",
                "GITHUB_TOKEN": "${{ github.token }}",
            },
            "run": index_script(ctx.matrix),
        },
        ctx.upload("site", layout.SITE, hidden=True),
    ]
    job: dict[str, Any] = {
        "name": "index" + (" and deploy to GitHub Pages" if pages else ""),
        "needs": ["plan", "assets"],
        "if": _after("assets", "index"),
        "runs-on": ctx.control,
        "timeout-minutes": layout.INDEX_TIMEOUT,
        # restore → index → deploy, one at a time across releases and Pages workflows
        "concurrency": {"group": ctx.mf.matrix.ci.pages_group, "cancel-in-progress": False},
    }
    if pages:
        permissions.update({"pages": "write", "id-token": "write"})
        job["environment"] = {
            "name": "github-pages",
            "url": "${{ steps.deployment.outputs.page_url }}",
        }
        steps += [
            {
                "name": "Upload the pages",
                "uses": ctx.pins.uses("actions/upload-pages-artifact"),
                "with": {"path": layout.SITE, "retention-days": 1},
            },
            {
                "name": "Deploy to GitHub Pages",
                "id": "deployment",
                "uses": ctx.pins.uses("actions/deploy-pages"),
            },
        ]
    job["permissions"] = permissions
    job["steps"] = steps
    return job


def preview_job(ctx: Context, gated: list[str]) -> dict[str, Any]:
    """A pull request's index preview artifact (`site-preview`, relative links)."""
    return {
        "name": "index preview",
        "needs": ["plan", *gated],
        "if": gate_condition(gated, "index"),
        "runs-on": ctx.control,
        "timeout-minutes": layout.INDEX_TIMEOUT,
        "permissions": {"contents": "read"},
        "steps": [
            ctx.checkout(),
            ctx.setup_python(),
            ctx.install_tools(),
            *_downloads(ctx),
            {
                "name": "Index preview of the smoke-tested wheels (nox -s index)",
                "env": {"SITE": layout.SITE},
                "run": preview_script(ctx.matrix),
            },
            ctx.upload("site-preview", layout.SITE, hidden=True),
        ],
    }


def pypi_jobs(ctx: Context) -> dict[str, dict[str, Any]]:
    """`pypi-dist` (the variant without its local label, an sdist) and `pypi` (publish)."""
    pypi = ctx.mf.matrix.ci.pypi
    assert pypi is not None
    project = PurePosixPath(ctx.matrix).parent / ctx.mf.matrix.project.path
    dist_steps: list[dict[str, Any]] = [
        ctx.checkout(),
        ctx.setup_python(),
        ctx.install_tools(),
        ctx.download(
            _WHEELS,
            pattern=f"wheels-torch{pypi.torch}-{pypi.accelerator}-*",
            title="Download the variant's wheels",
        ),
        ctx.download(f"{layout.ARTIFACTS}/selection", name="selection"),
        _verify(ctx),
        {
            "name": "Wheels without the local label, and an sdist",
            "env": {
                "PIP_EXTRA_INDEX_URL": load_ecosystem().pytorch_index + "/cpu",
                **({"BT_PROJECT": project.as_posix()} if pypi.sdist else {}),
            },
            "run": pypi_dist_script(ctx.matrix, sdist=pypi.sdist),
        },
        ctx.upload("pypi-dist", "dist/"),
    ]
    name = ctx.mf.matrix.project.name
    environment: dict[str, Any] = {"name": pypi.environment}
    if name:
        # percent-encoded: nothing of the name can form an expression or leave the URL
        environment["url"] = f"https://pypi.org/project/{quote(name, safe='')}/"
    return {
        "pypi-dist": {
            "name": "PyPI distributions",
            "needs": ["plan", "assets"],
            "if": _after("assets", "pypi"),
            "runs-on": ctx.control,
            "timeout-minutes": layout.ASSETS_TIMEOUT,
            "permissions": {"contents": "read", "attestations": "read"},
            "steps": dist_steps,
        },
        "pypi": {
            "name": "publish to PyPI",
            "needs": ["plan", "pypi-dist"],
            "if": "${{ !cancelled() && needs.pypi-dist.result == 'success' }}",
            "runs-on": ctx.control,
            "timeout-minutes": layout.INDEX_TIMEOUT,
            # trusted publishing: PyPI trusts this workflow in this environment, no token
            "environment": environment,
            "permissions": {"id-token": "write"},
            "steps": [
                ctx.download("dist", name="pypi-dist", title="Download the distributions"),
                {
                    "name": "Publish (trusted publishing, with attestations)",
                    "uses": ctx.pins.uses("pypa/gh-action-pypi-publish"),
                    "with": {"packages-dir": "dist/", "attestations": True},
                },
            ],
        },
    }


def status_job(ctx: Context, needs: list[str], *, commit_status: bool = False) -> dict[str, Any]:
    """The required check: the final summary; fails unless every job with work passed."""
    reports = f"{layout.ARTIFACTS}/reports"
    steps: list[dict[str, Any]] = [
        ctx.checkout(),
        ctx.setup_python(),
        ctx.install_tools(),
        ctx.download(f"{reports}/plan", name="plan", optional=True, title="Download the plan"),
        ctx.download(
            reports, pattern="build-report-*", optional=True, title="Download the build reports"
        ),
        ctx.download(reports, pattern="smoke-*", optional=True, title="Download the smoke reports"),
    ]
    if ctx.kind == layout.RELEASE_NAME:
        steps.append(
            ctx.download(
                f"{reports}/selection",
                name="selection",
                optional=True,
                title="Download the selection",
            )
        )
    summary: dict[str, Any] = {
        "name": "Summary: published, held back, failed",
        "id": "status",
        "env": {"NEEDS": "${{ toJSON(needs) }}"},
        "run": status_script(ctx.matrix, ctx.kind),
    }
    permissions = {"contents": "read"}
    if commit_status:
        permissions["statuses"] = "write"
        steps += [
            summary,
            {
                "name": "Post the verdict on the pull request's commit",
                "if": "always()",
                "env": {
                    "GH_TOKEN": "${{ github.token }}",
                    "BT_HEAD_SHA": "${{ github.event.workflow_run.head_sha }}",
                    "BT_STATE": "${{ steps.status.outputs.state || 'error' }}",
                    "BT_DESCRIPTION": "${{ steps.status.outputs.description || 'see the run' }}",
                },
                "run": commit_status_script(),
            },
        ]
    else:
        steps.append(summary)
    job: dict[str, Any] = {
        "name": "status",
        "needs": needs,
        "if": "always()",
        "runs-on": ctx.control,
        "timeout-minutes": layout.STATUS_TIMEOUT,
        "permissions": permissions,
        "steps": steps,
    }
    if commit_status:
        # a fork's pull request is never tested on the project's machines: no verdict
        job["if"] = "always() && needs.plan.result != 'skipped'"
    return job


def drift_job(ctx: Context) -> dict[str, Any]:
    """The pull request's first job: the committed workflows still match matrix.yaml."""
    return {
        "name": "workflows match matrix.yaml",
        "runs-on": ctx.control,
        "timeout-minutes": layout.PLAN_TIMEOUT,
        "permissions": {"contents": "read"},
        "steps": [
            ctx.checkout(),
            ctx.setup_python(),
            ctx.install_tools(),
            {
                "name": "Drift check (nox -s ci -- --check)",
                "run": bash(layout.join(["nox", "-s", "ci", "--", *ctx.margs, "--check"])),
            },
        ],
    }
