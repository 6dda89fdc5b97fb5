"""`release-tag.yml` and `release.yml`: a `v*` tag, released from the default branch's workflow.

A tag push runs `release-tag.yml` (one hosted job that does nothing but name the tag);
its completion starts `release.yml` through `workflow_run`, which GitHub always runs from
the default branch. So every release, and every manual rebuild (`workflow_dispatch` with
the tag), runs one workflow file at one ref: the runner groups of the self-hosted
machines can name `release.yml@refs/heads/<default>` exactly, and no branch, tag or fork
can bring its own version of it to those machines. Each job checks out the tag's commit.

plan → images → build-<family> → smoke-<family> → assets → index (→ Pages) → status;
optionally pypi-dist → pypi. Only the index job is serialized (the Pages group); builds
of different tags run side by side.
"""

from __future__ import annotations

__all__ = ["render_release", "render_release_tag"]

from typing import Any

from ..planner import Plan
from . import layout
from .jobs import build_job, images_job, plan_job, smoke_job, workflow_header
from .outputs import Shape
from .publish import assets_job, index_job, pages_enabled, pypi_jobs, status_job
from .runners import group_family, smoke_label
from .scripts import bash
from .steps import Context
from .yamlwriter import dump

_TAG = "${{ inputs.tag || github.event.workflow_run.head_branch }}"


def render_release_tag(ctx: Context) -> str:
    """The text of release-tag.yml: a tag push, handed to release.yml."""
    header = [
        ctx.do_not_edit(),
        f"A `v*` tag starts {layout.RELEASE_WORKFLOW} (through workflow_run), which runs from",
        "the default branch: the one workflow and ref the self-hosted runner groups admit.",
    ]
    doc: dict[str, Any] = {
        "name": layout.TAG_NAME,
        "on": {"push": {"tags": ["v*"]}},
        "permissions": {},
        "jobs": {
            "tag": {
                "name": "hand the tag to the release workflow",
                "runs-on": ctx.control,
                "timeout-minutes": 5,
                "permissions": {},
                "steps": [
                    {
                        "name": "Name the tag",
                        "env": {"BT_TAG": "${{ github.ref_name }}"},
                        "run": bash(
                            'echo "release.yml (from the default branch) releases $BT_TAG next"'
                        ),
                    }
                ],
            }
        },
    }
    return dump(doc, header=header, gaps=("jobs",))


def _inputs() -> dict[str, Any]:
    return {
        "tag": {
            "description": "The tag to release or rebuild (e.g. v1.2.0); it is checked out",
            "type": "string",
            "required": True,
        },
        "only": {
            "description": "Cell id globs to rebuild, separated by spaces "
            "(e.g. torch2.11.0-cu130-*); empty: every cell of the release profile",
            "type": "string",
            "required": False,
            "default": "",
        },
        "unsmoked": {
            "description": "Also build the families without a smoke runner (kept as "
            "artifacts, never published)",
            "type": "boolean",
            "required": False,
            "default": False,
        },
        "publish": {
            "description": "Publish the wheels that pass their smoke tests",
            "type": "boolean",
            "required": False,
            "default": True,
        },
    }


def render_release(ctx: Context, plan: Plan, shape: Shape) -> str:
    """The text of release.yml for the plan of the `release` profile."""
    profile = layout.RELEASE_PROFILE
    pypi = ctx.mf.matrix.ci.pypi
    extra = ("images", "assets", "index", *(("pypi",) if pypi else ()))
    jobs: dict[str, Any] = {
        "plan": plan_job(
            ctx,
            profile,
            shape,
            extra=extra,
            condition="github.event_name == 'workflow_dispatch' || "
            "(github.event.workflow_run.conclusion == 'success' && "
            "github.event.workflow_run.event == 'push')",
            env={
                "BT_TAG": _TAG,
                "BT_EXPECT_SHA": "${{ github.event.workflow_run.head_sha }}",
                "BT_DEFAULT_BRANCH": "${{ github.event.repository.default_branch }}",
                "BT_ONLY": "${{ inputs.only }}",
                "BT_UNSMOKED": "${{ inputs.unsmoked }}",
                "BT_PUBLISH": "${{ inputs.publish }}",
                "GITHUB_TOKEN": "${{ github.token }}",
            },
            ref=f"refs/tags/{_TAG}",
        ),
        "images": images_job(ctx, profile),
    }
    gated: list[str] = []
    for family in shape.build:
        for job in shape.build_jobs(family):
            jobs[job] = build_job(ctx, profile, family, job, needs=["plan", "images"])
            gated.append(job)
    for group in shape.smoke:
        builds = shape.build_jobs(group_family(group))
        for build, job in zip(builds, shape.smoke_jobs(group), strict=True):
            jobs[job] = smoke_job(
                ctx, group, smoke_label(ctx.mf, group), job, needs=["plan", build], from_run=None
            )
            gated.append(job)
    jobs["assets"] = assets_job(ctx, gated)
    jobs["index"] = index_job(ctx)
    if pypi:
        jobs.update(pypi_jobs(ctx))
    jobs["status"] = status_job(ctx, [j for j in jobs if j != "status"])
    target = (
        f"GitHub Pages at {ctx.mf.matrix.index.base_url}"
        if pages_enabled(ctx)
        else "the `site` artifact (set index.base_url to deploy to GitHub Pages)"
    )
    header = workflow_header(
        ctx,
        "Release",
        profile,
        plan,
        [
            f"started by {layout.TAG_WORKFLOW} (a v* tag) or by hand with the tag; runs from",
            "the default branch and checks the tag out. plan -> build (docker backend) ->",
            "smoke (per family) -> release assets -> index -> " + target + ".",
            "Recover: re-run failed jobs; rebuild a tag: Run workflow with the tag (and `only`).",
        ],
    )
    doc: dict[str, Any] = {
        "name": layout.RELEASE_NAME,
        "on": {
            "workflow_run": {"workflows": [layout.TAG_NAME], "types": ["completed"]},
            "workflow_dispatch": {"inputs": _inputs()},
        },
        "permissions": {},
        "env": ctx.env,
        "jobs": jobs,
    }
    return dump(doc, header=header, gaps=("jobs",))
