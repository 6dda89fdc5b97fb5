"""The docker backend as CI runs it: first build, no-op rebuild, rebuilds after one edit.

Every build is `python -m buildtools build --backend docker --offline` in a child process,
in a builder image made FROM a local base (docker/local-base.sh: no registry is assumed),
on a copy of the example's source, with a fresh cache directory whose compiler cache is
empty; the prefetched wheels, the shared environments and the builder image are reused
(making them is a one-time cost, reported apart when it happens):

- cold:    the first build (empty ccache, mounted into the container);
- no-op:   the same command again (the job's fingerprint is on the wheel: skipped);
- edit:    one source file changed, the same command: a code edit of the cell's device
           file (`scatter_cuda.cu`) for a CUDA cell, of `scatter.cpp` for the CPU cell;
           the container compiles everything again, ccache hits what did not change;
- comment: a comment-only edit of `scatter.cpp` (ccache's preprocessed hash hits; CPU cells).

    python bench/containers.py --cell torch2.13.0-cpu-cp311 --json bench/containers.json

Another extension (the issue's many-`.cu` case): `--project DIR --edit FILE` (FILE relative
to DIR, the file the edit step changes), with `--abi`, `--arch-list` and `--build-env K=V` as
its matrix needs them; the image and the prefetch are made once with the example's build of
the same cell, so the other project's cold build is a build, not an image build:

    python bench/containers.py --cell torch2.11.0-cu130-cp312 --steps noop,edit \
        --project xformers-0.0.33.post2 --edit xformers/csrc/attention/cuda/matmul.cu \
        --abi abi3 --arch-list 9.0 --build-env XFORMERS_DISABLE_FLASH_ATTN=1 --prefetch numpy

`--corpus xformers` instead of `--project DIR`: the corpus extension's pinned sdist
(bench/corpus.py), unpacked; `nox -s bench` measures it so (its `containers_corpus` row).

Needs a running Docker engine, root and debootstrap (for the local base); without them the
benchmark says why and stops.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from buildtools.backends.docker.cibw import prefetch_platforms
from buildtools.cachedir import default_cache_dir
from buildtools.planning import host_python
from buildtools.wheelbuild.fingerprint import IGNORED_DIRS

ROOT = Path(__file__).resolve().parents[1]
SHARED = ("envs", "prefetch", "docker")  # reused between runs: downloads and images
STEPS = ("cold", "noop", "edit", "comment")


def docker_unavailable() -> str | None:
    """Why the container benchmarks cannot run here (also bench/aarch64.py's), or None."""
    if shutil.which("docker") is None:
        return "docker is not installed"
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, check=False, timeout=60)
    except subprocess.TimeoutExpired:
        return "the Docker engine did not answer within 60 s"
    if info.returncode != 0:
        return "no Docker engine answers (see .ci/run for how CI starts one)"
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        return "the local base image needs root and debootstrap"
    return None


SIX_ARCHS = "7.5;8.0;8.6;9.0;10.0;12.0+PTX"


@dataclass(frozen=True, kw_only=True)
class Project:
    """What is built: the example by default, or another extension's source tree."""

    path: Path = ROOT / "examples" / "scatter"
    edit: str | None = None  # the file the edit step changes (default: the example's)
    abi: str = "per-python"
    arch_list: str = SIX_ARCHS
    build_env: tuple[tuple[str, str], ...] = ()
    # what the wheel needs at its import test besides torch (an offline build's container
    # finds only the prefetch: torch, the toolkit and the build tools)
    prefetch: tuple[str, ...] = ()

    @property
    def is_example(self) -> bool:
        return self.path == ROOT / "examples" / "scatter"

    def edited(self, device: bool) -> str:
        if self.edit is not None:
            return self.edit
        return "csrc/scatter_cuda.cu" if device else "csrc/scatter.cpp"


def _matrix(path: Path, project: Path, cell: str, base: str, spec: Project = Project()) -> None:
    torch, accelerator, tag = cell.removeprefix("torch").split("-")[:3]
    python = f"{tag[2]}.{tag[3:]}"
    extra = f'    arch_list: "{spec.arch_list}"\n' if accelerator == "cu130" else ""
    env = ", ".join(f"{k}: {json.dumps(v)}" for k, v in spec.build_env)
    build_env = f", build_env: {{{env}}}" if env else ""
    path.write_text(
        f"project: {{path: {project}, abi: {spec.abi}{build_env}}}\n"
        f'axes:\n  torch: ["{torch}"]\n  accelerator: [{accelerator}]\n'
        f'  python: ["{python}"]\n'
        "accelerators:\n"
        f"  {accelerator}:\n"
        f"    torch_index: https://download.pytorch.org/whl/{accelerator}\n"
        f"    image: {base}\n" + extra
    )


