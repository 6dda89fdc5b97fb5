"""The GitHub Actions workflows of a matrix.yaml, as text (pure: nothing is run or written).

`release.yml`: plan → build (one job per BuildJob, docker backend, CPU runners) → smoke
(per accelerator family that has a runner in `runners.smoke`) → index (only when the
builds and every smoke job that had work passed; `--require-smoke` publishes only the
wheels a smoke report passed) → deploy to GitHub Pages (when `index.base_url` is set).
`pull-request.yml`: the drift check, then the same graph for the `pr` profile, ending in
an index preview artifact. `actionlint.yaml`: the custom runner labels, for actionlint.

Safe by construction: actions pinned by commit SHA (`data/actions.yaml`), `permissions: {}`
at the top and the least each job needs, no `${{ }}` inside a `run:` script (values reach
scripts through `env:`), checkouts without persisted credentials, a timeout on every job.
Uploads overwrite: re-running a failed job uploads its artifacts again under the same name.
"""

from __future__ import annotations

__all__ = ["Generated", "render_workflows"]

from collections.abc import Mapping
from dataclasses import dataclass

from ..matrix.config import MatrixFile
from ..planner import Plan
from . import layout
from .jobs import Context
from .pins import CiPins
from .pull_request import render_pull_request
from .release import render_release
from .runners import custom_labels
from .yamlwriter import dump


@dataclass(frozen=True, kw_only=True)
class Generated:
    """One generated file: its path relative to the repository root, and its text."""

    path: str
    text: str


def _actionlint(ctx: Context) -> str:
    header = [
        ctx.do_not_edit(),
        "The self-hosted runner labels of runners.build / runners.smoke, for actionlint.",
    ]
    return dump({"self-hosted-runner": {"labels": custom_labels(ctx.mf)}}, header=header)


def render_workflows(
    mf: MatrixFile, pins: CiPins, plans: Mapping[str, Plan], *, matrix: str
) -> list[Generated]:
    """The generated files for a matrix (plans: the `release` and `pr` profiles' plans)."""
    ctx = Context(mf=mf, pins=pins, matrix=matrix)
    return [
        Generated(
            path=layout.RELEASE_WORKFLOW, text=render_release(ctx, plans[layout.RELEASE_PROFILE])
        ),
        Generated(path=layout.PR_WORKFLOW, text=render_pull_request(ctx, plans[layout.PR_PROFILE])),
        Generated(path=layout.ACTIONLINT_CONFIG, text=_actionlint(ctx)),
    ]
