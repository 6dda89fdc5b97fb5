#!/usr/bin/env python3
"""Run the generated workflows with act on this machine, offline: `nox -s ci-run`.

    python ci/act-run.py [--target pr|release|gates|all] [--cell ID] [--work DIR]
                         [--mirror SOURCE] [--base-image REF]

What it does (docs/ci.md, "The pipeline run locally"):
  1. snapshots this checkout (tracked and untracked, git-ignored files left out) into
     WORK/repo as a fresh git repository: that is what act checks out for every job;
  2. makes the action cache from the mirrors (ci/act-actions.py: each pinned commit
     checked) and puts the stand-ins (ci/act/standins/) where an action cannot run here;
  3. makes the runner: act's host mode (`-P ubuntu-24.04=-self-hosted`) with a tool cache
     of this machine's CPython builds (what setup-python finds on a hosted runner), its own
     HOME, and the builder base image the workflows name (the manylinux builder, which no
     registry serves here) tagged from the local base (docker/local-base.sh);
  4. runs the pull-request workflow for one CPU cell of the `pr` profile (act --matrix
     id:CELL), the release workflow for a test tag with a local stand-in for GitHub's
     REST API (ci/act/fakegithub.py), and the release-proof gates with a bad tag and a bad
     record; then prints each run's verdict, duration and the steps stood in for.

Exit 0 when every run ended as expected (a gate run is expected to fail at its gate).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "ci" / "act"
DEFAULT_MIRROR = "/work/.mirror/{owner}+{name}/repo"
DEFAULT_CELL = "torch2.13.0-cpu-cp311"
# actions whose pinned code cannot run here, and why (listed in every run's summary)
STANDINS = {
    "actions/upload-artifact": "dist/ bundle of the pinned commit absent from the mirror",
    "actions/download-artifact": "dist/ bundle of the pinned commit absent from the mirror",
    "actions/attest-build-provenance": "Sigstore signing needs GitHub's OIDC token",
    "actions/upload-pages-artifact": "GitHub Pages only",
    "actions/deploy-pages": "GitHub Pages only (OIDC token)",
    "pypa/gh-action-pypi-publish": "trusted publishing needs GitHub's OIDC token",
}
HOSTED = ("ubuntu-24.04", "ubuntu-latest")


def log(message: str) -> None:
    print(f"ci-run: {message}", flush=True)


def run(argv: Sequence[str], *, cwd: Path | None = None, timeout: float = 600.0,
        env: dict[str, str] | None = None, out: Path | None = None) -> int:
    """A child with a deadline, in its own process group, killed with its group on expiry."""
    stdout = open(out, "ab") if out else None  # noqa: SIM115
    try:
        proc = subprocess.Popen(
            list(argv), cwd=cwd, env=env, stdout=stdout, stderr=subprocess.STDOUT if out else None,
            start_new_session=True,
        )
        try:
            return proc.wait(timeout=timeout)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            log(f"{argv[0]}: killed after {timeout:.0f} s")
            return 124
    finally:
        if stdout:
            stdout.close()


def capture(argv: Sequence[str], *, cwd: Path | None = None, timeout: float = 300.0) -> str:
    done = subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if done.returncode != 0:
        raise SystemExit(f"ci-run: {' '.join(argv[:3])}…: {done.stderr.strip()[-400:]}")
    return done.stdout


def snapshot(work: Path) -> Path:
    """This checkout as act sees it on GitHub: a commit of the tracked + unignored files."""
    repo = work / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir(parents=True)
    names = capture(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT)
    for name in filter(None, names.split("\0")):
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            dest = repo / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
    ident = ["-c", "user.name=ci-run", "-c", "user.email=ci-run@localhost"]
    capture(["git", "init", "-q", "-b", "main"], cwd=repo)
    capture(["git", "add", "-A"], cwd=repo)
    capture(["git", *ident, "commit", "-q", "-m", "ci-run snapshot"], cwd=repo)
    capture(["git", "remote", "add", "origin", "https://github.com/local/torch-buildtools"], cwd=repo)
    return repo


def action_cache(work: Path, mirror: str) -> list[str]:
    """act's --local-repository arguments: the pinned actions, and the stand-ins."""
    out = work / "actions"
    done = subprocess.run(
        [sys.executable, str(ROOT / "ci" / "act-actions.py"), "--source", mirror, "--out",
         str(out), *[f"--allow-missing={name}" for name in STANDINS]],
        capture_output=True, text=True, timeout=1800, check=False,
    )
    sys.stderr.write(done.stderr)
    if done.returncode != 0:
        raise SystemExit("ci-run: the action cache could not be made (above)")
    args: list[str] = []
    exported = {}
    for line in done.stdout.splitlines():
        spec = line.split(" ", 1)[1]
        exported[spec.split("@", 1)[0]] = spec
    from buildtools.workflows.pins import load_pins

    for name, pin in load_pins().actions.items():
        if name in STANDINS:
            standin = HERE / "standins" / name.split("/", 1)[1]
            args += ["--local-repository", f"{name}@{pin.sha}={standin}"]
        elif name in exported:
            args += ["--local-repository", exported[name]]
        else:
            raise SystemExit(f"ci-run: {name}@{pin.sha}: not in the action cache")
    return args


def tool_cache(work: Path) -> Path:
    """$RUNNER_TOOL_CACHE/Python/X.Y.Z/x64: a venv over each CPython of this machine.

    setup-python looks there first (tc.find) and downloads only on a miss; a venv keeps
    the jobs' pip installs out of the machine's own interpreters.
    """
    cache = work / "toolcache"
    for minor in ("3.10", "3.11", "3.12", "3.13"):
        pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
        found = sorted(pyenv.glob(f"{minor}.*/bin/python{minor}"))
        exe = str(found[-1]) if found else shutil.which(f"python{minor}")
        if not exe:
            continue
        try:
            info = capture([exe, "-c", "import sys;print('%d.%d.%d' % sys.version_info[:3]);"
                            "print(sys.base_prefix)"]).split()
        except (SystemExit, subprocess.TimeoutExpired):
            continue
        version, prefix = info[0], info[1]
        home = cache / "Python" / version / "x64"
        if not (home / "bin" / "python").exists():
            capture([str(Path(prefix) / "bin" / f"python{minor}"), "-m", "venv", str(home)])
        home.with_name("x64.complete").touch()
    return cache


def base_image(repo: Path, cell: str, given: str | None) -> tuple[str, str]:
    """(the builder base the workflows name for `cell`, the local image standing in for it)."""
    plan = json.loads(capture([sys.executable, "-m", "buildtools", "ci", "matrix", "--profile",
                               "pr", "--workflow", "pull-request", "--entries-json",
                               "/dev/stdout"], cwd=repo).split("\n", 1)[-1] or "{}")
    raise NotImplementedError(plan)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=["pr", "release", "gates", "all"], default="all")
    parser.add_argument("--cell", default=DEFAULT_CELL, help="the pr profile's CPU cell to run")
    parser.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "bt-ci-run")
    parser.add_argument("--mirror", default=os.environ.get("BT_ACT_MIRROR", DEFAULT_MIRROR))
    parser.add_argument("--base-image", help="local image standing in for the manylinux builder")
    args = parser.parse_args(argv)
    raise NotImplementedError(args)


if __name__ == "__main__":
    sys.exit(main())
