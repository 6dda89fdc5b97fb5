"""`pull-request.yml`: on every pull request: drift check → plan → build → smoke → preview.

The same graph as a release for the `pr` profile, after a check that the committed
workflows still match matrix.yaml; it ends in an index preview artifact, deploys nothing,
and never runs a fork's code on a self-hosted smoke runner.
"""

from __future__ import annotations

__all__ = ["render_pull_request"]

from typing import Any

from ..planner import Plan
from . import layout
from .jobs import Context, pipeline_jobs, workflow_header
from .runners import runs_on
from .scripts import bash
from .yamlwriter import dump


def _drift_job(ctx: Context) -> dict[str, Any]:
    return {
        "name": "workflows match matrix.yaml",
        "runs-on": runs_on(ctx.control),
        "timeout-minutes": layout.PLAN_TIMEOUT,
        "permissions": {"contents": "read"},
        "steps": [
            ctx.checkout(),
            ctx.setup_python(),
            ctx.install_nox(),
            {
                "name": "Drift check (nox -s ci -- --check)",
                "run": bash(layout.join(["nox", "-s", "ci", "--", *ctx.margs, "--check"])),
            },
        ],
    }


def render_pull_request(ctx: Context, plan: Plan) -> str:
    """The text of pull-request.yml for the plan of the `pr` profile."""
    jobs: dict[str, Any] = {
        "drift": _drift_job(ctx),
        **pipeline_jobs(ctx, plan, layout.PR_PROFILE, pull_request=True, after="drift"),
    }
    header = workflow_header(
        ctx,
        "Pull requests",
        layout.PR_PROFILE,
        plan,
        [
            "drift check -> plan -> build -> smoke -> index preview (artifact `site-preview`).",
            "Self-hosted smoke runners never run a pull request from a fork.",
        ],
    )
    doc: dict[str, Any] = {
        "name": "pull-request",
        "on": {"pull_request": {}},
        "permissions": {},
        "concurrency": {
            "group": "${{ github.workflow }}-${{ github.event.pull_request.number }}",
            "cancel-in-progress": True,
        },
        "jobs": jobs,
    }
    return dump(doc, header=header, gaps=("jobs",))
