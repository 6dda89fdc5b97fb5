"""`release-tag.yml` and `release.yml`: a `v*` tag, released from the default branch's workflow.

A tag push runs `release-tag.yml` (one hosted job that does nothing but name the tag);
its completion starts `release.yml` through `workflow_run`, which GitHub always runs from
the default branch. So every release, and every manual rebuild (`workflow_dispatch` with
the tag), runs one workflow file at one ref: the runner groups of the self-hosted
machines can name `release.yml@refs/heads/<default>` exactly, and no branch, tag or fork
can bring its own version of it to those machines. Each job checks out the tag's commit.

plan (vets the tag before anything is checked out) → images (read-only; with a registry
then push-images: no checkout, no repository code) → build-<family> →
smoke-<family> → prepare (read-only: selection, record, index, the bundle and its digest)
→ publish (protected environment; no checkout, no repository code: checks the bundle,
signs, uploads, publishes) → pages → status; optionally pypi-dist → pypi. Only publishing is serialized (the Pages group); builds of different
tags run side by side.
"""

from __future__ import annotations

__all__ = ["render_release", "render_release_tag"]

from typing import Any

from ..ciplan import layout
from ..ciplan.labels import group_family, smoke_label
from ..ciplan.shapes import Shape
from ..ciplan.smokeonly import window_families, window_job
from ..planner import Plan
from .core_jobs import PlanJobSpec, build_job, plan_job, smoke_job, workflow_header
from .image_push import PUSH_JOB
from .input_jobs import images_job, push_images_job
from .jobparts import WorkflowSpec, documented
from .publish_jobs import (
    pages_enabled,
    pages_job,
    prepare_job,
    publish_job,
    pypi_jobs,
    status_job,
)
from .scripts import bash, vet_script
from .window_jobs import window_smoke_job
from .yamlwriter import dump

_TAG = "${{ inputs.tag || github.event.workflow_run.head_branch }}"


def tag_glob(pattern: str) -> str:
    """The push filter of release-tag.yml: the literal start of ci.tag_pattern, then `*`
    (`^v(…)$` → `v*`); the workflow's vetting step applies the whole pattern."""
    prefix = ""
    rest = pattern.removeprefix("^")
    while rest:
        if rest[0].isalnum() or rest[0] in "-_/":
            prefix, rest = prefix + rest[0], rest[1:]
        elif rest.startswith("\\."):
            prefix, rest = prefix + ".", rest[2:]
        else:
            break
    # a quantifier after the last literal makes that character optional
    if rest[:1] in ("?", "*", "{"):
        prefix = prefix[:-1]
    return prefix + "*" if prefix else "**"


