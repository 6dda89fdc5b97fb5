"""Work not done twice: a no-op rebuild, a rebuild after one edit, a second environment.

Every build is `python -m buildtools build` in a child process, as a user runs it, on a
copy of the example's source, with a fresh cache directory (build trees, compiler cache)
whose toolchain environments are the shared ones (creating those is measured apart):

- cold:      the first build (empty build tree, empty ccache);
- no-op:     the same command again, nothing changed (skipped-unchanged);
- touch:     one source file edited, then the same command: a code change to scatter.cpp
             (ninja recompiles it; ccache misses), and a comment-only change (ninja
             recompiles; ccache's preprocessed hash hits);
- the same on the CUDA cell (torch 2.11 cu130, scatter.cpp + scatter_cuda.cu for six
  archs) when its environment is already cached (it is ~5 GB: never created here);
- environments: the second environment for the same torch vs the first, created through
  uv with an empty, then a warm package cache (and, for reference, with pip).

    python bench/incremental.py --json bench/incremental.json
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
from buildtools.wheelbuild.fingerprint import IGNORED_DIRS

ROOT = Path(__file__).resolve().parents[1]
CUDA_CELL = "torch2.11.0-cu130-cp312"


def _job(only: str) -> BuildJob:
    kb = load_knowledge()
    mf = load_matrix(ROOT / "matrix.yaml", knowledge=kb)
    # every cell (the reference matrix's "release" profile), so that --only finds any of them
    profile = "release" if "release" in mf.matrix.profiles else None
    return plan(
        mf, kb, host_python=host_python(), selection=Selection(profile=profile, only=[only])
    ).jobs[0]


def _build(src: Path, cache: Path, wheelhouse: Path, only: str, env: dict[str, str]) -> float:
    argv = [sys.executable, "-m", "buildtools", "build", "--matrix", str(ROOT / "matrix.yaml")]
    argv += ["--profile", "release", "--only", only]  # every cell of the reference matrix
    argv += ["--project", str(src), "--wheelhouse", str(wheelhouse)]
    argv += ["--cache-dir", str(cache), "--no-live"]
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=5400)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"build failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr}")
    return took


def _status(wheelhouse: Path) -> str:
    report = json.loads((wheelhouse / "report.json").read_text())
    return ",".join(sorted({c["status"] for c in report["cells"]}))


def incremental(only: str, *, runs: int, shared_envs: Path, env: dict[str, str]) -> dict[str, Any]:
    """cold / no-op / touch timings of one cell, `runs` times each (medians)."""
    times: dict[str, list[float]] = {"cold": [], "noop": [], "touch_code": [], "touch_comment": []}
    statuses: dict[str, str] = {}
    for i in range(runs):
        scratch = Path(tempfile.mkdtemp(prefix="bench-incr-", dir=shared_envs.parent))
        try:
            src = scratch / "src"
            shutil.copytree(
                ROOT / "examples" / "scatter",
                src,
                ignore=shutil.ignore_patterns(*IGNORED_DIRS, "*.egg-info"),
            )
            cache = scratch / "cache"
            cache.mkdir()
            (cache / "envs").symlink_to(shared_envs)
            wheelhouse = scratch / "wheelhouse"
            times["cold"].append(_build(src, cache, wheelhouse, only, env))
            statuses["cold"] = _status(wheelhouse)
            times["noop"].append(_build(src, cache, wheelhouse, only, env))
            statuses["noop"] = _status(wheelhouse)
            cpp = src / "csrc" / "scatter.cpp"
            cpp.write_text(
                cpp.read_text() + f"\nnamespace {{ [[maybe_unused]] int bench_edit_{i}() "
                f"{{ return {i}; }} }}\n"
            )
            times["touch_code"].append(_build(src, cache, wheelhouse, only, env))
            statuses["touch_code"] = _status(wheelhouse)
            cpp.write_text(cpp.read_text() + f"\n// bench: a comment-only edit {i}\n")
            times["touch_comment"].append(_build(src, cache, wheelhouse, only, env))
            statuses["touch_comment"] = _status(wheelhouse)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        print(f"  {only} run {i + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items()))
    medians = {k: statistics.median(v) for k, v in times.items()}
    return {
        "cell": only,
        "runs": runs,
        "times_s": times,
        "median_s": medians,
        "status": statuses,
        "noop_ratio": medians["noop"] / medians["cold"],
        "touch_code_ratio": medians["touch_code"] / medians["cold"],
        "touch_comment_ratio": medians["touch_comment"] / medians["cold"],
    }


def _env_time(job: BuildJob, cache: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    with (cache.parent / f"{cache.name}.log").open("w") as log:
        prepare_toolchain(
            job,
            job.build_python,
            cache_dir=cache,
            ctx=RunContext(processes=SubprocessRunner(), env=env, log=log),
        )
    return time.perf_counter() - started


def environments(only: str, *, shared_envs: Path, env: dict[str, str]) -> dict[str, Any]:
    """First env (empty package cache) vs second env (same torch, warm cache); pip first."""
    job = _job(only)
    scratch = Path(tempfile.mkdtemp(prefix="bench-envs-", dir=shared_envs.parent))
    try:
        uv_env = {**env, "UV_CACHE_DIR": str(scratch / "uv-cache")}
        first = _env_time(job, scratch / "first", uv_env)
        second = _env_time(job, scratch / "second", uv_env)
        pip_first = _env_time(job, scratch / "pip", {**env, "BUILDTOOLS_INSTALLER": "pip"})
        installer = "uv" if "uv venv" in (scratch / "first.log").read_text() else "pip"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(
        f"  envs: first {first:.1f} s, second {second:.1f} s ({installer}); pip {pip_first:.1f} s"
    )
    return {
        "cell": only,
        "installer": installer,
        "first_s": first,
        "second_s": second,
        "pip_first_s": pip_first,
        "ratio": second / first,
        "ratio_vs_pip": second / pip_first,
    }


def environments_cuda(*, shared_envs: Path, env: dict[str, str]) -> dict[str, Any]:
    """The same for the CUDA cell (torch 2.11 cu130 + the CUDA 13.0 compiler wheels, ~5 GB
    installed) from the docker backend's prefetched wheels, offline; skipped without them."""
    wheels = shared_envs.parent / "prefetch"
    if not any(wheels.glob("torch-2.11.0-cp312-*.whl")):
        return {"skipped": f"no torch 2.11.0 cp312 wheels prefetched in {wheels}"}
    job = _job(CUDA_CELL)
    scratch = Path(tempfile.mkdtemp(prefix="bench-envs-cuda-", dir=shared_envs.parent))
    offline = {**env, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}
    offline["UV_CACHE_DIR"] = str(scratch / "uv-cache")
    try:
        first = _env_time(job, scratch / "first", offline)
        second = _env_time(job, scratch / "second", offline)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"  envs ({CUDA_CELL}): first {first:.1f} s, second {second:.1f} s")
    return {"cell": CUDA_CELL, "first_s": first, "second_s": second, "ratio": second / first}


