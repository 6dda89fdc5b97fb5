"""`buildtools ci matrix`: the plan job: GitHub Actions matrices (one entry per BuildJob)
for a workflow.
"""

from __future__ import annotations

__all__ = ["add_parser", "cmd_matrix"]

import argparse
import dataclasses
import json
import os
from pathlib import Path
from typing import Any, TextIO

from ...backends.docker.images import pins_file
from ...ciplan import layout
from ...ciplan.cachekeys import unpinned_bases
from ...ciplan.entries import matrix_entries
from ...ciplan.shapes import (
    Shape,
    append_to,
    assignments,
    github_outputs,
    select,
    shape_of,
    summary_markdown,
    write_outputs,
)
from ...ciplan.smokeonly import window_families, window_outputs, window_rows
from ...cisteps.github_api import GitHubApi, RestApi
from ...cisteps.provenance import record_policy
from ...cisteps.published_record import latest_record
from ...cisteps.tagcheck import check_tag, project_version, published_jobs
from ...cisteps.verdict import (
    entries_json,
)
from ...context import RunContext
from ...errors import PlanError
from ...index.published import window_cells
from ...matrix.config import load_matrix
from ...planning import default_matrix_path, host_python
from ...process import ProcessRunner, SubprocessRunner
from ...toolchain.buildrequires import extra_build_requirements
from ...workflows.generate import regen_command
from ...workflows.pins import load_pins
from ..common import add_plan_args, plan_from_args


def cmd_matrix(
    args: argparse.Namespace,
    out: TextIO,
    *,
    api: GitHubApi | None = None,
    runner: ProcessRunner | None = None,
) -> int:
    if args.profile is None:
        raise PlanError("ci matrix: --profile is required (the workflows pass release or pr)")
    if args.torch_axis is not None:
        raise PlanError("ci matrix: --torch does not apply; CI builds the profile's torches")
    release = args.workflow == layout.RELEASE_NAME
    for flag, given in (
        ("--tag", args.tag),
        ("--unsmoked", args.unsmoked),
        ("--window", args.window),
    ):
        if given and not release:
            raise PlanError(f"ci matrix: {flag} applies to --workflow release only")
    if args.window and not (args.tag and args.published_from_releases):
        raise PlanError(
            "ci matrix: --window needs --tag and --published-from-releases (its wheel comes "
            "from the authenticated record)"
        )
    env = dict(os.environ)
    only = list(args.only)
    args.only = []
    full, project_dir = plan_from_args(args)
    selected = full
    if only:
        args.only = only
        selected, _ = plan_from_args(args)
    elif args.window:  # a smoke-only run (the backfill's): nothing else is built
        selected = dataclasses.replace(full, cells=(), jobs=())
    matrix = str(args.matrix) if args.matrix else layout.DEFAULT_MATRIX
    mf = load_matrix(args.matrix or default_matrix_path())
    hosted = load_pins().hosted_runners.labels

    def entries_of(plan: Any, *, images: bool) -> list[Any]:
        return matrix_entries(
            plan,
            full,
            profile=args.profile,
            matrix=matrix,
            ci_python=host_python(),
            hosted=hosted,
            env=env if images else None,
            build_requires=extra_build_requirements(project_dir),
        )

    entries = entries_of(selected, images=True)
    shape = (
        Shape.parse(args.workflow, args.shape)
        if args.shape
        else shape_of(entries_of(full, images=False), args.workflow)
    )
    published: dict[str, str] = {}
    notes: list[str] = []
    extra: dict[str, str] = {}
    windows: dict[str, list[dict[str, Any]]] = {}
    if args.tag is not None:
        version_file = mf.matrix.ci.version_file
        where = f"{project_dir}/{version_file}" if version_file else str(project_dir)
        name = mf.matrix.project.name
        tagged = check_tag(
            args.tag,
            project_version(project_dir, name=name, version_file=version_file),
            where=where,
            pattern=mf.matrix.ci.tag_pattern,
        )
        extra["tag"] = args.tag
        notes.append(f"tag `{args.tag}` releases version {tagged} of `{name or project_dir}`")
        if args.published_from_releases:
            policy = record_policy(
                RunContext(processes=runner or SubprocessRunner(), env=env),
                wheel_url=mf.matrix.index.wheel_url,
            )
            record = latest_record(api or RestApi.from_env(env), policy)
            if record is not None:
                published = published_jobs(
                    selected.jobs, project=name, version=tagged, wheels=record.manifest.wheels
                )
                notes.append(
                    f"published record: {len(record.manifest.wheels)} wheel(s) "
                    f"(`index.json` of the release {record.tag})"
                )
            if args.window:
                windows = _windows(args.window, full, record, name, tagged, entries_of)
                notes += [
                    f"smoke-only `{r['id']}`: `{r['wheel']}` (published, sha256 "
                    f"`{r['sha256'][:12]}…`) on torch {r['window_torch']}, no build"
                    for rows in windows.values()
                    for r in rows
                ]
            if not name:
                notes.append(
                    "project.name is not set in matrix.yaml: published wheels cannot be "
                    "recognised, every job is built"
                )
    if args.sha:
        extra["sha"] = args.sha
    unsmoked = args.unsmoked or mf.matrix.ci.unsmoked == "build"
    selection = select(entries, args.workflow, unsmoked=unsmoked, published=published)
    jobs = assignments(selection, shape, regenerate=regen_command(matrix))
    flags: dict[str, bool] = {}
    if release:
        publish = not args.no_publish and (
            any(e.smoke_runner for e in selection.build) or bool(windows)
        )
        pypi = mf.matrix.ci.pypi
        flags = {
            "publish": publish,
            "pypi": publish
            and pypi is not None
            and any(
                e.torch == pypi.torch and e.accelerator == pypi.accelerator and e.smoke_runner
                for e in selection.build
            ),
        }
    elif args.workflow == layout.PR_NAME:
        flags = {"index": bool(selection.build)}
    built = {e.id for e in selection.build}
    unpinned = unpinned_bases([j for j in selected.jobs if j.id in built], env)
    if unpinned and release:
        raise PlanError(
            f"a release builds only FROM bases pinned by digest, and {pins_file(env)} has none "
            "for " + ", ".join(unpinned) + " (a re-pushed tag would change what the release "
            "builds); run `python ci/refresh-image-pins.py` where the registry is reachable "
            "and commit buildtools/data/image_pins.yaml (or set BUILDTOOLS_IMAGE_PINS to a "
            "pins file of yours)"
        )
    if unpinned:
        notes.append(
            f"builder base images without a digest in {pins_file(env).name} (used by tag, so "
            "a re-pushed tag changes the build; a release stops on them): "
            + ", ".join(f"`{b}`" for b in unpinned)
            + "; run `python ci/refresh-image-pins.py` and commit it"
        )
    outputs = {**github_outputs(jobs, build_count=len(selection.build), flags=flags), **extra}
    if release:
        outputs.update(window_outputs(windows, window_families(shape.smoke)))
    write_outputs(args.github_output or env.get("GITHUB_OUTPUT"), outputs)
    summary = summary_markdown(
        selection, profile=args.profile, matrix=matrix, only=only, notes=notes
    )
    append_to(args.summary or env.get("GITHUB_STEP_SUMMARY"), summary)
    if args.plan_json is not None:
        args.plan_json.parent.mkdir(parents=True, exist_ok=True)
        args.plan_json.write_text(
            json.dumps(
                {"include": [j.to_plan_json() for j in selected.jobs]}, indent=2, sort_keys=True
            )
            + "\n",
            encoding="utf-8",
        )
    if args.entries_json is not None:
        owner = {
            (row["id"], job.split("-", 1)[0]): job
            for job, rows in jobs.items()
            for row in rows
            if job.startswith(("build-", "smoke-"))
        }
        args.entries_json.parent.mkdir(parents=True, exist_ok=True)
        args.entries_json.write_text(
            entries_json(
                workflow=args.workflow,
                build=[(e.to_json(), owner[(e.id, "build")]) for e in selection.build],
                smoke=[(e.to_json(), owner[(e.id, "smoke")]) for e, _ in selection.smoke],
                skipped=selection.skipped,
            ),
            encoding="utf-8",
        )
    out.write(summary)
    return 0


