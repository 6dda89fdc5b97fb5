"""`buildtools ci restore-site|select|upload-assets|record|release-subjects|verify-provenance|
pypi-dist|builder-image|prefetch`.

The steps of the release's publishing jobs and of the cache jobs (see `buildtools.cisteps`).
"""

from __future__ import annotations

__all__ = ["add_release_parsers"]

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from ..ciplan import layout
from ..ciplan.entries import matrix_entries
from ..ciplan.shapes import write_outputs
from ..cisteps.assets import (
    built_wheels,
    publish_release,
    read_selection,
    select_wheels,
    selection_lines,
    upload_assets,
)
from ..cisteps.assets import missing_assets as find_missing
from ..cisteps.cache_jobs import build_image, prefetch
from ..cisteps.github_api import GitHubApi, RestApi
from ..cisteps.provenance import (
    Expect,
    Signer,
    record_policy,
    release_predicate,
    subjects_text,
    verify_files,
)
from ..cisteps.record import latest_record, upload_record
from ..cisteps.restore import (
    Fetcher,
    HttpFetcher,
    pages_subpath,
    restore_from_record,
    restore_site,
)
from ..errors import ImmutableWheelError, PlanError, PublishError
from ..files import write_atomic
from ..index.manifest import MANIFEST_NAME as RECORD_NAME
from ..index.manifest import read_manifest
from ..knowledge import load_knowledge
from ..matrix.config import IndexConfig, load_matrix
from ..planning import default_matrix_path, host_python
from ..process import ProcessRunner, SubprocessRunner
from ..wheel.meta import public_wheel
from ..workflows.pins import load_pins
from .common import add_plan_args, plan_from_args


def _api(env: dict[str, str], api: GitHubApi | None) -> GitHubApi:
    return api or RestApi.from_env(env)


# ----------------------------------------------------------------------------- restore-site


def cmd_restore_site(
    args: argparse.Namespace,
    out: TextIO,
    *,
    fetcher: Fetcher | None = None,
    api: GitHubApi | None = None,
    runner: ProcessRunner | None = None,
) -> int:
    env = dict(os.environ)
    matrix = args.matrix or default_matrix_path()
    # matrix.yaml gives index.base_url unless --base-url does, and index.wheel_url (where a
    # record's wheels may link besides the release downloads) when there is one
    needed = args.base_url is None or (args.from_releases and args.matrix is not None)
    index = load_matrix(matrix).matrix.index if needed or matrix.is_file() else None
    base_url = args.base_url
    if base_url is None and index is not None:
        base_url = index.base_url
    if base_url:
        try:
            IndexConfig.model_validate({"base_url": base_url})
        except ValidationError as exc:
            msg = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
            raise PublishError(f"--base-url: {msg}") from None
    elif not args.from_releases:
        raise PublishError(
            "no index.base_url in matrix.yaml (or --base-url): nothing tells where the "
            "site is published"
        )
    repository = args.repository or env.get("GITHUB_REPOSITORY")
    sub = pages_subpath(base_url, repository) if base_url else ""
    site = args.site / sub if sub else args.site
    fetch = fetcher or HttpFetcher()
    if args.from_releases:
        policy = record_policy(
            env,
            runner=runner or SubprocessRunner(),
            wheel_url=index.wheel_url if index is not None else None,
            default_branch=args.default_branch,
        )
        record = latest_record(_api(env, api), policy)
        for tag in record.skipped if record else ():
            out.write(f"note: skipped the {RECORD_NAME} of the draft release {tag}\n")
        with tempfile.TemporaryDirectory() as scratch:
            restored = restore_from_record(
                record,
                site,
                base_url=base_url or None,
                fetcher=fetch,
                scratch=Path(scratch),
                cache_bust=args.cache_bust or "",
            )
    else:
        restored = restore_site(base_url, site, fetcher=fetch)
    for note in restored.notes:
        out.write(f"note: {note}\n")
    if restored.first_publish:
        out.write(f"{restored.source}: nothing published yet: this is the first publish\n")
    elif args.from_releases:
        out.write(
            f"restored {restored.wheels} published wheel(s) from {restored.source} into {site}\n"
        )
    else:
        out.write(f"restored {restored.hosted} published wheel(s) from {base_url} into {site}\n")
    write_outputs(args.github_output or env.get("GITHUB_OUTPUT"), {"path": str(site)})
    return 0


