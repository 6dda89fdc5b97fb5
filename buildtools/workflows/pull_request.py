"""`pull-request.yml`: on every pull request: drift check → plan → build → smoke → preview.

A fork can edit this file, so it holds nothing worth taking over: only GitHub-hosted
runners (a fresh machine per job), a read-only token, no cache saves (a pull request's
caches stay in its own scope anyway), no attestations. The builds and smoke tests that
need the project's own machines run in `self-hosted.yml`, after this run, from the
default branch, for branches of the repository only. It ends in an index preview artifact
and the `status` job, the check to require.
"""

from __future__ import annotations

__all__ = ["render_pull_request"]

from typing import Any

from ..ciplan import layout
from ..ciplan.labels import group_family, smoke_label
from ..ciplan.shapes import Shape
from ..planner import Plan
from .core_jobs import PlanJobSpec, build_job, plan_job, smoke_job, workflow_header
from .jobparts import WorkflowSpec, documented
from .publish_jobs import drift_job, preview_job, status_job
from .yamlwriter import dump


def render_pull_request(wf: WorkflowSpec, plan: Plan, shape: Shape, *, self_hosted: bool) -> str:
    """The text of pull-request.yml for the plan of the `pr` profile."""
    profile = layout.PR_PROFILE
    jobs: dict[str, Any] = {
        "drift": drift_job(wf),
        "plan": plan_job(wf, profile, shape, PlanJobSpec(extra=("index",), needs="drift")),
    }
    gated: list[str] = []
    for family in shape.build:
        for job in shape.build_jobs(family):
            jobs[job] = build_job(wf, profile, family, job, needs=["plan"])
            gated.append(job)
    for group in shape.smoke:
        builds = shape.build_jobs(group_family(group))
        for build, job in zip(builds, shape.smoke_jobs(group), strict=True):
            jobs[job] = smoke_job(
                wf, group, smoke_label(wf.mf, group), job, needs=["plan", build], from_run=None
            )
            gated.append(job)
    jobs["index"] = preview_job(wf, gated)
    jobs["status"] = status_job(wf, [j for j in jobs if j != "status"])
    lines = ["drift check -> plan -> build -> smoke -> index preview (artifact `site-preview`)."]
    lines.append("GitHub-hosted runners only: a fork can edit this file.")
    if self_hosted:
        lines.append(
            f"The self-hosted jobs run in {layout.SELF_HOSTED_WORKFLOW} after this run "
            "(branches of this repository only)."
        )
    header = workflow_header(wf, "Pull requests", profile, plan, lines)
    doc: dict[str, Any] = {
        "name": layout.PR_NAME,
        "on": {"pull_request": {}},
        "permissions": {},
        "concurrency": {
            "group": "${{ github.workflow }}-${{ github.event.pull_request.number }}",
            "cancel-in-progress": True,
        },
        "env": wf.env,
        "jobs": jobs,
    }
    return dump(documented(doc), header=header, gaps=("jobs",))
