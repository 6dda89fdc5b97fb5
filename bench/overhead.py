"""Our full build of one cell vs a plain `python -m build` of the same source, same env.

Both are cold builds (no object files reused), run interleaved in one process, N times each;
the table gives medians and the ratio. With buildtools installed (`pip install -e .`):

    python bench/overhead.py                       # the reference matrix's default cell
    python bench/overhead.py --runs 5 --only 'torch2.13.0-cpu-*' --json bench/overhead.json

"ours" is everything `buildtools build` does for the cell: toolchain (reused, as on any
second run), PEP 517 build, best-tag probe, selective repair, relabel, static checks.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from buildtools.backends.registry import BackendOptions, BackendSetting, make_backend
from buildtools.cachedir import default_cache_dir
from buildtools.context import RunContext
from buildtools.knowledge import load_knowledge
from buildtools.matrix.config import load_matrix
from buildtools.planner import Selection, plan
from buildtools.planning import host_python
from buildtools.process import SubprocessRunner
from buildtools.toolchain.prepare import prepare_toolchain
from buildtools.wheelbuild.build_report import Status
from buildtools.wheelbuild.environment import job_environment
from buildtools.wheelbuild.fingerprint import IGNORED_DIRS
from buildtools.wheelbuild.options import BuildOptions, BuildSession
from buildtools.wheelbuild.orchestrate import build_job

ROOT = Path(__file__).resolve().parents[1]


def _copy_source(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(*IGNORED_DIRS, "*.egg-info"))
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", type=Path, default=ROOT / "matrix.yaml")
    parser.add_argument("--profile", default=None)
    parser.add_argument("--only", default=None, help="cell id glob (default: the first cell)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)

    kb = load_knowledge()
    mf = load_matrix(args.matrix, knowledge=kb)
    result = plan(
        mf,
        kb,
        host_python=host_python(),
        selection=Selection(profile=args.profile, only=[args.only] if args.only else []),
    )
    job = result.jobs[0]
    env = dict(os.environ)
    cache = default_cache_dir(env)
    runner = SubprocessRunner()
    scratch = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    log = (scratch / "bench.log").open("w")
    toolchain = prepare_toolchain(
        job,
        job.build_python,
        cache_dir=cache / "envs",
        ctx=RunContext(processes=runner, env=env, log=log),
    )
    print(
        f"cell {job.id}: torch {toolchain.torch.version}, Python {toolchain.python_version}, {args.runs} runs each"
    )

    plain_times: list[float] = []
    ours_times: list[float] = []
    plain_size = ours_size = 0
    for i in range(args.runs):
        # plain: a fresh copy of the source, the same interpreter and build environment
        src = _copy_source(mf.project_dir, scratch / f"plain-src-{i}")
        out = scratch / f"plain-out-{i}"
        build_env = job_environment(
            job, toolchain, BuildOptions(project_dir=src, wheelhouse=out, cache_dir=cache, env=env)
        )
        started = time.perf_counter()
        proc = runner.run(
            [
                str(toolchain.python),
                "-m",
                "build",
                "--wheel",
                "--no-isolation",
                "--outdir",
                str(out),
                str(src),
            ],
            cwd=src,
            env=build_env,
            log=log,
        )
        plain_times.append(time.perf_counter() - started)
        if not proc.ok:
            print(f"plain build failed; see {log.name}", file=sys.stderr)
            return 1
        plain_size = next(out.glob("*.whl")).stat().st_size

        # ours: the whole cell, cold (a fresh build tree and wheelhouse)
        src = _copy_source(mf.project_dir, scratch / f"ours-src-{i}")
        opts = BuildOptions(
            project_dir=src,
            wheelhouse=scratch / f"ours-wh-{i}",
            cache_dir=scratch / f"ours-cache-{i}",
            env=env,
            live=False,
        )
        (opts.cache_dir / "staging").mkdir(parents=True)
        # reuse the toolchain: point the fresh cache's envs at the shared one
        (opts.cache_dir / "envs").symlink_to(cache / "envs")
        local = make_backend(
            "local", BackendSetting(kb=kb, cache_dir=opts.cache_dir, env=env), BackendOptions()
        )
        started = time.perf_counter()
        session = BuildSession(kb=kb, opts=opts, backend=local, runner=runner)
        cells = build_job(job, session, stage=lambda *_: None)
        ours_times.append(time.perf_counter() - started)
        if cells[0].status is not Status.BUILT:
            print(f"our build failed: {cells[0].reason} (log {cells[0].log})", file=sys.stderr)
            return 1
        ours_size = cells[0].size or 0
        print(f"  run {i + 1}: plain {plain_times[-1]:.1f} s, ours {ours_times[-1]:.1f} s")

    plain = statistics.median(plain_times)
    ours = statistics.median(ours_times)
    out_text = io.StringIO()
    out_text.write(f"{'variant':<28}{'median s':>10}{'wheel MB':>10}{'ratio':>8}\n")
    out_text.write(
        f"{'plain python -m build':<28}{plain:>10.2f}{plain_size / 1e6:>10.2f}{1.0:>8.2f}\n"
    )
    out_text.write(
        f"{'buildtools build (cell)':<28}{ours:>10.2f}{ours_size / 1e6:>10.2f}{ours / plain:>8.2f}\n"
    )
    print(out_text.getvalue(), end="")
    print("target: ours <= 1.10 x plain")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "cell": job.id,
                    "runs": args.runs,
                    "plain_s": plain_times,
                    "ours_s": ours_times,
                    "plain_median_s": plain,
                    "ours_median_s": ours,
                    "ratio": ours / plain,
                },
                indent=2,
            )
            + "\n"
        )
    log.close()
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
