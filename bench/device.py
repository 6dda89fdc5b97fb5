"""The CUDA cell, cold: `buildtools build` vs plain `python -m build` with torch's defaults.

Both compile the example (scatter.cpp + scatter_cuda.cu for six archs, seven device
targets) in the same torch 2.11.0+cu130 environment with the CUDA 13.0 compiler, from a
fresh copy of the source into a fresh build tree:

- plain: `python -m build --wheel --no-isolation` with the cell's own variables
  (TORCH_CUDA_ARCH_LIST, FORCE_CUDA) and nothing else: no MAX_JOBS (ninja's default
  parallelism), no nvcc threads, no compiler cache — what torch's build does by default;
- ours:  `python -m buildtools build --only <cell>` in a child process, as a user runs it,
  with a fresh cache directory (empty ccache; the shared environments): the scheduler's
  MAX_JOBS and `nvcc --threads`, then repair, relabel and checks.

The environment (~5 GB) must exist already (`python -m buildtools build --profile release
--only torch2.11.0-cu130-cp312` makes it); without it the benchmark says so and stops.

    python bench/device.py --json bench/device.json
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from buildtools.cachedir import default_cache_dir
from buildtools.context import RunContext
from buildtools.knowledge import load_knowledge
from buildtools.matrix.config import load_matrix
from buildtools.model import BuildJob
from buildtools.planner import Selection, plan
from buildtools.planning import host_python
from buildtools.process import SubprocessRunner
from buildtools.toolchain import envs as toolchain_module
from buildtools.toolchain.prepare import prepare_toolchain, toolchain_identity
from buildtools.wheelbuild.environment import job_environment
from buildtools.wheelbuild.fingerprint import IGNORED_DIRS
from buildtools.wheelbuild.options import BuildOptions

ROOT = Path(__file__).resolve().parents[1]
CELL = "torch2.11.0-cu130-cp312"


def cached_cuda_job(env: dict[str, str]) -> tuple[BuildJob, bool]:
    """The job of the reference matrix's CUDA cell (CELL), and whether its environment is in
    the cache already (also bench/distributed.py's)."""
    kb = load_knowledge()
    mf = load_matrix(ROOT / "matrix.yaml", knowledge=kb)
    (job,) = plan(
        mf, kb, host_python=host_python(), selection=Selection(profile="release", only=[CELL])
    ).jobs
    ctx = RunContext(processes=SubprocessRunner(), env=env, log=io.StringIO())
    ident = toolchain_identity(job, job.build_python, ctx=ctx)
    found = (default_cache_dir(env) / "envs" / "toolchains").glob(f"*-{ident.key[:12]}")
    return job, any((p / toolchain_module.MARKER).is_file() for p in found)


def _copy(dest: Path) -> Path:
    ignore = shutil.ignore_patterns(*IGNORED_DIRS, "*.egg-info")
    shutil.copytree(ROOT / "examples" / "scatter", dest, ignore=ignore)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k != "BUILDTOOLS_CCACHE_DIR"}
    cache = default_cache_dir(env)
    job, cached = cached_cuda_job(env)
    runner = SubprocessRunner()
    if not cached:
        skipped = {"skipped": f"no cached environment for {CELL} (see the docstring)"}
        print(skipped["skipped"])
        if args.json:
            args.json.write_text(json.dumps(skipped) + "\n")
        return 0
    scratch = Path(tempfile.mkdtemp(prefix="bench-device-", dir=cache))
    times: dict[str, list[float]] = {"plain": [], "ours": []}
    notes: list[str] = []
    try:
        with (scratch / "bench.log").open("w") as log:
            toolchain = prepare_toolchain(
                job,
                job.build_python,
                cache_dir=cache / "envs",
                ctx=RunContext(processes=runner, env=env, log=log),
            )
            for i in range(args.runs):
                src = _copy(scratch / f"plain-src-{i}")
                opts = BuildOptions(
                    project_dir=src, wheelhouse=scratch / "x", cache_dir=cache, env=env
                )
                plain_env = job_environment(job, toolchain, opts)  # no compiler cache
                plain_env.pop("MAX_JOBS", None)  # torch's default: ninja's own parallelism
                if "MAX_JOBS" in env:
                    plain_env["MAX_JOBS"] = env["MAX_JOBS"]
                argv = [str(toolchain.python), "-m", "build", "--wheel", "--no-isolation"]
                argv += ["--outdir", str(scratch / f"plain-out-{i}"), str(src)]
                started = time.perf_counter()
                proc = runner.run(argv, cwd=src, env=plain_env, log=log)
                times["plain"].append(time.perf_counter() - started)
                if not proc.ok:
                    print(f"plain build failed; see {scratch / 'bench.log'}", file=sys.stderr)
                    return 1

                src = _copy(scratch / f"ours-src-{i}")
                ours_cache = scratch / f"ours-cache-{i}"
                ours_cache.mkdir()
                (ours_cache / "envs").symlink_to(cache / "envs")
                wheelhouse = scratch / f"ours-wh-{i}"
                argv = [sys.executable, "-m", "buildtools", "build"]
                argv += ["--matrix", str(ROOT / "matrix.yaml"), "--profile", "release"]
                argv += ["--only", CELL, "--project", str(src), "--wheelhouse", str(wheelhouse)]
                argv += ["--cache-dir", str(ours_cache), "--no-live"]
                started = time.perf_counter()
                run = subprocess.run(
                    argv, env=env, capture_output=True, text=True, check=False, timeout=5400
                )
                times["ours"].append(time.perf_counter() - started)
                if run.returncode != 0:
                    print(run.stdout[-3000:] + run.stderr, file=sys.stderr)
                    return 1
                notes = json.loads((wheelhouse / "report.json").read_text()).get("notes", [])
                print(
                    f"  run {i + 1}: plain {times['plain'][-1]:.1f} s, ours {times['ours'][-1]:.1f} s"
                )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    plain, ours = statistics.median(times["plain"]), statistics.median(times["ours"])
    result: dict[str, Any] = {
        "cell": CELL,
        "runs": args.runs,
        "times_s": times,
        "plain_median_s": plain,
        "ours_median_s": ours,
        "ratio": ours / plain,
        "notes": notes,
    }
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
