"""`buildtools ci verify-provenance`: each file's release attestation: this run, this tag's
commit.
"""

from __future__ import annotations

__all__ = ["add_parser", "cmd_verify_provenance"]

import argparse
import os
from pathlib import Path
from typing import Any, TextIO

from ...cisteps.provenance import (
    Expect,
    Signer,
    verify_files,
)
from ...context import RunContext
from ...errors import PublishError
from ...process import ProcessRunner, SubprocessRunner


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
        args.files,
        signer=signer,
        expect=expect,
        ctx=RunContext(processes=runner or SubprocessRunner(), env=env),
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


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "verify-provenance", help="each file's release attestation: this run, this tag's commit"
    )
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--tag", required=True)
    p.add_argument("--sha", required=True, help="the tag's commit (the vetting step's)")
    p.add_argument("--default-branch", default=None, help="default: $BT_DEFAULT_BRANCH")
    p.set_defaults(handler=cmd_verify_provenance)
