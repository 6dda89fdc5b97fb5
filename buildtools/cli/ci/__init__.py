"""`buildtools ci <verb>`: the generated workflows (`github`) and the steps they run.

One module per verb, named after it (`restore-site` in `restore_site.py`), each with its
`add_parser` and its handler; the work is in `buildtools.workflows` (generating) and
`buildtools.cisteps` (the steps). `VERBS` is the order `buildtools ci --help` lists them.
"""

from __future__ import annotations

__all__ = ["VERBS", "add_ci_parser"]

from types import ModuleType
from typing import Any

from . import (
    backfill,
    builder_image,
    bundle,
    github,
    matrix,
    prefetch,
    pypi_dist,
    record,
    release_subjects,
    restore_site,
    select,
    status,
    upload_assets,
    verify_provenance,
)

VERBS: tuple[ModuleType, ...] = (
    github,
    matrix,
    status,
    restore_site,
    select,
    upload_assets,
    record,
    release_subjects,
    bundle,
    verify_provenance,
    pypi_dist,
    builder_image,
    prefetch,
    backfill,
)


def add_ci_parser(sub: Any) -> None:
    """Register `buildtools ci <verb>`."""
    p = sub.add_parser(
        "ci",
        help="GitHub Actions: generate the workflows from matrix.yaml, and their steps",
        description="`buildtools ci github` writes the release and pull-request workflows "
        "(`--check`: fail when they no longer match matrix.yaml); the other verbs are steps "
        "those workflows run.",
    )
    verbs = p.add_subparsers(dest="ci_verb", required=True, metavar="CI_VERB")
    for verb in VERBS:
        verb.add_parser(verbs)
