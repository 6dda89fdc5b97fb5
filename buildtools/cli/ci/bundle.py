"""`buildtools ci bundle`: what the signing job publishes, and its digest (the prepare job)."""

from __future__ import annotations

__all__ = ["add_parser", "cmd_bundle"]

import argparse
import os
from pathlib import Path
from typing import Any, TextIO

from ...ciplan.shapes import write_outputs
from ...cisteps.release_bundle import write_bundle


def cmd_bundle(args: argparse.Namespace, out: TextIO) -> int:
    """Write the bundle; output `bundle=<sha256 of its MANIFEST.sha256>`."""
    bundle = write_bundle(
        args.out,
        wheels=sorted(args.wheels.glob("*.whl")) if args.wheels.is_dir() else [],
        site=args.site_root,
        record=args.record,
        attest=args.attest,
        url_prefix=args.url_prefix,
        base_record=args.base_record,
    )
    write_outputs(args.github_output or os.environ.get("GITHUB_OUTPUT"), {"bundle": bundle.digest})
    out.write(
        f"bundle {bundle.root}: {len(bundle.wheels)} wheel(s), {bundle.files} site file(s), "
        f"{bundle.linked} linked release asset(s); sha256 of its manifest {bundle.digest}\n"
    )
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "bundle", help="what the signing job publishes, and its digest (the prepare job)"
    )
    p.add_argument("--out", type=Path, required=True, help="the bundle directory (emptied)")
    p.add_argument("--wheels", type=Path, required=True, help="the selected wheels")
    p.add_argument("--site-root", type=Path, required=True, help="the pages root to deploy")
    p.add_argument("--record", type=Path, required=True, help="the site's index.json")
    p.add_argument("--attest", type=Path, required=True, help="`ci release-subjects` --out")
    p.add_argument("--url-prefix", required=True, help="this tag's release download URL prefix")
    p.add_argument(
        "--base-record",
        required=True,
        help="the asset id of the record the site was merged into (`ci restore-site`), or none",
    )
    p.add_argument(
        "--github-output",
        default=None,
        metavar="FILE",
        help="append `bundle=<digest>` here (default: $GITHUB_OUTPUT)",
    )
    p.set_defaults(handler=cmd_bundle)
