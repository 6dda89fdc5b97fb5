"""`buildtools ci record`: check the index's release links, record its index.json."""

from __future__ import annotations

__all__ = ["add_parser", "cmd_record"]

import argparse
import os
from pathlib import Path
from typing import Any, TextIO

from ...cisteps.assets import missing_assets as find_missing
from ...cisteps.assets import (
    publish_release,
)
from ...cisteps.github_api import GitHubApi, RestApi
from ...cisteps.published_record import upload_record
from ...errors import PublishError
from ...index.manifest import MANIFEST_NAME as RECORD_NAME
from ...index.manifest import read_manifest


def cmd_record(args: argparse.Namespace, out: TextIO, *, api: GitHubApi | None = None) -> int:
    client = api or RestApi.from_env(dict(os.environ))
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


def add_parser(sub: Any) -> None:
    p = sub.add_parser("record", help="check the index's release links, record its index.json")
    p.add_argument("--tag", required=True)
    p.add_argument("--site", type=Path, required=True)
    p.add_argument("--url-prefix", required=True, help="this tag's release download URL prefix")
    p.add_argument("--publish", action="store_true", help="then publish the draft release")
    p.set_defaults(handler=cmd_record)
