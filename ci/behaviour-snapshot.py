"""The behaviour a structural change must not move, written as files to compare with `diff -r`.

For the repository's matrix.yaml and the test corpus' matrices (tests/fixtures: the CI
fixtures' large and huge matrices, the stable-ABI projects'): the plan of every profile
(`buildtools plan --format json`: cells, jobs, each job's fingerprint, removed cells and their
reasons), the GitHub Actions matrices of every generated workflow (`buildtools ci matrix`),
and the workflows `buildtools ci github` generates. Each command's exit status is recorded
with its output, so a refusal that changes shows too.

    python ci/behaviour-snapshot.py /tmp/before      # at the commit before the change
    python ci/behaviour-snapshot.py /tmp/after       # after it
    diff -r /tmp/before /tmp/after                   # empty: the same behaviour

The machine's own facts (the host Python, the cache) enter a plan only through `python:
host` and `--estimate`, which the snapshot leaves out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[1]
MATRICES = [
    "matrix.yaml",
    "tests/fixtures/ci/matrix-large.yaml",
    "tests/fixtures/ci/matrix-huge.yaml",
    "tests/fixtures/ext_stable/matrix.yaml",
    "tests/fixtures/ext_stable_c10/matrix.yaml",
    "tests/fixtures/ext_stable_newshim/matrix.yaml",
]
WORKFLOWS = ("release", "pull-request", "self-hosted", "caches")
TIMEOUT = 300
IGNORE = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", ".nox")


def _run(out: Path, argv: list[str], *, cwd: Path, repo: Path | None = None) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BUILDTOOLS_", "GITHUB_"))}
    env["BUILDTOOLS_CACHE_DIR"] = str(out.parent / ".cache")  # nothing of this machine's
    done = subprocess.run(
        [sys.executable, "-m", "buildtools", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    text = done.stdout + (f"\n--- stderr\n{done.stderr}" if done.stderr else "")
    text = f"$ buildtools {' '.join(argv)}\nexit {done.returncode}\n{text}"
    for path, mark in ((repo, "<repo>"), (ROOT, "<root>")):  # a temporary or clone's path
        text = text.replace(str(path), mark) if path else text
    out.write_text(text)


def snapshot(dest: Path) -> None:
    for rel in MATRICES:
        matrix = ROOT / rel
        name = rel.replace("/", "_").removesuffix(".yaml")
        here = dest / name
        here.mkdir(parents=True)
        profiles = list((YAML(typ="safe").load(matrix.read_text()) or {}).get("profiles") or {})
        for profile in profiles:
            argv = ["plan", "--matrix", str(matrix), "--profile", profile, "--format", "json"]
            _run(here / f"plan-{profile}.txt", argv, cwd=ROOT)
        for workflow in WORKFLOWS:
            for profile in profiles:
                argv = ["ci", "matrix", "--matrix", str(matrix), "--workflow", workflow]
                argv += ["--profile", profile]
                _run(here / f"ci-matrix-{workflow}-{profile}.txt", argv, cwd=ROOT)
        with tempfile.TemporaryDirectory() as tmp:
            # a repository holding the matrix and its project (the root's: the workflows
            # in .github/ are generated from it, so the copy holds matrix.yaml and examples/)
            repo = Path(tmp) / "repo"
            source = matrix.parent
            if source == ROOT:
                repo.mkdir()
                shutil.copy(matrix, repo / matrix.name)
                shutil.copytree(ROOT / "examples", repo / "examples", ignore=IGNORE)
            else:
                shutil.copytree(source, repo, ignore=IGNORE)
            (repo / ".git").mkdir()
            argv = ["ci", "github", "--matrix", str(repo / matrix.name)]
            _run(here / "ci-github.txt", argv, cwd=repo, repo=repo)
            for path in sorted((repo / ".github").rglob("*")):
                if path.is_file():
                    flat = str(path.relative_to(repo)).replace("/", "_")
                    (here / f"generated-{flat}").write_bytes(path.read_bytes())


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python ci/behaviour-snapshot.py OUTDIR (a directory that does not exist)")
        return 2
    dest = Path(argv[0])
    if dest.exists():
        print(f"{dest}: exists; name a new directory")
        return 2
    dest.mkdir(parents=True)
    snapshot(dest / "snapshot")
    shutil.rmtree(dest / ".cache", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
