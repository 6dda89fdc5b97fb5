"""The files `buildtools ci github` writes for a matrix.yaml, as text (pure).

- `release-tag.yml` + `release.yml`: a `v*` tag, released from the default branch's
  workflow (plan → build → smoke → release assets → index → Pages → status);
- `pull-request.yml`: GitHub-hosted jobs only (drift check → … → index preview → status);
- `self-hosted.yml` (when a runner is self-hosted): a pull request's self-hosted builds
  and smoke tests, after its run, for branches of the repository only;
- `caches.yml`: the scheduled run on the default branch that seeds the caches;
- `backfill.yml`: the daily run that releases, through release.yml, the cells the latest
  tag promises and its record lacks (a new torch, without a new release of the extension);
- `actionlint.yaml`: the custom runner labels; `zizmor.yml`: the audit findings the
  workflows have by design, at their lines; `ci-requirements.txt`: the hashed tools;
  `buildtools-requirements.txt`: buildtools' dependencies, hashed, for the nox sessions.

Which jobs a workflow has per family (and how many matrices of 256) is its `Shape`, from
the plan of its profile; the plan job checks at run time that its plan still fits.
"""

from __future__ import annotations

__all__ = ["GENERATED_FILES", "Generated", "render_workflows"]

from collections.abc import Mapping
from dataclasses import dataclass

from ..ciplan import layout
from ..ciplan.entries import matrix_entries
from ..ciplan.labels import custom_labels
from ..ciplan.shapes import shape_of
from ..matrix.config import MatrixFile
from ..planner import Plan
from .audit import zizmor_config
from .backfill_jobs import BACKFILL_WORKFLOW, render_backfill
from .caches import render_caches
from .expressions import check_scripts, refuse_expressions
from .jobparts import WorkflowSpec
from .pins import CiPins
from .pull_request import render_pull_request
from .release import render_release, render_release_tag
from .self_hosted import render_self_hosted
from .yamlwriter import dump

# Every file the generator may write: one it no longer writes is obsolete (removed).
GENERATED_FILES = (
    layout.TAG_WORKFLOW,
    layout.RELEASE_WORKFLOW,
    layout.PR_WORKFLOW,
    layout.SELF_HOSTED_WORKFLOW,
    layout.CACHES_WORKFLOW,
    BACKFILL_WORKFLOW,
    layout.ACTIONLINT_CONFIG,
    layout.ZIZMOR_CONFIG,
    layout.REQUIREMENTS,
    layout.LOCK,
)


@dataclass(frozen=True, kw_only=True)
class Generated:
    """One generated file: its path relative to the repository root, and its text."""

    path: str
    text: str


def _actionlint(wf: WorkflowSpec) -> str:
    header = [
        wf.do_not_edit(),
        "The self-hosted runner labels of runners.build / runners.smoke, for actionlint.",
    ]
    labels = custom_labels(wf.mf, wf.pins.hosted_runners.labels)
    return dump({"self-hosted-runner": {"labels": labels}}, header=header)


def _hashed(wf: WorkflowSpec, text: str) -> str:
    return f"# {wf.do_not_edit()}\n" + text


def render_workflows(
    mf: MatrixFile, pins: CiPins, plans: Mapping[str, Plan], *, matrix: str
) -> list[Generated]:
    """The generated files for a matrix (plans: the `release` and `pr` profiles' plans)."""
    refuse_expressions(mf, matrix=matrix)
    release, pr = plans[layout.RELEASE_PROFILE], plans[layout.PR_PROFILE]
    hosted = pins.hosted_runners.labels
    entries = {
        name: matrix_entries(
            plan, plan, profile=name, matrix=matrix, ci_python=pins.python.version, hosted=hosted
        )
        for name, plan in plans.items()
    }
    release_shape = shape_of(entries[layout.RELEASE_PROFILE], layout.RELEASE_NAME)
    pr_shape = shape_of(entries[layout.PR_PROFILE], layout.PR_NAME)
    self_shape = shape_of(entries[layout.PR_PROFILE], layout.SELF_HOSTED_NAME)
    caches_shape = shape_of(entries[layout.RELEASE_PROFILE], layout.CACHES_NAME)

    def wf(kind: str) -> WorkflowSpec:
        return WorkflowSpec(mf=mf, pins=pins, matrix=matrix, kind=kind)

    release_ctx = wf(layout.RELEASE_NAME)
    self_hosted = bool(self_shape.build or self_shape.smoke)
    files = [
        Generated(path=layout.TAG_WORKFLOW, text=render_release_tag(release_ctx)),
        Generated(
            path=layout.RELEASE_WORKFLOW,
            text=render_release(release_ctx, release, release_shape),
        ),
        Generated(
            path=layout.PR_WORKFLOW,
            text=render_pull_request(wf(layout.PR_NAME), pr, pr_shape, self_hosted=self_hosted),
        ),
    ]
    if self_hosted:
        files.append(
            Generated(
                path=layout.SELF_HOSTED_WORKFLOW,
                text=render_self_hosted(wf(layout.SELF_HOSTED_NAME), pr, self_shape),
            )
        )
    files.append(
        Generated(
            path=layout.CACHES_WORKFLOW,
            text=render_caches(wf(layout.CACHES_NAME), release, caches_shape),
        )
    )
    files.append(Generated(path=BACKFILL_WORKFLOW, text=render_backfill(wf(layout.RELEASE_NAME))))
    workflows = {g.path: g.text for g in files}
    files += [
        Generated(path=layout.ACTIONLINT_CONFIG, text=_actionlint(release_ctx)),
        Generated(
            path=layout.ZIZMOR_CONFIG,
            text=zizmor_config(workflows, hosted=hosted, header=release_ctx.do_not_edit()),
        ),
        Generated(path=layout.REQUIREMENTS, text=_hashed(release_ctx, pins.requirements)),
        Generated(path=layout.LOCK, text=_hashed(release_ctx, pins.lock)),
    ]
    for gen in files:
        if gen.path.startswith(layout.WORKFLOWS_DIR):
            check_scripts(gen.path, gen.text)
    return files