def _prefetch_extra(spec: Project, cell: str, dest: Path) -> None:
    """`spec.prefetch` for the cell's Python into the shared prefetch directory (untimed)."""
    if not spec.prefetch:
        return
    tag = cell.split("-")[2]
    argv = [sys.executable, "-m", "pip", "download", "--dest", str(dest), "--only-binary=:all:"]
    argv += ["--python-version", f"{tag[2]}.{tag[3:]}", "--implementation", "cp", "--abi", tag]
    for plat in prefetch_platforms("manylinux_2_28_x86_64"):
        argv += ["--platform", plat]
    subprocess.run([*argv, *spec.prefetch], check=True, timeout=1800)


def _build(matrix: Path, wheelhouse: Path, env: dict[str, str]) -> tuple[float, str]:
    argv = [sys.executable, "-m", "buildtools", "build", "--matrix", str(matrix)]
    argv += ["--backend", "docker", "--offline", "--wheelhouse", str(wheelhouse), "--no-live"]
    started = time.perf_counter()
    proc = subprocess.run(
        argv, env=env, cwd=ROOT, capture_output=True, text=True, check=False, timeout=5400
    )
    took = time.perf_counter() - started
    if proc.returncode != 0:
        # the reason is buildtools' own error line (stderr), then the job logs' tails
        logs = "".join(p.read_text()[-3000:] for p in (wheelhouse / "logs").glob("*.log"))
        raise SystemExit(
            f"build failed (exit {proc.returncode}): {' '.join(argv)}\n"
            f"{proc.stderr.strip()[-3000:]}\n{logs}"
        )
    report = json.loads((wheelhouse / "report.json").read_text())
    return took, ",".join(sorted({c["status"] for c in report["cells"]}))