def _cuda_env_cached(shared_envs: Path, env: dict[str, str]) -> bool:
    try:
        job = _job(CUDA_CELL)
        ident = toolchain_identity(
            job,
            job.build_python,
            ctx=RunContext(processes=SubprocessRunner(), env=env, log=io.StringIO()),
        )
    except Exception:
        return False
    found = list((shared_envs / "toolchains").glob(f"*-{ident.key[:12]}"))
    return any((p / toolchain_module.MARKER).is_file() for p in found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", default=f"torch2.13.0-cpu-cp{host_python().replace('.', '')}")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--cuda", choices=("auto", "yes", "no"), default="auto")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k != "BUILDTOOLS_CCACHE_DIR"}
    shared_envs = default_cache_dir(env) / "envs"
    shared_envs.mkdir(parents=True, exist_ok=True)
    # the toolchain exists before timing (its creation is the environments row)
    _job_env = _job(args.only)
    with io.StringIO() as log:
        prepare_toolchain(
            _job_env,
            _job_env.build_python,
            cache_dir=shared_envs,
            ctx=RunContext(processes=SubprocessRunner(), env=env, log=log),
        )
    results: dict[str, Any] = {
        "cpu": incremental(args.only, runs=args.runs, shared_envs=shared_envs, env=env)
    }
    if args.cuda == "yes" or (args.cuda == "auto" and _cuda_env_cached(shared_envs, env)):
        results["cuda"] = incremental(CUDA_CELL, runs=1, shared_envs=shared_envs, env=env)
    else:
        results["cuda"] = {
            "skipped": f"no cached environment for {CUDA_CELL} (--cuda yes makes one)"
        }
    results["environments"] = environments(args.only, shared_envs=shared_envs, env=env)
    if args.cuda == "no":
        results["environments_cuda"] = {"skipped": "--cuda no"}
    else:
        results["environments_cuda"] = environments_cuda(shared_envs=shared_envs, env=env)
    print(json.dumps({k: v.get("median_s", v) for k, v in results.items()}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
