"""Every Python of one torch × CUDA, cold: the device units compiled once, against one cell.

Side by side in one run, each build a `buildtools build` child process as a user runs it, with
a fresh cache directory (the shared environments linked in), a fresh unit store and no
compiler cache, so nothing is reused from an earlier run:

- one:      the first Python's cell alone;
- all:      the cells of every Python of that torch × accelerator in one build (the device
            units compiled by the first cell to reach them, reused by the others);
- separate: each other Python's cell alone with an empty unit store at the same path, to
            compare its wheel with the one `all` made (`--identity one` compares the last
            Python's only, `none` skips it). The same path: a unit with line info names
            the store's header views in its device code, as it named the environment's
            headers before (toolchain/headerview.py).

Prints the ratio all / one (the target: ≤ 1.5 for five Pythons) and, per cell, the units
reused and from which cell. The environments must exist already (`buildtools build --only
<cell>` makes one); a missing one stops the benchmark with that message.

    python bench/pythons.py --json bench/pythons.json
    python bench/pythons.py --project /tmp/xformers --matrix /tmp/xformers/matrix.yaml \\
        --torch 2.11.0 --accelerator cu130
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
import zipfile
from pathlib import Path
from typing import Any

from buildtools.cachedir import default_cache_dir
from buildtools.knowledge import load_knowledge
from buildtools.matrix.config import load_matrix
from buildtools.planner import Selection, plan
from buildtools.planning import host_python
from buildtools.wheelbuild.fingerprint import IGNORED_DIRS

ROOT = Path(__file__).resolve().parents[1]


def cells(matrix: Path, torch: str, accelerator: str, pythons: list[str] | None) -> list[str]:
    """The release profile's cell ids of `torch` × `accelerator` on linux_x86_64, by Python."""
    kb = load_knowledge()
    mf = load_matrix(matrix, knowledge=kb)
    jobs = plan(mf, kb, host_python=host_python(), selection=Selection(profile="release")).jobs
    found = [
        j
        for j in jobs
        if j.accelerator.name == accelerator
        and j.platform == "linux_x86_64"
        and torch in j.torch_versions
        and (pythons is None or j.build_python in pythons)
    ]
    return [j.id for j in sorted(found, key=lambda j: tuple(map(int, j.build_python.split("."))))]


def differing_members(one: Path, two: Path) -> list[str]:
    """The members of two wheels whose bytes differ (or that only one has); for the build
    record, the keys that differ (its fingerprint follows buildtools' own code)."""
    out = []
    with zipfile.ZipFile(one) as a, zipfile.ZipFile(two) as b:
        for n in sorted(set(a.namelist()) | set(b.namelist())):
            if n in a.namelist() and n in b.namelist() and a.read(n) == b.read(n):
                continue
            if n.endswith("/buildtools.json") and n in a.namelist() and n in b.namelist():
                ra, rb = json.loads(a.read(n)), json.loads(b.read(n))
                keys = sorted(k for k in set(ra) | set(rb) if ra.get(k) != rb.get(k))
                out.append(f"{n} (keys: {', '.join(keys)})")
                continue
            out.append(n)
    return out


def build(
    ids: list[str], *, matrix: Path, project: Path, scratch: Path, name: str
) -> tuple[float, dict[str, Any]]:
    """One cold `buildtools build` of `ids`; (seconds, its report)."""
    base = default_cache_dir(os.environ)
    # every build at the same project and cache paths, made afresh: a wheel is reproducible at
    # one path (the object directory's name follows the project's), so a comparison needs it
    cache, src, units = scratch / "cache", scratch / "src", scratch / "units"
    for path in (cache, src, units):
        shutil.rmtree(path, ignore_errors=True)
    cache.mkdir()
    (cache / "envs").symlink_to(base / "envs")
    shutil.copytree(project, src, ignore=shutil.ignore_patterns(*IGNORED_DIRS, "*.egg-info"))
    wheelhouse = scratch / f"{name}-wh"
    env = {k: v for k, v in os.environ.items() if k != "BUILDTOOLS_CCACHE_DIR"}
    env["BUILDTOOLS_UNITS_DIR"] = str(units)
    env["BUILDTOOLS_UNIT_REUSE"] = "1"
    argv = [sys.executable, "-m", "buildtools", "build", "--matrix", str(matrix)]
    argv += ["--profile", "release", "--project", str(src), "--wheelhouse", str(wheelhouse)]
    argv += ["--cache-dir", str(cache), "--compiler-cache", "none", "--no-live"]
    for cell in ids:
        argv += ["--only", cell]
    started = time.perf_counter()
    run = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=7200)
    seconds = time.perf_counter() - started
    (scratch / f"{name}.log").write_text(run.stdout + run.stderr)
    if run.returncode != 0:
        raise SystemExit(
            f"{name}: build failed ({run.returncode}); {run.stdout[-3000:]}{run.stderr}"
        )
    report = json.loads((wheelhouse / "report.json").read_text())
    print(f"  {name}: {len(ids)} cell(s) in {seconds:.1f} s", flush=True)
    return seconds, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--matrix", type=Path, default=ROOT / "matrix.yaml")
    parser.add_argument("--project", type=Path, default=None)
    parser.add_argument("--torch", default="2.11.0")
    parser.add_argument("--accelerator", default="cu130")
    parser.add_argument("--pythons", default=None, help="comma-separated (default: the plan's)")
    parser.add_argument("--identity", choices=("all", "one", "none"), default="one")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    pythons = args.pythons.split(",") if args.pythons else None
    ids = cells(args.matrix, args.torch, args.accelerator, pythons)
    if len(ids) < 2:
        raise SystemExit(f"{args.torch} x {args.accelerator}: {len(ids)} cell(s); need two or more")
    project = args.project
    if project is None:
        project = load_matrix(args.matrix, knowledge=load_knowledge()).project_dir
    scratch = Path(tempfile.mkdtemp(prefix="bench-pythons-", dir=default_cache_dir(os.environ)))
    try:
        kw = {"matrix": args.matrix, "project": project, "scratch": scratch}
        one, _ = build(ids[:1], name="one", **kw)
        every, report = build(ids, name="all", **kw)
        wheels = {c["cell"]: c for c in report["cells"]}
        compare = {"all": ids[1:], "one": ids[-1:], "none": []}[args.identity]
        identical: dict[str, bool] = {}
        differ: dict[str, list[str]] = {}
        for cell in compare:
            _, alone = build([cell], name=f"separate-{cell}", **kw)
            theirs = alone["cells"][0]
            identical[cell] = theirs["sha256"] == wheels[cell]["sha256"]
            print(f"  {cell}: the same wheel as built alone: {identical[cell]}", flush=True)
            if not identical[cell]:
                differ[cell] = differing_members(Path(wheels[cell]["wheel"]), Path(theirs["wheel"]))
                print(f"  {cell}: members that differ: {differ[cell]}", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result: dict[str, Any] = {
        "cells": ids,
        "one_s": round(one, 1),
        "all_s": round(every, 1),
        "ratio": round(every / one, 3),
        "units": {c: wheels[c].get("units") for c in ids},
        "identical": identical,
        "differing_members": differ,
    }
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
