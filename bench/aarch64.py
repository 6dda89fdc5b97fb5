"""An emulated aarch64 cell against the x86_64 cell on the same machine, interleaved.

Both are the example (`examples/scatter`) built with `python -m buildtools build --backend
docker --offline` in a child process, from local bases (docker/local-base.sh, its
`--arch arm64` under QEMU user emulation), each build on a fresh copy of the source with a
fresh cache directory (empty compiler cache, no build tree); the prefetched wheels, the
builder images, the cross toolchain and the host's environments are shared and reused
(make them once first: a build of each cell, or this bench run twice). The runs alternate
so that the machine's other load falls on both:

    x86 cold, aarch64 cold, x86 warm, aarch64 warm   [, aarch64 cold without the cross GCC]

- cold: the first build in the fresh cache (the one C++ file compiled);
- warm: the same command after a comment-only edit of `scatter.cpp` (the wheel is rebuilt,
  the compile is a ccache hit): what is left is the container, pip, torch, repair, test;
- `--emulated` adds the aarch64 cell with `BUILDTOOLS_CROSS_COMPILE=0` (everything under
  QEMU, the compiler too: the slow path this bench compares against).

For each build it prints the wall time and cibuildwheel's own step times from the job's
log (before-build, build, repair, test), and the aarch64/x86 ratios.

    python bench/aarch64.py --x86-cell torch2.13.0-cpu-cp311 \\
        --arm-cell torch2.10.0-cpu-cp311-aarch64 --json bench/aarch64.json

Needs a running Docker engine, root and debootstrap (for the local bases) and a QEMU
binfmt handler for aarch64; without them it says why and stops.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from containers import docker_unavailable  # bench/containers.py, beside this script

from buildtools.cachedir import default_cache_dir
from buildtools.probe.emulation import emulation_for
from buildtools.wheelbuild.fingerprint import IGNORED_DIRS

ROOT = Path(__file__).resolve().parents[1]
SHARED = ("envs", "prefetch", "docker", "cross")  # reused between builds
# cibuildwheel's step headers, and the "✓ 12.34s" line that ends each step
_STEPS = {
    "Running before_build": "before_build",
    "Building wheel": "build",
    "Repairing wheel": "repair",
    "Testing wheel": "test",
}
_DONE = re.compile(r"^\s*✓ ([0-9.]+)s\s*$")


def _why_not() -> str | None:
    reason = docker_unavailable()
    if reason is not None:
        return reason
    found = emulation_for("aarch64", host_machine=os.uname().machine)
    return None if found.ok else f"no QEMU for aarch64: {found.reason}"


def _base(*args: str) -> str:
    out = subprocess.run(
        ["bash", str(ROOT / "docker" / "local-base.sh"), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
    )
    return out.stdout.split()[-1]


def _cell(cell: str) -> tuple[str, str, str, str]:
    parts = cell.removeprefix("torch").split("-")
    torch, accelerator, tag = parts[:3]
    platform = "linux_aarch64" if parts[-1] == "aarch64" else "linux_x86_64"
    return torch, accelerator, f"{tag[2]}.{tag[3:]}", platform


def _matrix(path: Path, project: Path, cell: str, base: str) -> None:
    torch, accelerator, python, platform = _cell(cell)
    path.write_text(
        f"project: {{path: {project}, abi: per-python}}\n"
        f'axes:\n  torch: ["{torch}"]\n  accelerator: [{accelerator}]\n'
        f'  python: ["{python}"]\n  platform: [{platform}]\n'
        f"accelerators:\n  {accelerator}: {{image: {base}}}\n"
    )


def steps(log: str) -> dict[str, float]:
    """cibuildwheel's step times in a job log (the last of each kind)."""
    found: dict[str, float] = {}
    current: str | None = None
    for line in log.splitlines():
        for header, name in _STEPS.items():
            if line.startswith(header):
                current = name
        m = _DONE.match(line)
        if m and current:
            found[current] = float(m[1])
            current = None
    return found


