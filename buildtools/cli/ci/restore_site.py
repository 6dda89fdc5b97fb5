"""`buildtools ci restore-site`: start the site from the published record (release assets)
or from index.base_url.
"""

from __future__ import annotations

__all__ = ["add_parser", "cmd_restore_site"]

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from ...ciplan.shapes import write_outputs
from ...cisteps.github_api import GitHubApi, RestApi
from ...cisteps.provenance import (
    record_policy,
)
from ...cisteps.published_record import latest_record
from ...cisteps.restore import (
    Fetcher,
    HttpFetcher,
    pages_subpath,
    restore_from_record,
    restore_site,
)
from ...context import RunContext
from ...errors import PublishError
from ...index.manifest import MANIFEST_NAME as RECORD_NAME
from ...matrix.config import IndexConfig, load_matrix
from ...planning import default_matrix_path
from ...process import ProcessRunner, SubprocessRunner


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
            RunContext(processes=runner or SubprocessRunner(), env=env),
            wheel_url=index.wheel_url if index is not None else None,
            default_branch=args.default_branch,
        )
        record = latest_record((api or RestApi.from_env(env)), policy)
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
    outputs = {"path": str(site)}
    if args.from_releases:
        # the record this site was merged into: the signing job checks it is still the newest
        outputs["record"] = record.asset if record is not None else "none"
    write_outputs(args.github_output or env.get("GITHUB_OUTPUT"), outputs)
    return 0


def add_parser(sub: Any) -> None:
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
