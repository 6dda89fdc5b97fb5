"""Time loading and planning a 10,000-cell matrix (target: ≤ 1 s).

The matrix crosses every torch release the knowledge base knows with CPU, CUDA and ROCm
accelerators, eight Pythons and two platforms: 10,000 requested cells, most of which the
planner removes as impossible (with a reason each), the rest grouped into jobs.

    python bench/plan.py                  # median of 5 runs
    python bench/plan.py --runs 3 --json bench/plan.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from buildtools.knowledge import load_knowledge
from buildtools.matrix.config import load_matrix
from buildtools.planner import Selection, plan

PYTHONS = ("3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15")
PLATFORMS = ("linux_x86_64", "linux_aarch64")


def _quote(values: list[str] | tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


def matrix_text(cells: int) -> tuple[str, int]:
    """A matrix.yaml with about `cells` requested cells (torch × accel × python × platform)."""
    kb = load_knowledge()
    torches = [p for minor in kb.torch.values() for p in minor.patches]
    accels = ["cpu"]
    for minor in kb.torch.values():
        accels += ["cu" + v.replace(".", "") for v in minor.cuda]
        accels += ["rocm" + v for v in minor.rocm]
    accels = list(dict.fromkeys(accels))
    per_torch = len(accels) * len(PYTHONS) * len(PLATFORMS)
    n_torch = max(1, min(len(torches), cells // per_torch))
    n_accel = max(1, min(len(accels), cells // (n_torch * len(PYTHONS) * len(PLATFORMS))))
    torches, accels = torches[-n_torch:], accels[:n_accel]
    total = len(torches) * len(accels) * len(PYTHONS) * len(PLATFORMS)
    text = (
        "version: 1\nproject: {path: examples/scatter, abi: per-python}\naxes:\n"
        f"  torch: {_quote(torches)}\n  accelerator: {_quote(accels)}\n"
        f"  python: {_quote(PYTHONS)}\n  platform: {_quote(PLATFORMS)}\n"
    )
    return text, total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    text, requested = matrix_text(args.cells)
    kb = load_knowledge()
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as tmp:
        path = Path(tmp) / "matrix.yaml"
        path.write_text(text)
        times: list[float] = []
        result = None
        for _ in range(args.runs):
            started = time.perf_counter()
            mf = load_matrix(path, knowledge=kb)
            result = plan(mf, kb, host_python="3.12", selection=Selection(profile=None))
            times.append(time.perf_counter() - started)
    assert result is not None
    median = statistics.median(times)
    figures = {
        "requested_cells": requested,
        "cells": len(result.cells),
        "jobs": len(result.jobs),
        "removed": len(result.removed),
        "median_s": round(median, 3),
        "runs_s": [round(t, 3) for t in times],
    }
    print(
        f"{requested} requested cells → {len(result.cells)} cells in {len(result.jobs)} jobs, "
        f"{len(result.removed)} removed as impossible; load + plan median {median:.3f} s "
        f"({'meets' if median <= 1.0 else 'MISSES'} the 1 s target)"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
