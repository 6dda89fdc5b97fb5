"""`buildtools ci backfill`: the step of backfill.yml that decides what a release lacks.

`--latest-tag`: the newest release tag (`v<version>`, not a draft or pre-release) of the
repository, from the GitHub API. `--tag TAG` (run in the tag's checkout): the cells of the
`release` profile, at the version the tag releases, that its published record
(`index.json` of the releases, the record a release's plan reads) has no wheel for, minus
those no smoke runner can ever prove; written as the outputs `count` and `only` (the
cell ids `release.yml` is started with).
"""

from __future__ import annotations

__all__ = ["add_parser", "cmd_backfill", "latest_release_tag"]

import argparse
import os
import re
from pathlib import Path
from typing import Any, TextIO

from packaging.version import InvalidVersion, Version

from ...ciplan import layout
from ...ciplan.shapes import append_to, write_outputs
from ...cisteps.github_api import GitHubApi, RestApi
from ...cisteps.provenance import record_policy
from ...cisteps.published_record import RecordPolicy, latest_record
from ...cisteps.tagcheck import check_tag, project_version
from ...context import RunContext
from ...errors import PlanError
from ...http import Http
from ...index.published import published_cells, window_cells
from ...matrix.config import load_matrix
from ...planning import PlanRequest, default_matrix_path, load_plan
from ...process import SubprocessRunner

_TAG_RE = re.compile(r"^v[0-9][0-9A-Za-z.+!_-]*$")


def _release_version(tag: str) -> Version | None:
    if not _TAG_RE.match(tag):
        return None
    try:
        version = Version(tag[1:])
    except InvalidVersion:
        return None
    return None if version.local or version.is_prerelease or version.is_devrelease else version


def latest_release_tag(api: GitHubApi) -> str:
    """The tag of the newest published release `v<version>` (by version, not by date)."""
    best: tuple[Version, str] | None = None
    for release in api.releases():
        if release.get("draft") or release.get("prerelease"):
            continue
        tag = str(release.get("tag_name") or "")
        version = _release_version(tag)
        if version is not None and (best is None or version > best[0]):
            best = (version, tag)
    if best is None:
        raise PlanError("backfill: the repository has no published release `v<version>` yet")
    return best[1]


def _latest(args: argparse.Namespace, out: TextIO, api: GitHubApi) -> int:
    tag = args.tag or latest_release_tag(api)
    if _release_version(tag) is None:
        raise PlanError(f"backfill: {tag!r} is not a release tag v<version> (e.g. v1.2.0)")
    write_outputs(args.github_output or os.environ.get("GITHUB_OUTPUT"), {"tag": tag})
    out.write(f"backfill: the latest release tag is {tag}\n")
    return 0


def cmd_backfill(
    args: argparse.Namespace,
    out: TextIO,
    *,
    api: GitHubApi | None = None,
    http: Http | None = None,
    policy: RecordPolicy | None = None,
) -> int:
    env = dict(os.environ)
    api = api or RestApi.from_env(env)
    if args.latest_tag:
        return _latest(args, out, api)
    if not args.tag:
        raise PlanError("ci backfill: --tag TAG (or --latest-tag) is required")
    matrix = args.matrix or default_matrix_path(env)
    mf = load_matrix(matrix)
    request = PlanRequest(matrix=matrix, profile=layout.RELEASE_PROFILE)
    full, project_dir = load_plan(request, env=env, http=http)
    name = mf.matrix.project.name
    if not name:
        raise PlanError(
            f"{mf.source.where(('project',))}: project.name: a backfill compares wheel names "
            "with the published record; set the distribution name"
        )
    vfile = mf.matrix.ci.version_file
    where = f"{project_dir}/{vfile}" if vfile else str(project_dir)
    version = check_tag(
        args.tag, project_version(project_dir, name=name, version_file=vfile), where=where
    )
    # the same authentication as a release's plan job: a record it cannot authenticate stops
    # the backfill (exit 19) instead of choosing what to build
    policy = policy or record_policy(
        RunContext(processes=SubprocessRunner(), env=env), wheel_url=mf.matrix.index.wheel_url
    )
    record = latest_record(api, policy)
    wheels = record.manifest.wheels if record is not None else ()
    runs = record.manifest.smoke if record is not None else ()
    published = published_cells(full.jobs, project=name, version=version, wheels=wheels, runs=runs)
    # a new torch inside a published stable wheel's window: that wheel's smoke, no rebuild
    inside = window_cells(full.jobs, project=name, version=version, wheels=wheels, runs=runs)
    never = mf.matrix.ci.unsmoked != "build"
    unprovable = {c.id for j in full.jobs if j.smoke_runner is None and never for c in j.cells}
    missing = [
        c.id
        for c in full.cells
        if c.id not in published and c.id not in unprovable and c.id not in inside
    ]
    # release.yml proves a window on a CPU runner only (workflows.window_jobs): a GPU wheel's
    # new torch is reported below, not dispatched
    cpu = {c.id for j in full.jobs if j.accelerator.kind == "cpu" for c in j.cells}
    window = sorted(c for c in inside if c not in unprovable and c in cpu)
    write_outputs(
        args.github_output or env.get("GITHUB_OUTPUT"),
        {
            "count": str(len(missing)),
            "only": " ".join(missing),
            "smoke_only": " ".join(window),
        },
    )
    lines = [
        f"## Backfill of {args.tag} (version {version} of `{name}`)",
        "",
        "- published record: "
        + (f"`index.json` of the release {record.tag}" if record else "none yet")
        + f"; {len(published)} of {len(full.cells)} cell(s) of the release profile published",
    ]
    for resolution in full.ranges:
        lines.append(
            f"- torch `{resolution.spec}`: {', '.join(resolution.versions)} ({resolution.note})"
        )
    if unprovable - set(published):
        lines.append(
            f"- {len(unprovable - set(published))} cell(s) without a smoke runner: never "
            "published, not backfilled"
        )
    smoke_only = sorted((c, w) for c, w in inside.items() if c not in unprovable)
    if smoke_only:
        lines += [
            "",
            f"{len(smoke_only)} cell(s) inside a published wheel's window: a "
            "smoke-only run proves them (no rebuild):",
            "",
        ]
        lines += [
            f"- `{cid}`: `{wheel}`"
            + ("" if cid in window else " (not a CPU wheel: no smoke-only job proves it)")
            for cid, wheel in smoke_only
        ]
    if missing:
        lines += ["", f"{len(missing)} cell(s) missing, released now:", ""]
        lines += [f"- `{cid}`" for cid in missing]
    else:
        lines += ["", "Nothing is missing: nothing is built."]
    summary = "\n".join(lines) + "\n"
    append_to(args.summary or env.get("GITHUB_STEP_SUMMARY"), summary)
    out.write(summary)
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "backfill",
        help="backfill.yml's step: the latest release tag, and the cells its record lacks",
    )
    p.add_argument("--matrix", type=Path, default=None, help="matrix.yaml (of the tag's checkout)")
    p.add_argument("--tag", default=None, help="the release tag (v<version>)")
    p.add_argument(
        "--latest-tag",
        action="store_true",
        help="only find the newest release tag (or check --tag) and write it as output `tag`",
    )
    p.add_argument(
        "--github-output",
        default=None,
        metavar="FILE",
        help="append the outputs here (default: $GITHUB_OUTPUT)",
    )
    p.add_argument(
        "--summary",
        default=None,
        metavar="FILE",
        help="append a Markdown summary here (default: $GITHUB_STEP_SUMMARY)",
    )
    p.set_defaults(handler=cmd_backfill)
