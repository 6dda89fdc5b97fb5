"""`caches.yml`: the scheduled run on the default branch that seeds the caches.

Caches saved by a run on the default branch are visible to every branch, tag and pull
request; pull requests and self-hosted.yml restore them, a release never. This run
downloads, per torch × accelerator × toolkit pins, every wheel the builds install (the
docker backend's prefetch directory) and builds each builder image once: into the
Actions cache, or, with `ci.image_registry`, as an artifact the `push-images` job checks
and pushes (the images job runs the repository's code and holds no write permission).
No release reads any of it.
"""

from __future__ import annotations

__all__ = ["render_caches"]

from typing import Any

from ..ciplan import layout
from ..ciplan.shapes import Shape
from ..planner import Plan
from .core_jobs import PlanJobSpec, plan_job, workflow_header
from .image_push import PUSH_JOB
from .input_jobs import images_job, prefetch_job, push_images_job
from .jobparts import WorkflowSpec, documented
from .publish_jobs import status_job
from .yamlwriter import dump


def render_caches(wf: WorkflowSpec, plan: Plan, shape: Shape) -> str:
    """The text of caches.yml for the plan of the `release` profile (`shape`: its images)."""
    profile = layout.RELEASE_PROFILE
    jobs: dict[str, Any] = {
        "plan": plan_job(wf, profile, shape, PlanJobSpec(extra=("images", "prefetch"))),
        "images": images_job(wf, profile, slots=shape.images),
    }
    if wf.mf.matrix.ci.image_registry:
        # the images job reads only; this one pushes, and runs no repository code
        jobs[PUSH_JOB] = push_images_job(wf, slots=shape.images)
    jobs["prefetch"] = prefetch_job(wf, profile)
    jobs["status"] = status_job(wf, [j for j in jobs if j != "status"])
    schedule = wf.mf.matrix.ci.cache_schedule
    header = workflow_header(
        wf,
        "Caches",
        profile,
        plan,
        [
            f"on a schedule ({schedule}, UTC) and by hand, from the default branch: the",
            "downloads of every torch x accelerator x toolkit, and the builder images.",
        ],
    )
    doc: dict[str, Any] = {
        "name": layout.CACHES_NAME,
        "on": {"schedule": [{"cron": schedule}], "workflow_dispatch": {}},
        "permissions": {},
        "concurrency": {"group": "${{ github.workflow }}", "cancel-in-progress": False},
        "env": wf.env,
        "jobs": jobs,
    }
    return dump(documented(doc), header=header, gaps=("jobs",))
