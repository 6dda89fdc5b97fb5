"""`buildtools ci release-subjects`: what the publish job attests, and the predicate."""

from __future__ import annotations

__all__ = ["add_parser", "cmd_release_subjects"]

import argparse
import json
import os
from pathlib import Path
from typing import Any, TextIO

from ...cisteps.provenance import (
    release_predicate,
    subjects_text,
)
from ...errors import PublishError
from ...files import write_atomic


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


def add_parser(sub: Any) -> None:
    p = sub.add_parser("release-subjects", help="what the publish job attests, and the predicate")
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--tag", required=True)
    p.add_argument("--sha", required=True, help="the tag's commit (the vetting step's)")
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(handler=cmd_release_subjects)