def render_release_tag(wf: WorkflowSpec) -> str:
    """The text of release-tag.yml: a tag push, handed to release.yml."""
    header = [
        wf.do_not_edit(),
        f"A release tag starts {layout.RELEASE_WORKFLOW} (through workflow_run), which runs from",
        "the default branch: the one workflow and ref the self-hosted runner groups admit.",
    ]
    doc: dict[str, Any] = {
        "name": layout.TAG_NAME,
        "on": {"push": {"tags": [tag_glob(wf.mf.matrix.ci.tag_pattern)]}},
        "permissions": {},
        "concurrency": {
            "group": "${{ github.workflow }}-${{ github.ref }}",
            "cancel-in-progress": False,
        },
        "jobs": {
            "tag": {
                "name": "hand the tag to the release workflow",
                "runs-on": wf.control,
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
    return dump(documented(doc), header=header, gaps=("jobs",))


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
        "window": {
            "description": "Cell ids inside a published stable-ABI wheel's window, separated "
            "by spaces: that wheel is smoke-tested on their torch, nothing built "
            "(backfill.yml sets it)",
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


def render_release(wf: WorkflowSpec, plan: Plan, shape: Shape) -> str:
    """The text of release.yml for the plan of the `release` profile."""
    profile = layout.RELEASE_PROFILE
    pypi = wf.mf.matrix.ci.pypi
    extra = ("images", "publish", *(("pypi",) if pypi else ()))
    jobs: dict[str, Any] = {
        "plan": plan_job(
            wf,
            profile,
            shape,
            PlanJobSpec(
                extra=extra,
                condition="github.event_name == 'workflow_dispatch' || "
                "(github.event.workflow_run.conclusion == 'success' && "
                "github.event.workflow_run.event == 'push' && "
                "github.event.workflow_run.head_repository.full_name == github.repository)",
                env={
                    "BT_TAG": "${{ steps.vet.outputs.tag }}",
                    "BT_SHA": "${{ steps.vet.outputs.sha }}",
                    "BT_ONLY": "${{ inputs.only }}",
                    "BT_WINDOW": "${{ inputs.window }}",
                    "BT_UNSMOKED": "${{ inputs.unsmoked }}",
                    "BT_PUBLISH": "${{ inputs.publish }}",
                    "GITHUB_TOKEN": "${{ github.token }}",
                    "GH_TOKEN": "${{ github.token }}",
                },
                ref="${{ steps.vet.outputs.sha }}",
                vet={
                    "name": "Vet the tag (before anything is checked out)",
                    "id": "vet",
                    "env": {
                        "BT_TAG": _TAG,
                        "BT_TAG_PATTERN": wf.mf.matrix.ci.tag_pattern,
                        "BT_EXPECT_SHA": "${{ github.event.workflow_run.head_sha }}",
                        "BT_DEFAULT_BRANCH": "${{ github.event.repository.default_branch }}",
                        "GH_TOKEN": "${{ github.token }}",
                    },
                    "run": vet_script(),
                },
            ),
        ),
        "images": images_job(wf, profile, slots=shape.images),
    }
    image_jobs = ["images"]
    if wf.mf.matrix.ci.image_registry:
        # the one job that may write to the registry runs no repository code
        jobs[PUSH_JOB] = push_images_job(wf, slots=shape.images)
        image_jobs.append(PUSH_JOB)
    families: dict[str, str] = {}  # each build and smoke job → its family
    for family in shape.build:
        for job in shape.build_jobs(family):
            jobs[job] = build_job(
                wf,
                profile,
                family,
                job,
                needs=["plan", *image_jobs],
                legs=shape.legs.get(family, 0),
            )
            families[job] = family
    for group in shape.smoke:
        family = group_family(group)
        builds = shape.build_jobs(family)
        for build, job in zip(builds, shape.smoke_jobs(group), strict=True):
            jobs[job] = smoke_job(
                wf,
                group,
                smoke_label(wf.mf, group),
                job,
                needs=["plan", build],
                from_run=None,
                legs=shape.legs.get(family, 0),
            )
            families[job] = family
    # the backfill's smoke-only path: a published window wheel on a new torch, no build
    for family in window_families(shape.smoke):
        jobs[window_job(family)] = window_smoke_job(wf, family, smoke_label(wf.mf, family))
        families[window_job(family)] = family
    jobs["prepare"] = prepare_job(wf, families)
    jobs["publish"] = publish_job(wf, families)
    if pages_enabled(wf):
        jobs["pages"] = pages_job(wf)
    if pypi:
        jobs.update(pypi_jobs(wf))
    jobs["status"] = status_job(wf, [j for j in jobs if j != "status"])
    target = (
        f"GitHub Pages at {wf.mf.matrix.index.base_url}"
        if pages_enabled(wf)
        else "the `site` artifact (set index.base_url to deploy to GitHub Pages)"
    )
    header = workflow_header(
        wf,
        "Release",
        profile,
        plan,
        [
            f"started by {layout.TAG_WORKFLOW} (a v* tag) or by hand with the tag; runs from",
            "the default branch and checks the tag out. plan -> build (docker backend) ->",
            "smoke (per family) -> prepare (read-only) -> publish (environment "
            + wf.mf.matrix.ci.environment
            + ": the draft release, its record, then published) -> "
            + target
            + ".",
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
        # two runs of one tag one after the other (never cancelled); other tags side by side
        "concurrency": {"group": f"{layout.RELEASE_NAME}-{_TAG}", "cancel-in-progress": False},
        "env": wf.env,
        "jobs": jobs,
    }
    return dump(documented(doc), header=header, gaps=("jobs",))
