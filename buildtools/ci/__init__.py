"""`buildtools ci`: the GitHub Actions release pipeline generated from matrix.yaml.

- `buildtools ci github [--check]` writes (or checks) `.github/workflows/release.yml`,
  `.github/workflows/pull-request.yml` and `.github/actionlint.yaml` (`ci.github`,
  `ci.workflows`, `ci.yamlwriter`, pins in `data/actions.yaml` via `ci.pins`);
- `buildtools ci matrix` is the workflows' plan job (`ci.matrix`);
- `buildtools ci restore-site` is the index job's first step (`ci.site`).
"""

from __future__ import annotations

__all__ = ["add_ci_parser"]

from typing import Any


def add_ci_parser(sub: Any) -> None:
    """Register `buildtools ci <github|matrix|restore-site>`."""
    from .github import add_github_parser
    from .matrix import add_matrix_parser
    from .site import add_restore_parser

    p = sub.add_parser(
        "ci",
        help="GitHub Actions: generate the workflows from matrix.yaml, and their helpers",
        description="`buildtools ci github` writes the release and pull-request workflows "
        "(`--check`: fail when they no longer match matrix.yaml); `matrix` and "
        "`restore-site` are steps those workflows run.",
    )
    verbs = p.add_subparsers(dest="ci_verb", required=True, metavar="CI_VERB")
    add_github_parser(verbs)
    add_matrix_parser(verbs)
    add_restore_parser(verbs)
