"""`buildtools plan --estimate` against the measured wall time of the same build.

For the `pr` profile of the reference matrix (restricted with --only to the cells whose
environments this machine has; the others need torch wheels it cannot fetch), with a
fresh cache directory (empty ccache, no timings; the shared environments):

1. `buildtools plan --estimate --format json`: the model's figure (no timings yet);
2. `buildtools build` of the same cells, timed (a cold build: it records timings.json);
3. the estimate again: now from the recorded timings (what a second run would get);
4. warm: the build trees and the wheels removed, the compiler cache kept (what a rebuild
   after a clean, or a CI job with a restored cache, does): the estimate (from the recorded
   timings, and from the model alone with timings.json set aside), then that build, timed.

    python bench/estimate.py --json bench/estimate.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from buildtools.cachedir import default_cache_dir
from buildtools.planning import host_python
from buildtools.wheelbuild.fingerprint import IGNORED_DIRS

ROOT = Path(__file__).resolve().parents[1]


def _cli(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "buildtools", *argv],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=5400,
    )
    if proc.returncode != 0:
        raise SystemExit(f"buildtools {' '.join(argv)} failed:\n{proc.stdout[-3000:]}{proc.stderr}")
    return proc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    cpu = f"torch2.13.0-cpu-cp{host_python().replace('.', '')}"
    parser.add_argument("--only", action="append", default=None, help="cells of `pr` to build")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    only = args.only or [cpu, "torch2.11.0-cu130-cp312"]
    env = {k: v for k, v in os.environ.items() if k != "BUILDTOOLS_CCACHE_DIR"}
    shared = default_cache_dir(env)
    scratch = Path(tempfile.mkdtemp(prefix="bench-estimate-", dir=shared))
    try:
        src = scratch / "src"
        ignore = shutil.ignore_patterns(*IGNORED_DIRS, "*.egg-info")
        shutil.copytree(ROOT / "examples" / "scatter", src, ignore=ignore)
        cache = scratch / "cache"
        cache.mkdir()
        (cache / "envs").symlink_to(shared / "envs")
        select = ["--matrix", str(ROOT / "matrix.yaml"), "--profile", "pr"]
        for cell in only:
            select += ["--only", cell]
        plan_args = ["plan", *select, "--estimate", "--format", "json", "--cache-dir", str(cache)]
        model = json.loads(_cli(*plan_args, env=env).stdout)["estimate"]
        started = time.perf_counter()
        _cli(
            "build",
            *select,
            *("--project", str(src), "--wheelhouse", str(scratch / "wh")),
            *("--cache-dir", str(cache), "--no-live"),
            env=env,
        )
        measured = time.perf_counter() - started
        recorded = json.loads(_cli(*plan_args, env=env).stdout)["estimate"]
        # warm: no build tree, no wheel; the compiler cache of the cold build
        shutil.rmtree(cache / "build", ignore_errors=True)
        shutil.rmtree(src / "build", ignore_errors=True)
        shutil.rmtree(scratch / "wh", ignore_errors=True)
        warm_recorded = json.loads(_cli(*plan_args, env=env).stdout)["estimate"]
        timings = cache / "timings.json"
        timings.rename(scratch / "timings.json")
        warm_model = json.loads(_cli(*plan_args, env=env).stdout)["estimate"]
        (scratch / "timings.json").rename(timings)
        started = time.perf_counter()
        _cli(
            "build",
            *select,
            *("--project", str(src), "--wheelhouse", str(scratch / "wh")),
            *("--cache-dir", str(cache), "--no-live"),
            env=env,
        )
        measured_warm = time.perf_counter() - started
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result: dict[str, Any] = {
        "profile": "pr",
        "cells": only,
        "measured_s": measured,
        "model_s": model["local_s"],
        "recorded_s": recorded["local_s"],
        "model_ratio": model["local_s"] / measured,
        "recorded_ratio": recorded["local_s"] / measured,
        "warm_measured_s": measured_warm,
        "warm_recorded_s": warm_recorded["local_s"],
        "warm_model_s": warm_model["local_s"],
        "warm_recorded_ratio": warm_recorded["local_s"] / measured_warm,
        "warm_model_ratio": warm_model["local_s"] / measured_warm,
        "warm_jobs": warm_recorded["jobs"],
        "model": model,
        "ci_wall_s": model["ci_wall_s"],
        "ci_runner_minutes": model["ci_runner_minutes"],
    }
    print(json.dumps({k: v for k, v in result.items() if k != "model"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
