"""Selective repair (excludes derived from the target torch) vs plain `auditwheel repair`.

Both run side by side in one process, on the same raw wheel, N times each (median).
With buildtools importable (`pip install -e .`, or `PYTHONPATH=.` from the repo root):

    python bench/repair.py                     # examples/scatter against torch 2.13.0 (CPU)
    python bench/repair.py --runs 5 --json bench/results.json
    python bench/repair.py --wheel dist/x.whl --torch-env /path/to/venv

The torch venv is the one the integration tests cache
(${BUILDTOOLS_CACHE_DIR:-~/.cache/torch-buildtools}/test-envs/torch-<v>-py<X.Y>);
it is created when missing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from buildtools.context import RunContext
from buildtools.errors import BuildFailedError, BuildtoolsError, ToolchainError
from buildtools.process import SubprocessRunner
from buildtools.wheel.repair import (
    Grafting,
    best_platform_tag,
    derive_excludes,
    plan_repair,
    run_repair,
    scan_torch_libs,
)

ROOT = Path(__file__).resolve().parents[1]
NEVER_BUNDLE = ("libcuda.so.1", "libnvidia-ml.so.1")
_BUILD_DEPS = ("setuptools", "wheel", "ninja", "build")


@dataclass(frozen=True)
class Result:
    variant: str
    wheel: str
    size: int
    grafted: int
    times: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def _cache_dir() -> Path:
    env = os.environ.get("BUILDTOOLS_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "torch-buildtools"


def _torch_env(torch: str, python: str, runner: SubprocessRunner) -> Path:
    root = _cache_dir() / "test-envs" / f"torch-{torch}-py{python.removeprefix('python')}"
    if (root / ".buildtools-ready").is_file():
        return root
    interpreter = shutil.which(python)
    if interpreter is None:
        raise ToolchainError(f"{python}: not found on PATH")
    for argv in (
        [interpreter, "-m", "venv", "--clear", str(root)],
        [str(root / "bin" / "python"), "-m", "pip", "install", f"torch=={torch}", *_BUILD_DEPS],
    ):
        result = runner.run(argv, capture=True)
        if not result.ok:
            raise ToolchainError(f"{' '.join(argv)} failed:\n{result.output[-2000:]}")
    (root / ".buildtools-ready").write_text(f"torch=={torch}\n")
    return root


def _site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3.*/site-packages"))
    if not found:
        raise ToolchainError(f"{venv}: no lib/python3.*/site-packages")
    return found[0]


def _build(project: Path, venv: Path, out: Path, runner: SubprocessRunner) -> Path:
    env = dict(os.environ)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["FORCE_ONLY_CPU"] = "1"  # the bench is about repair, not about device code
    env.setdefault("MAX_JOBS", str(os.cpu_count() or 2))
    with tempfile.TemporaryDirectory(prefix="bench-src-") as tmp:
        src = Path(tmp) / project.name
        shutil.copytree(project, src, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info"))
        argv = [str(venv / "bin" / "python"), "-m", "build", "--wheel", "--no-isolation"]
        result = runner.run([*argv, "--outdir", str(out), str(src)], env=env, capture=True)
    if not result.ok:
        raise BuildFailedError(f"building {project} failed:\n{result.output[-3000:]}")
    wheels = sorted(out.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildFailedError(f"building {project} produced {wheels}")
    return wheels[0]


def _grafted(wheel: Path) -> int:
    with zipfile.ZipFile(wheel) as zf:
        return sum(1 for n in zf.namelist() if ".libs/" in n and ".so" in n)


def _bench(
    raw: Path, site: Path, plat: str, runs: int, runner: SubprocessRunner, log: Path
) -> list[Result]:
    lib_dirs = scan_torch_libs(site).library_dirs
    timings: dict[str, list[float]] = {"derived": [], "plain": []}
    outputs: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="bench-repair-") as tmp, log.open("w") as log_fh:
        for i in range(runs):
            for variant in ("derived", "plain"):  # interleaved: same machine state for both
                dest = Path(tmp) / f"{variant}-{i}"
                started = time.perf_counter()
                # deriving the excludes is part of what our repair costs
                excludes = derive_excludes(site, NEVER_BUNDLE) if variant == "derived" else ()
                plan = plan_repair(
                    raw,
                    dest_dir=dest,
                    plat=plat,
                    grafting=Grafting(excludes=excludes, library_dirs=lib_dirs),
                )
                out = run_repair(plan, runner=runner, log=log_fh)
                timings[variant].append(time.perf_counter() - started)
                keep = Path(tmp) / f"{variant}.whl"
                shutil.move(out, keep)
                shutil.rmtree(dest)
                outputs[variant] = keep
        return [
            Result(
                variant=label,
                wheel=raw.name,
                size=outputs[key].stat().st_size,
                grafted=_grafted(outputs[key]),
                times=tuple(timings[key]),
            )
            for key, label in (
                ("derived", "buildtools: excludes derived from torch"),
                ("plain", "plain auditwheel repair (no excludes)"),
            )
        ]


def _mb(size: int) -> str:
    return f"{size / 1e6:,.2f} MB"


def _table(raw: Path, results: list[Result]) -> str:
    ours = results[0]
    head = ("repair", "wheel size", "x raw", "grafted libs", "median time", "x ours", "runs (s)")
    rows = [("raw wheel (python -m build)", _mb(raw.stat().st_size), "1.000", "-", "-", "-", "-")]
    for r in results:
        rows.append(
            (
                r.variant,
                _mb(r.size),
                f"{r.size / raw.stat().st_size:.3f}",
                str(r.grafted),
                f"{r.median:.2f} s",
                f"{r.median / ours.median:.1f}",
                " ".join(f"{t:.2f}" for t in r.times),
            )
        )
    widths = [max(len(row[i]) for row in (head, *rows)) for i in range(len(head))]
    lines = [
        " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in (head, *rows)
    ]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    default_project = ROOT / "examples" / "scatter"
    if not default_project.is_dir():
        default_project = ROOT / "tests" / "fixtures" / "ext_ok"
    parser.add_argument("--project", type=Path, default=default_project)
    parser.add_argument("--wheel", type=Path, default=None, help="use this raw wheel, no build")
    parser.add_argument(
        "--torch", default="2.13.0", help="torch version of the env (default 2.13.0)"
    )
    parser.add_argument("--python", default="python3.11")
    parser.add_argument("--torch-env", type=Path, default=None, help="an existing venv with torch")
    parser.add_argument("--runs", "-n", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)

    runner = SubprocessRunner()
    try:
        venv = args.torch_env or _torch_env(args.torch, args.python, runner)
        site = _site_packages(venv)
        with tempfile.TemporaryDirectory(prefix="bench-raw-") as tmp:
            raw = args.wheel or _build(args.project, venv, Path(tmp), runner)
            if args.wheel is None:
                kept = Path(tempfile.gettempdir()) / "buildtools-bench" / raw.name
                kept.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(raw, kept)
                raw = kept
        ctx = RunContext.of(processes=runner)
        tag = best_platform_tag(raw, ctx=ctx, promised="manylinux_2_28_x86_64")
        log = Path(tempfile.gettempdir()) / "buildtools-bench" / "repair.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        results = _bench(raw, site, tag.best, args.runs, runner, log)
    except BuildtoolsError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return int(exc.exit_code)

    ours, plain = results
    print(f"raw wheel: {raw.name} ({_mb(raw.stat().st_size)}), torch env {venv}")
    print(f"platform tag: {tag.best} ({tag.message})")
    print(f"runs: {args.runs} each, interleaved; auditwheel log: {log}\n")
    print(_table(raw, results))
    print(
        f"\nplain / buildtools: size x{plain.size / ours.size:.1f}, "
        f"median time x{plain.median / ours.median:.1f}"
    )
    if args.json:
        payload = {
            "raw_wheel": raw.name,
            "raw_size": raw.stat().st_size,
            "platform_tag": tag.best,
            "runs": args.runs,
            "results": [{**asdict(r), "median": r.median} for r in results],
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
