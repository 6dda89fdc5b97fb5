#!/usr/bin/env python3
"""Make the local action cache that `nox -s ci-run` points act at (no GitHub at run time).

    python ci/act-actions.py --source 'https://github.com/{owner}/{name}' --out .act/actions
    python ci/act-actions.py --source "$MIRRORS/{owner}+{name}" --out .act/actions

For every action that buildtools/data/actions.yaml pins, the pinned commit is read from a
git directory (a mirror) or fetched from a URL, `git cat-file` proves that exact commit is
there (a tag or a branch of that name is not accepted), and its tree is exported to
OUT/<owner>/<name>@<sha>/ with OUT/<owner>/<name>@<sha>.commit naming the commit it came
from. Nothing fetched is committed: OUT is git-ignored (.act/). Prints one
`--local-repository owner/name@sha=DIR` line per action. An action that is missing from
the source is a failure (exit 1) unless --allow-missing names it; the run then stands in
for it (ci/act/standins/) and says so.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from buildtools.workflows.pins import load_pins

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 600.0


def pins() -> dict[str, str]:
    """owner/name -> commit, from the one file that pins them (validated here too)."""
    return {name: pin.sha for name, pin in load_pins().actions.items()}


def git(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "git failed"
        )
    return done.stdout


def export(name: str, sha: str, source: str, out: Path) -> Path:
    """The tree of `sha` at OUT/owner/name@sha, proven to be that commit."""
    owner, repo = name.split("/")
    target = out / owner / f"{repo}@{sha}"
    marker = target.with_name(target.name + ".commit")
    if marker.is_file() and marker.read_text().strip() == sha and target.is_dir():
        return target
    location = source.format(owner=owner, name=repo)
    with tempfile.TemporaryDirectory(prefix="act-actions-") as tmp:
        if "://" in location:
            gitdir = Path(tmp) / "git"
            git("init", "--quiet", "--bare", str(gitdir))
            git("--git-dir", str(gitdir), "fetch", "--quiet", "--depth", "1", location, sha)
        else:
            gitdir = Path(location)
            if not gitdir.is_dir():
                raise RuntimeError(f"{location}: no such git directory")
        kind = git("--git-dir", str(gitdir), "cat-file", "-t", sha).strip()
        if kind != "commit":
            raise RuntimeError(f"{sha} is a {kind}, not a commit")
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        archive = Path(tmp) / "tree.tar"
        git("--git-dir", str(gitdir), "archive", "--format=tar", "-o", str(archive), sha)
        shutil.unpack_archive(archive, target, filter="data")
    if not any((target / f).is_file() for f in ("action.yml", "action.yaml")):
        raise RuntimeError(f"commit {sha} has no action.yml at its root")
    marker.write_text(sha + "\n")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, help="git dir or URL with {owner} and {name}")
    parser.add_argument("--out", type=Path, default=ROOT / ".act" / "actions")
    parser.add_argument("--allow-missing", action="append", default=[], metavar="OWNER/NAME")
    args = parser.parse_args(argv)
    failed = 0
    for name, sha in pins().items():
        try:
            path = export(name, sha, args.source, args.out.resolve())
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            level = "missing (stood in for)" if name in args.allow_missing else "error"
            print(f"act-actions: {name}@{sha}: {level}: {exc}", file=sys.stderr)
            failed += name not in args.allow_missing
            continue
        print(f"--local-repository {name}@{sha}={path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