def _edit(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def run(
    cell: str, runs: int, steps: tuple[str, ...] = STEPS, spec: Project = Project()
) -> dict[str, Any]:
    python = f"{cell.split('-')[2][2]}.{cell.split('-')[2][3:]}"
    base = subprocess.run(
        ["bash", str(ROOT / "docker" / "local-base.sh"), "--python", python],
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
    ).stdout.split()[-1]
    shared = default_cache_dir(os.environ)
    device = "cpu" not in cell.split("-")[1]
    # the cold build always runs first (a "cold" in `steps` ran it twice: the second, skipped
    # as unchanged, went into the cold median); the comment-only edit is of scatter.cpp, the
    # CPU cell's file
    steps = tuple(
        s for s in steps if s != "cold" and not (device and s == "comment" and spec.is_example)
    )
    times: dict[str, list[float]] = {step: [] for step in ("cold", *steps)}
    status: dict[str, str] = {}
    ccache: dict[str, str] = {}
    for i in range(runs):
        scratch = Path(tempfile.mkdtemp(prefix="bench-containers-", dir=shared))
        try:
            src = scratch / "src"
            ignore = shutil.ignore_patterns(*IGNORED_DIRS, "*.egg-info")
            shutil.copytree(spec.path, src, ignore=ignore)
            cache = scratch / "cache"
            cache.mkdir()
            for name in SHARED:
                (shared / name).mkdir(parents=True, exist_ok=True)
                (cache / name).symlink_to(shared / name)
            env = {**os.environ, "BUILDTOOLS_CACHE_DIR": str(cache)}
            env.pop("BUILDTOOLS_CCACHE_DIR", None)
            matrix = scratch / "matrix.yaml"
            _matrix(matrix, src, cell, base, spec)
            wheelhouse = scratch / "wheelhouse"
            if i == 0:  # the builder image and the prefetch, once: not part of a build
                started = time.perf_counter()
                _prefetch_extra(spec, cell, shared / "prefetch")
                warm = matrix
                if not spec.is_example:  # the example's build of the cell makes them
                    warm = scratch / "warm.yaml"
                    example = scratch / "example"
                    shutil.copytree(Project().path, example, ignore=ignore)
                    _matrix(warm, example, cell, base)
                _build(warm, scratch / "warm", env)
                times["setup"] = [time.perf_counter() - started]
                shutil.rmtree(cache / "ccache", ignore_errors=True)
                shutil.rmtree(cache / "build", ignore_errors=True)
            for step in ("cold", *steps):
                edited = src / spec.edited(device)
                if step == "edit":
                    _edit(
                        edited,
                        f"\nnamespace {{ [[maybe_unused]] int bench_edit_{i}() {{ return {i}; }} }}\n",
                    )
                elif step == "comment":
                    _edit(edited, f"\n// bench: a comment-only edit {i}\n")
                took, status[step] = _build(matrix, wheelhouse, env)
                times[step].append(took)
                # the job's own directory (an abi3 job's id is not the cell's)
                jobs = sorted((cache / "ccache").glob(f"{cell}*"))
                stats = subprocess.run(
                    ["ccache", "--print-stats"],
                    env={**env, "CCACHE_DIR": str(jobs[0] if jobs else cache / "ccache" / cell)},
                    capture_output=True,
                    text=True,
                    check=False,
                    timeout=60,
                ).stdout
                hits = [
                    ln
                    for ln in stats.splitlines()
                    if ln.startswith(("direct_cache_hit", "preprocessed_cache_hit", "cache_miss"))
                ]
                ccache[step] = " ".join(hits)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        print(f"  {cell} run {i + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items()))
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "cell": cell,
        "project": spec.path.name if not spec.is_example else "examples/scatter",
        "edited": spec.edited(device),
        "arch_list": spec.arch_list if device else None,
        "base": base,
        "runs": runs,
        "times_s": times,
        "median_s": med,
        "status": status,
        "ccache": ccache,
        **{f"{step}_ratio": med[step] / med["cold"] for step in steps if step != "cold"},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cell", action="append", default=None, help="cell id (repeatable)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--steps",
        default=",".join(STEPS),
        help="which builds after the cold one (a CUDA cell's build is long): "
        "comma-separated of noop, edit, comment (default: all)",
    )
    parser.add_argument("--project", type=Path, default=None, help="an extension's source tree")
    parser.add_argument(
        "--corpus",
        default=None,
        metavar="NAME",
        help="a corpus extension's pinned sdist (tests/realworld/corpus.py), unpacked, as --project",
    )
    parser.add_argument("--edit", default=None, help="the file (in --project) the edit changes")
    parser.add_argument("--abi", default="per-python", choices=("per-python", "abi3", "stable"))
    parser.add_argument("--arch-list", default=SIX_ARCHS, help="the CUDA cell's arch list")
    parser.add_argument("--build-env", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--prefetch",
        action="append",
        default=[],
        metavar="REQ",
        help="a requirement the wheel's import test needs besides torch (offline builds see "
        "only the prefetch), downloaded into it once",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    steps = tuple(s for s in args.steps.split(",") if s)
    if not set(steps) <= set(STEPS):
        parser.error(f"--steps: one of {', '.join(STEPS)}")
    if args.project is not None and args.corpus is not None:
        parser.error("--project or --corpus, not both")
    if (args.project or args.corpus) is not None and args.edit is None:
        parser.error("--project and --corpus need --edit (the file the edit step changes)")
    if args.corpus is not None:
        from corpus import extension, unpacked  # bench/corpus.py, beside this script

        unpack = Path(tempfile.mkdtemp(prefix="bench-corpus-"))
        atexit.register(shutil.rmtree, unpack, ignore_errors=True)
        args.project = unpacked(extension(args.corpus), unpack)
    if any("=" not in kv for kv in args.build_env):
        parser.error("--build-env: KEY=VALUE")
    spec = Project(
        path=args.project.resolve() if args.project else Project().path,
        edit=args.edit,
        abi=args.abi,
        arch_list=args.arch_list,
        build_env=tuple(tuple(kv.split("=", 1)) for kv in args.build_env),
        prefetch=tuple(args.prefetch),
    )
    if args.edit is not None and not (spec.path / args.edit).is_file():
        parser.error(f"--edit: {spec.path / args.edit} is not a file")
    cells = args.cell or [f"torch2.13.0-cpu-cp{host_python().replace('.', '')}"]
    reason = docker_unavailable()
    result: dict[str, Any] = (
        {"skipped": reason}
        if reason
        else {"cells": [run(c, args.runs, steps, spec) for c in cells]}
    )
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
