"""`buildtools ci upload-assets`: upload wheels to the tag's GitHub Release."""

from __future__ import annotations

__all__ = ["add_parser", "cmd_upload_assets"]

import argparse
import os
from pathlib import Path
from typing import Any, TextIO

from ...cisteps.assets import (
    upload_assets,
)
from ...cisteps.github_api import GitHubApi, RestApi


def cmd_upload_assets(
    args: argparse.Namespace, out: TextIO, *, api: GitHubApi | None = None
) -> int:
    result = upload_assets(api or RestApi.from_env(dict(os.environ)), args.tag, args.files)
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


def add_parser(sub: Any) -> None:
    p = sub.add_parser("upload-assets", help="upload wheels to the tag's GitHub Release")
    p.add_argument("--tag", required=True)
    p.add_argument("files", nargs="+", type=Path)
    p.set_defaults(handler=cmd_upload_assets)