def _add_restore(sub: Any) -> None:
    p = sub.add_parser(
        "restore-site",
        help="start the site from the published record (release assets) or from index.base_url",
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
        "--from-releases",
        action="store_true",
        help="start from the newest index.json asset of the releases (checked against the site)",
    )
    p.add_argument(
        "--default-branch",
        default=None,
        help="the branch whose release.yml signs records (default: $BT_DEFAULT_BRANCH)",
    )
    p.add_argument(
        "--cache-bust",
        default=None,
        metavar="TOKEN",
        help="a query string value that makes the CDN fetch the site's index.json anew",
    )
    p.add_argument(
        "--github-output",
        default=None,
        metavar="FILE",
        help="append `path=<site dir>` here (default: $GITHUB_OUTPUT)",
    )
    p.set_defaults(handler=cmd_restore_site)


# -------------------------------------------------------------------- select, upload, record


def cmd_select(args: argparse.Namespace, out: TextIO) -> int:
    built = None
    if args.built_env:
        env = dict(os.environ)
        built = built_wheels(env.get(name, "") for name in args.built_env)
    selection = select_wheels(args.wheels, args.require_smoke, args.out, built=built)
    args.selection.write_text(selection.to_json(), encoding="utf-8")
    for line in selection_lines(selection):
        out.write(line + "\n")
    out.write(
        f"{len(selection.published)} wheel(s) selected, {len(selection.held_back)} held back\n"
    )
    if args.expect is not None:
        expected = {(w, s) for w, s, _ in read_selection(args.expect).published}
        got = {(w, s) for w, s, _ in selection.published}
        if expected != got:
            raise ImmutableWheelError(
                f"the wheels differ from the selection {args.expect} the publish job made "
                f"(only here: {sorted(w for w, _ in got - expected)}, only there: "
                f"{sorted(w for w, _ in expected - got)}); nothing is published"
            )
    return 0


def cmd_upload_assets(
    args: argparse.Namespace, out: TextIO, *, api: GitHubApi | None = None
) -> int:
    result = upload_assets(_api(dict(os.environ), api), args.tag, args.files)
    for name in result.uploaded:
        out.write(f"  uploaded   {name}\n")
    for name in result.present:
        out.write(f"  present    {name} (same bytes)\n")
    for name in result.replaced:
        out.write(f"  replaced   {name} (an unfinished upload of an earlier attempt)\n")
    out.write(
        f"release {args.tag}: {len(result.uploaded)} uploaded, {len(result.present)} already there\n"
    )
    return 0


def cmd_record(args: argparse.Namespace, out: TextIO, *, api: GitHubApi | None = None) -> int:
    client = _api(dict(os.environ), api)
    manifest = read_manifest(args.site)
    missing = find_missing(client, args.tag, manifest, args.url_prefix)
    if missing:
        raise PublishError(
            "the index links wheels the release does not hold; nothing is recorded or "
            "deployed:\n  " + "\n  ".join(missing)
        )
    release = client.release(args.tag)
    if release is None:
        raise PublishError(f"no release for {args.tag}: upload its assets first")
    upload_record(client, release, args.site / RECORD_NAME)
    out.write(f"recorded {len(manifest.wheels)} wheel(s) as index.json of the release {args.tag}\n")
    if args.publish:
        done = publish_release(client, args.tag)
        out.write(f"release {args.tag}: " + ("published\n" if done else "published already\n"))
    return 0


