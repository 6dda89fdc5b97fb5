"""`self-hosted.yml`: a pull request's jobs on the project's own machines, never a fork's.

It runs after each run of `pull-request.yml` (`workflow_run`), always from the default
branch's copy of this file, which a pull request cannot change; its plan job runs only
when that run was for a pull request from a branch of this repository and passed. It
builds what needs a self-hosted build runner and smoke-tests on the self-hosted smoke
runners (the wheels built here, or those the pull request's run built on hosted runners),
restores caches but never saves them, and posts its verdict on the pull request's commit
as the status `self-hosted` (from a job of its own, the one with a write permission:
`statuses`, no checkout, no repository code). For a fork's pull request nothing runs and
nothing is posted.
"""

from __future__ import annotations

__all__ = ["render_self_hosted"]

from typing import Any

from ..ciplan import layout
from ..ciplan.labels import group_family, smoke_label
from ..ciplan.shapes import Shape
from ..planner import Plan
from .core_jobs import PlanJobSpec, build_job, plan_job, smoke_job, workflow_header
from .jobparts import WorkflowSpec, documented
from .publish_jobs import commit_status_job, status_job
from .yamlwriter import dump

_RUN = "github.event.workflow_run"


def render_self_hosted(wf: WorkflowSpec, plan: Plan, shape: Shape) -> str:
    """The text of self-hosted.yml for the plan of the `pr` profile."""
    profile = layout.PR_PROFILE
    jobs: dict[str, Any] = {
        "plan": plan_job(
            wf,
            profile,
            shape,
            PlanJobSpec(
                condition=f"{_RUN}.event == 'pull_request' && {_RUN}.conclusion == 'success' && "
                f"{_RUN}.head_repository.full_name == github.repository",
                ref=f"${{{{ {_RUN}.head_sha }}}}",
            ),
        )
    }
    for family in shape.build:
        for job in shape.build_jobs(family):
            jobs[job] = build_job(wf, profile, family, job, needs=["plan"])
    for group in shape.smoke:
        family = group_family(group)
        builds = shape.build_jobs(family) if family in shape.build else []
        for i, job in enumerate(shape.smoke_jobs(group)):
            jobs[job] = smoke_job(
                wf,
                group,
                smoke_label(wf.mf, group),
                job,
                needs=["plan", builds[i]] if builds else ["plan"],
                from_run=f"${{{{ {_RUN}.id }}}}",
            )
    jobs["status"] = status_job(wf, [j for j in jobs if j != "status"], commit_status=True)
    # the one job that can write (statuses): no checkout, no repository code
    jobs["commit-status"] = commit_status_job(wf)
    header = workflow_header(
        wf,
        "Self-hosted jobs of pull requests",
        profile,
        plan,
        [
            f"after {layout.PR_WORKFLOW} (workflow_run), from the default branch; never for a",
            "fork's pull request. Verdict: the commit status `self-hosted`.",
        ],
    )
    doc: dict[str, Any] = {
        "name": layout.SELF_HOSTED_NAME,
        "on": {"workflow_run": {"workflows": [layout.PR_NAME], "types": ["completed"]}},
        "permissions": {},
        "concurrency": {
            "group": f"${{{{ github.workflow }}}}-${{{{ {_RUN}.head_repository.full_name }}}}"
            f"-${{{{ {_RUN}.head_branch }}}}",
            "cancel-in-progress": True,
        },
        "env": wf.env,
        "jobs": jobs,
    }
    return dump(documented(doc), header=header, gaps=("jobs",))