def _windows(
    asked: list[str], full: Any, record: Any, name: str | None, version: Any, entries_of: Any
) -> dict[str, list[dict[str, Any]]]:
    """The smoke-only legs of `--window` cells, their wheels from the authenticated record."""
    if record is None or not name:
        raise PlanError(
            "ci matrix: --window: no published record (or no project.name) to take the "
            "window's wheel from; a smoke-only run proves a wheel that was published"
        )
    manifest = record.manifest
    inside = window_cells(
        full.jobs, project=name, version=version, wheels=manifest.wheels, runs=manifest.smoke
    )
    return window_rows(asked, inside, manifest.wheels, entries_of(full, images=False))


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "matrix",
        help="the plan job: GitHub Actions matrices (one entry per BuildJob) for a workflow",
    )
    add_plan_args(p)
    p.add_argument(
        "--workflow",
        choices=layout.WORKFLOW_KINDS,
        default=layout.RELEASE_NAME,
        help="which generated workflow plans (default: release)",
    )
    p.add_argument(
        "--shape",
        default=None,
        help="the jobs the workflow was generated with (it passes them; default: this plan's)",
    )
    p.add_argument("--tag", default=None, help="release: the tag, checked against the version")
    p.add_argument("--sha", default=None, help="the commit later jobs check out")
    p.add_argument(
        "--published-from-releases",
        action="store_true",
        help="release: skip jobs whose wheels the published record (release assets) lists",
    )
    p.add_argument(
        "--unsmoked",
        action="store_true",
        help="release: also build the families without a smoke runner",
    )
    p.add_argument("--no-publish", action="store_true", help="release: build and test only")
    p.add_argument(
        "--window",
        action="append",
        default=[],
        metavar="CELL",
        help="release: a cell inside a published stable-ABI wheel's window: smoke that wheel "
        "on the cell's torch (smoke-window-<family>), build nothing for it (repeatable)",
    )
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
    p.add_argument(
        "--entries-json",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write each job's matrix entry (what the status job reads)",
    )
    p.set_defaults(handler=cmd_matrix)