def cmd_release_subjects(args: argparse.Namespace, out: TextIO) -> int:
    """The attest action's inputs: `subjects.sha256` and the release predicate."""
    env = dict(os.environ)
    missing = [str(p) for p in args.files if not p.is_file()]
    if missing:
        raise PublishError(f"nothing to attest: {', '.join(missing)}: not a file")
    args.out.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out / "subjects.sha256", subjects_text(args.files))
    predicate = release_predicate(
        tag=args.tag,
        commit=args.sha,
        repository=env.get("GITHUB_REPOSITORY", ""),
        run_id=env.get("GITHUB_RUN_ID", ""),
        run_attempt=env.get("GITHUB_RUN_ATTEMPT", "1"),
    )
    write_atomic(args.out / "predicate.json", json.dumps(predicate, sort_keys=True) + "\n")
    out.write(f"{len(args.files)} subject(s) for tag {args.tag} at {args.sha} in {args.out}\n")
    return 0


def cmd_verify_provenance(
    args: argparse.Namespace, out: TextIO, *, runner: ProcessRunner | None = None
) -> int:
    """Each file's release statement: this repository's release.yml, this run, this tag's
    commit; anything else stops the publish."""
    env = dict(os.environ)
    signer = Signer.from_env(env, default_branch=args.default_branch)
    expect = Expect(
        tag=args.tag,
        commit=args.sha,
        run_id=env.get("GITHUB_RUN_ID") or None,
        source_digest=env.get("GITHUB_SHA") or None,
    )
    failures = verify_files(
        args.files, signer=signer, expect=expect, runner=runner or SubprocessRunner(), env=env
    )
    if failures:
        raise PublishError(
            "no provenance from this release's publish job for:\n  "
            + "\n  ".join(f"{p.name}: {why}" for p, why in failures.items())
            + "\nnothing is published"
        )
    out.write(
        f"provenance verified for {len(args.files)} file(s): {signer.identity}, run "
        f"{expect.run_id}, tag {args.tag} at {args.sha}\n"
    )
    return 0


def cmd_pypi_dist(args: argparse.Namespace, out: TextIO) -> int:
    mf = load_matrix(args.matrix or default_matrix_path())
    pypi = mf.matrix.ci.pypi
    if pypi is None:
        raise PlanError("ci.pypi is not set in matrix.yaml: no variant goes to PyPI")
    selection = read_selection(args.selection)
    prefix = f"torch{pypi.torch}-{pypi.accelerator}-"
    wanted = {w: sha for w, sha, job in selection.published if job.startswith(prefix)}
    if not wanted:
        raise PublishError(
            f"no published wheel of torch {pypi.torch} {pypi.accelerator} in {args.selection}: "
            "nothing goes to PyPI"
        )
    written = []
    for path in sorted(args.wheels.rglob("*.whl")):
        if path.name in wanted:
            written.append(public_wheel(path, out_dir=args.out))
    if len(written) != len(wanted):
        raise PublishError(f"{args.wheels}: not every selected wheel was downloaded")
    for path in written:
        out.write(f"  {path}\n")
    return 0


# ------------------------------------------------------------------- images and downloads


def _jobs(args: argparse.Namespace) -> list[Any]:
    selected, _ = plan_from_args(args)
    return list(selected.jobs)


def cmd_builder_image(args: argparse.Namespace, out: TextIO) -> int:
    jobs = _jobs(args)
    if len(jobs) != 1:
        raise PlanError(f"builder-image: --only selects {len(jobs)} jobs; select one job")
    tag = build_image(
        jobs[0],
        kb=load_knowledge(),
        env=dict(os.environ),
        runner=SubprocessRunner(),
        log=sys.stdout,
        save=args.save,
        push=args.push,
    )
    out.write(f"builder image {tag}\n")
    return 0