class Scratch:
    """A copy of the example and a cache directory sharing the downloads and images."""

    def __init__(self, cell: str, base: str, env: dict[str, str]) -> None:
        shared = default_cache_dir(os.environ)
        self.dir = Path(tempfile.mkdtemp(prefix="bench-aarch64-", dir=shared))
        self.src = self.dir / "src"
        ignore = shutil.ignore_patterns(*IGNORED_DIRS, "*.egg-info")
        shutil.copytree(ROOT / "examples" / "scatter", self.src, ignore=ignore)
        cache = self.dir / "cache"
        cache.mkdir()
        for name in SHARED:
            (shared / name).mkdir(parents=True, exist_ok=True)
            (cache / name).symlink_to(shared / name)
        self.env = {**os.environ, **env, "BUILDTOOLS_CACHE_DIR": str(cache)}
        self.env.pop("BUILDTOOLS_CCACHE_DIR", None)
        self.matrix = self.dir / "matrix.yaml"
        _matrix(self.matrix, self.src, cell, base)
        self.cell = cell

    def build(self) -> dict[str, Any]:
        wheelhouse = self.dir / "wheelhouse"
        argv = [sys.executable, "-m", "buildtools", "build", "--matrix", str(self.matrix)]
        argv += ["--backend", "docker", "--offline", "--wheelhouse", str(wheelhouse), "--no-live"]
        started = time.perf_counter()
        proc = subprocess.run(
            argv, env=self.env, cwd=ROOT, capture_output=True, text=True, check=False, timeout=5400
        )
        took = time.perf_counter() - started
        log_path = wheelhouse / "logs" / f"{self.cell}.log"
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        if proc.returncode != 0:
            raise SystemExit(f"{self.cell}: build failed ({proc.returncode}):\n{log[-4000:]}")
        (cell,) = json.loads((wheelhouse / "report.json").read_text())["cells"]
        compiler = next(
            (
                ln.removeprefix("[buildtools] compiler: ")
                for ln in log.splitlines()
                if ln.startswith("[buildtools] compiler: ")
            ),
            "the image's (native)",
        )
        return {
            "wall_s": round(took, 1),
            "status": cell["status"],
            "errors": [f["code"] for f in cell["findings"] if f["severity"] == "error"],
            "steps_s": steps(log),
            "compiler": compiler,
            "setup_reused": "present, reused" in log,
        }

    def edit_comment(self, i: int) -> None:
        path = self.src / "csrc" / "scatter.cpp"
        path.write_text(path.read_text() + f"\n// bench: a comment-only edit {i}\n")

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def run(x86: str, arm: str, *, emulated: bool) -> dict[str, Any]:
    bases = {x86: _base("--python", _cell(x86)[2]), arm: _base("--arch", "arm64")}
    scratch = {x86: Scratch(x86, bases[x86], {}), arm: Scratch(arm, bases[arm], {})}
    rows: list[dict[str, Any]] = []
    try:
        for step in ("cold", "warm"):
            for cell in (x86, arm):
                if step == "warm":
                    scratch[cell].edit_comment(1)
                row = {"cell": cell, "step": step, **scratch[cell].build()}
                rows.append(row)
                print(f"  {cell} {step}: {row['wall_s']} s {row['steps_s']}", flush=True)
        if emulated:
            plain = Scratch(arm, bases[arm], {"BUILDTOOLS_CROSS_COMPILE": "0"})
            try:
                row = {"cell": arm, "step": "cold, no cross GCC", **plain.build()}
            finally:
                plain.close()
            rows.append(row)
            print(f"  {arm} cold, no cross GCC: {row['wall_s']} s {row['steps_s']}", flush=True)
    finally:
        for s in scratch.values():
            s.close()
    by = {(r["cell"], r["step"]): r for r in rows}
    ratios = {
        step: round(by[(arm, step)]["wall_s"] / by[(x86, step)]["wall_s"], 2)
        for step in ("cold", "warm")
    }
    if emulated:
        ratios["cold, no cross GCC"] = round(
            by[(arm, "cold, no cross GCC")]["wall_s"] / by[(x86, "cold")]["wall_s"], 2
        )
    return {"x86_cell": x86, "arm_cell": arm, "bases": bases, "rows": rows, "ratio": ratios}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--x86-cell", default="torch2.13.0-cpu-cp311")
    parser.add_argument("--arm-cell", default="torch2.10.0-cpu-cp311-aarch64")
    parser.add_argument("--emulated", action="store_true", help="add the no-cross-GCC build")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    reason = _why_not()
    result: dict[str, Any] = (
        {"skipped": reason} if reason else run(args.x86_cell, args.arm_cell, emulated=args.emulated)
    )
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
