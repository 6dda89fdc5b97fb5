"""`release.yml`: on a `v*` tag, or by hand: plan → build → smoke → index → deploy.

The index job publishes only when the builds and every smoke job that had work passed,
and only the wheels a smoke report passed (`--require-smoke`); the site is deployed to
GitHub Pages when `index.base_url` says where it is served. One release runs at a time:
each publish merges into the site the previous one deployed.
"""

from __future__ import annotations

__all__ = ["render_release"]

from typing import Any

from ..planner import Plan
from . import layout
from .jobs import Context, pages_enabled, pipeline_jobs, workflow_header
from .runners import runs_on
from .yamlwriter import dump


def _deploy_job(ctx: Context) -> dict[str, Any]:
    return {
        "name": "deploy to GitHub Pages",
        "needs": "index",
        "if": "github.event_name != 'workflow_dispatch' || inputs.publish",
        "runs-on": runs_on(ctx.control),
        "timeout-minutes": layout.DEPLOY_TIMEOUT,
        "permissions": {"pages": "write", "id-token": "write"},
        "environment": {
            "name": "github-pages",
            "url": "${{ steps.deployment.outputs.page_url }}",
        },
        "steps": [
            {
                "name": "Deploy",
                "id": "deployment",
                "uses": ctx.pins.uses("actions/deploy-pages"),
            }
        ],
    }


def render_release(ctx: Context, plan: Plan) -> str:
    """The text of release.yml for the plan of the `release` profile."""
    pages = pages_enabled(ctx.mf)
    jobs = pipeline_jobs(ctx, plan, layout.RELEASE_PROFILE, pull_request=False)
    if pages:
        jobs["deploy"] = _deploy_job(ctx)
    target = (
        f"GitHub Pages at {ctx.mf.matrix.index.base_url}"
        if pages
        else "the `site` artifact (set index.base_url to deploy to GitHub Pages)"
    )
    header = workflow_header(
        ctx,
        "Release",
        layout.RELEASE_PROFILE,
        plan,
        [
            "plan -> build (docker backend) -> smoke (GPU runners) -> index -> " + target + ".",
            "Run manually (workflow_dispatch) with `only` to rebuild a selection of cells.",
        ],
    )
    doc: dict[str, Any] = {
        "name": "release",
        "on": {
            "push": {"tags": ["v*"]},
            "workflow_dispatch": {
                "inputs": {
                    "only": {
                        "description": "Cell id globs to rebuild, separated by spaces "
                        "(e.g. torch2.11.0-cu130-*); empty: every cell of the release profile",
                        "type": "string",
                        "required": False,
                        "default": "",
                    },
                    "publish": {
                        "description": "Publish the wheels that pass their smoke tests",
                        "type": "boolean",
                        "required": False,
                        "default": True,
                    },
                }
            },
        },
        "permissions": {},
        # one release at a time: each publish merges into the site the previous one deployed
        "concurrency": {"group": "${{ github.workflow }}", "cancel-in-progress": False},
        "jobs": jobs,
    }
    return dump(doc, header=header, gaps=("jobs",))