def cmd_prefetch(args: argparse.Namespace, out: TextIO) -> int:
    full, _ = plan_from_args(args)
    hosted = load_pins().hosted_runners.labels
    entries = matrix_entries(
        full,
        full,
        profile=args.profile or "",
        matrix=str(args.matrix or layout.DEFAULT_MATRIX),
        ci_python=host_python(),
        hosted=hosted,
    )
    ids = {e.id for e in entries if e.prefetch_key == args.group}
    if not ids:
        raise PlanError(f"prefetch: no job of this profile has the download group {args.group}")
    dest = prefetch(
        [j for j in full.jobs if j.id in ids],
        kb=load_knowledge(),
        env=dict(os.environ),
        runner=SubprocessRunner(),
        log=sys.stdout,
    )
    out.write(f"downloads of {len(ids)} job(s) in {dest}\n")
    return 0


def add_release_parsers(sub: Any) -> None:
    """Register the publishing and cache verbs of `buildtools ci`."""
    _add_restore(sub)
    p = sub.add_parser("select", help="the smoke-passed wheels of the downloaded artifacts")
    p.add_argument("wheels", type=Path, help="the downloaded wheels-<job> artifacts")
    p.add_argument("--out", type=Path, required=True, help="where the selected wheels go")
    p.add_argument("--selection", type=Path, required=True, help="write selection.json here")
    p.add_argument("--require-smoke", action="append", type=Path, default=[], metavar="REPORT")
    p.add_argument(
        "--expect", type=Path, default=None, help="fail unless the same as this selection.json"
    )
    p.add_argument(
        "--built-env",
        action="append",
        default=[],
        metavar="VAR",
        help="a variable holding toJSON(needs.<build job>.outputs): every wheel must be one a "
        "build job of this run reported (repeat per build job)",
    )
    p.set_defaults(handler=cmd_select)

    p = sub.add_parser("upload-assets", help="upload wheels to the tag's GitHub Release")
    p.add_argument("--tag", required=True)
    p.add_argument("files", nargs="+", type=Path)
    p.set_defaults(handler=cmd_upload_assets)

    p = sub.add_parser("record", help="check the index's release links, record its index.json")
    p.add_argument("--tag", required=True)
    p.add_argument("--site", type=Path, required=True)
    p.add_argument("--url-prefix", required=True, help="this tag's release download URL prefix")
    p.add_argument("--publish", action="store_true", help="then publish the draft release")
    p.set_defaults(handler=cmd_record)

    p = sub.add_parser("release-subjects", help="what the publish job attests, and the predicate")
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--tag", required=True)
    p.add_argument("--sha", required=True, help="the tag's commit (the vetting step's)")
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(handler=cmd_release_subjects)

    p = sub.add_parser(
        "verify-provenance", help="each file's release attestation: this run, this tag's commit"
    )
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--tag", required=True)
    p.add_argument("--sha", required=True, help="the tag's commit (the vetting step's)")
    p.add_argument("--default-branch", default=None, help="default: $BT_DEFAULT_BRANCH")
    p.set_defaults(handler=cmd_verify_provenance)

    p = sub.add_parser("pypi-dist", help="the ci.pypi variant's wheels without the local label")
    p.add_argument("wheels", type=Path)
    p.add_argument("--selection", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--matrix", type=Path, default=None)
    p.set_defaults(handler=cmd_pypi_dist)

    p = sub.add_parser("builder-image", help="build one job's builder image; save or push it")
    add_plan_args(p)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--save", type=Path, default=None, help="`docker save` archive")
    where.add_argument("--push", default=None, help="registry reference to push to")
    p.set_defaults(handler=cmd_builder_image)

    p = sub.add_parser("prefetch", help="download one group's wheels into the prefetch dir")
    add_plan_args(p)
    p.add_argument("--group", required=True, help="the download group (prefetch_key)")
    p.set_defaults(handler=cmd_prefetch)
