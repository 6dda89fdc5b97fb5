"""`buildtools ci github|matrix|restore-site`: the generated workflows and their steps."""

from __future__ import annotations

__all__ = ["add_ci_parser", "add_github_parser", "add_matrix_parser", "add_restore_parser"]

import argparse
import json
import os
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from ..ci import layout
from ..ci.github import check_command, check_files, generate, regen_command, write_files
from ..ci.matrix import (
    append_to,
    github_outputs,
    matrix_entries,
    summary_markdown,
    write_outputs,
)
from ..ci.site import Fetcher, UrllibFetcher, pages_subpath, restore_site
from ..errors import CiDriftError, PlanError, PublishError
from ..matrix.config import IndexConfig, load_matrix
from ..planning import default_matrix_path, host_python
from .common import add_plan_args, plan_from_args


def add_github_parser(sub: Any) -> None:
    p = sub.add_parser(
        "github",
        help="write .github/workflows/{release,pull-request}.yml from matrix.yaml (or --check)",
    )
    p.add_argument("--matrix", type=Path, default=None, help="matrix.yaml (default: ./matrix.yaml)")
    p.add_argument(
        "--root",
        type=Path,
        default=None,
        help="repository root the workflows go under (default: the nearest parent of "
        "matrix.yaml with .git)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 14 when the files in the repository differ",
    )
    p.add_argument("--force", action="store_true", help="replace files that were not generated")
    p.set_defaults(handler=cmd_github)


def cmd_github(args: argparse.Namespace, out: TextIO) -> int:

    ci = generate(args.matrix or default_matrix_path(), root=args.root)
    regen = regen_command(ci.matrix)
    if args.check:
        problems = check_files(ci)
        if problems:
            raise CiDriftError(
                f"the GitHub Actions workflows no longer match {ci.matrix}:\n"
                + "\n".join(problems)
                + f"\nregenerate them with `{regen}` (or `buildtools ci github`) and commit "
                + ", ".join(g.path for g in ci.files)
            )
        out.write(
            f"{len(ci.files)} file(s) match {ci.matrix}: "
            + ", ".join(g.path for g in ci.files)
            + "\n"
        )
        return 0
    for path, what in write_files(ci, force=args.force):
        out.write(f"  {what:9}  {path}\n")
    out.write(f"commit them; `{check_command(ci.matrix)}` checks they stay current\n")
    return 0


def add_matrix_parser(sub: Any) -> None:

    p = sub.add_parser(
        "matrix",
        help="the plan job: GitHub Actions matrices (one entry per BuildJob) for a profile",
    )
    add_plan_args(p)
    p.add_argument(
        "--github-output",
        default=None,
        metavar="FILE",
        help="append the outputs here (default: $GITHUB_OUTPUT; none: print only)",
    )
    p.add_argument(
        "--summary",
        default=None,
        metavar="FILE",
        help="append a Markdown summary here (default: $GITHUB_STEP_SUMMARY)",
    )
    p.add_argument(
        "--plan-json",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write the plan as `buildtools plan --format json` prints it",
    )
    p.set_defaults(handler=cmd_matrix)


def cmd_matrix(args: argparse.Namespace, out: TextIO) -> int:

    if args.profile is None:
        raise PlanError("ci matrix: --profile is required (the workflows pass release or pr)")
    if args.torch_axis is not None:
        raise PlanError("ci matrix: --torch does not apply; CI builds the profile's torches")
    env = dict(os.environ)
    only = list(args.only)
    args.only = []
    full, _ = plan_from_args(args)
    selected = full
    if only:
        args.only = only
        selected, _ = plan_from_args(args)
    matrix = str(args.matrix) if args.matrix else layout.DEFAULT_MATRIX
    entries = matrix_entries(
        selected, full, profile=args.profile, matrix=matrix, ci_python=host_python()
    )
    outputs = github_outputs(entries)
    write_outputs(args.github_output or env.get("GITHUB_OUTPUT"), outputs)
    summary = summary_markdown(entries, profile=args.profile, matrix=matrix, only=only)
    append_to(args.summary or env.get("GITHUB_STEP_SUMMARY"), summary)
    if args.plan_json is not None:
        args.plan_json.write_text(
            json.dumps(
                {"include": [j.to_plan_json() for j in selected.jobs]}, indent=2, sort_keys=True
            )
            + "\n",
            encoding="utf-8",
        )
    out.write(summary)
    return 0


def add_restore_parser(sub: Any) -> None:
    p = sub.add_parser(
        "restore-site",
        help="download the published site (index.base_url) so that a publish merges into it",
    )
    p.add_argument("--site", type=Path, required=True, help="the Pages artifact's root directory")
    p.add_argument("--matrix", type=Path, default=None, help="matrix.yaml (for index.base_url)")
    p.add_argument("--base-url", default=None, help="the published site (default: index.base_url)")
    p.add_argument(
        "--repository",
        default=None,
        help="OWNER/REPO deploying the site (default: $GITHUB_REPOSITORY)",
    )
    p.add_argument(
        "--github-output",
        default=None,
        metavar="FILE",
        help="append `path=<site dir>` here (default: $GITHUB_OUTPUT)",
    )
    p.set_defaults(handler=cmd_restore_site)


def cmd_restore_site(
    args: argparse.Namespace, out: TextIO, *, fetcher: Fetcher | None = None
) -> int:
    env = dict(os.environ)
    base_url = args.base_url
    if base_url is None:
        base_url = load_matrix(args.matrix or default_matrix_path()).matrix.index.base_url
    if not base_url:
        raise PublishError(
            "no index.base_url in matrix.yaml (or --base-url): nothing tells where the "
            "site is published"
        )
    repository = args.repository or env.get("GITHUB_REPOSITORY")
    try:
        IndexConfig.model_validate({"base_url": base_url})
    except ValidationError as exc:
        msg = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise PublishError(f"--base-url: {msg}") from None
    sub = pages_subpath(base_url, repository)
    site = args.site / sub if sub else args.site
    restored = restore_site(base_url, site, fetcher=fetcher or UrllibFetcher())
    if restored.first_publish:
        out.write(f"{base_url}: no index.json yet: this is the first publish\n")
    else:
        out.write(f"restored {restored.wheels} published wheel(s) from {base_url} into {site}\n")
    write_outputs(args.github_output or env.get("GITHUB_OUTPUT"), {"path": str(site)})
    return 0


def add_ci_parser(sub: Any) -> None:
    """Register `buildtools ci <github|matrix|restore-site>`."""
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
