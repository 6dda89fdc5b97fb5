"""Time `buildtools index` on 10,000 synthetic wheels (target: pages in ≤ 0.5 s).

The wheels are small but real zip files with METADATA, WHEEL, RECORD and a build record,
spread over torch 2.8-2.15 × cpu/cu126/cu128/cu130/rocm6.4 × Python 3.10-3.13 × many
versions, so patch aliasing (2.9.0 → 2.9.1, …) is exercised. With buildtools importable:

    python bench/index.py                      # 10,000 wheels, median of 3 runs
    python bench/index.py --wheels 2000 --runs 5 --json bench/index.json

Phases (each the median of --runs; every run starts from the same inputs):

- render:  `render_site` on the in-memory records: every page, PEP 503 index, the front
           page (selector, coverage map of a matrix naming every cell plus Python 3.9,
           which no torch here supports, and a smoke run for every tenth wheel) and
           index.json (the page-generation path the CLI calls);
- read:    `read_wheel` on every file (sha256, METADATA, build record);
- publish: `buildtools index WHEELHOUSE --site NEW` through the CLI: read, merge, render,
           link every wheel (reflink or hard link where the filesystem allows) and write
           its metadata file into a staged site, swap it in. The wheelhouse has the build
           report `buildtools build` writes beside its wheels, so the hashes it recorded
           are reused (the files' size and mtime are unchanged);
- verify:  the same with `--verify` (every wheel hashed again, as before hash reuse);
- merge:   the same command adding 1 new wheel to the 10,000-wheel site just published
           (the old site's files are hard-linked into the staged one; pages with the
           same bytes are kept, not written);
- merge again: the same into a site published into before, whose previous generation
           (`.NAME.prev`) the merge starts from: it links only what changed since.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import statistics
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from buildtools.cli.main import main as cli_main
from buildtools.index.manifest import IndexedWheel
from buildtools.index.settings import IndexSettings
from buildtools.index.site import render_site
from buildtools.index.smokelog import SmokeRun
from buildtools.index.wheels import read_wheel
from buildtools.knowledge import Knowledge, load_knowledge
from buildtools.model import Cell
from buildtools.planner import MatrixCells, RemovedCell

TORCH = ("2.8.0", "2.9.0", "2.10.0", "2.11.0", "2.12.0", "2.13.0", "2.14.0", "2.15.0")
ACCELERATORS = ("cpu", "cu126", "cu128", "cu130", "rocm6.4")
PYTHONS = ("3.10", "3.11", "3.12", "3.13")


def _record_line(name: str, data: bytes) -> str:
    digest = hashlib.sha256(data).digest().hex()
    return f"{name},sha256={digest},{len(data)}\n"


def synthetic_wheel(directory: Path, version: str, torch: str, accel: str, python: str) -> Path:
    """One small, valid wheel of `synth-ext` with a buildtools build record."""
    major, minor = torch.split(".")[:2]
    local = f"{version}+pt{major}{minor}{accel.replace('.', '')}"
    tag = "cp" + python.replace(".", "")
    dist = f"synth_ext-{local}.dist-info"
    meta = (
        f"Metadata-Version: 2.4\nName: synth-ext\nVersion: {local}\n"
        f"Requires-Python: >={python}\nRequires-Dist: torch=={major}.{minor}.*\n"
    ).encode()
    record = {
        "schema": 1,
        "torch": f"{torch}+{accel}",
        "accelerator": accel,
        "cxx11_abi": True,
        "torch_versions": [torch],
        "torch_requirement": f"torch=={major}.{minor}.*",
    }
    files = {
        "synth_ext/__init__.py": f"VERSION = {local!r}\n".encode(),
        f"{dist}/METADATA": meta,
        f"{dist}/WHEEL": f"Wheel-Version: 1.0\nTag: {tag}-{tag}-manylinux_2_28_x86_64\n".encode(),
        f"{dist}/buildtools.json": json.dumps(record, sort_keys=True).encode(),
    }
    rows = "".join(_record_line(n, d) for n, d in files.items()) + f"{dist}/RECORD,,\n"
    files[f"{dist}/RECORD"] = rows.encode()
    path = directory / f"synth_ext-{local}-{tag}-{tag}-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data)
    return path


def write_report(directory: Path, paths: list[Path]) -> None:
    """The build report `buildtools build` leaves in a wheelhouse: each wheel's sha256,
    size and mtime as it was moved there."""
    cells = []
    for path in paths:
        st = path.stat()
        cells.append(
            {
                "cell": path.name,
                "job": path.name,
                "status": "built",
                "wheel": str(path),
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "size": st.st_size,
                "mtime_ns": st.st_mtime_ns,
            }
        )
    report = {"schema": "torch-buildtools/run-report/v1", "cells": cells}
    (directory / "report.json").write_text(json.dumps(report))


def bench_matrix(kb: Knowledge) -> MatrixCells:
    """The cells a matrix of the synthetic axes (and Python 3.9) names, as the planner
    gives them: the possible ones, and the impossible ones with the knowledge base's reason."""
    cells, impossible = [], []
    for torch in TORCH:
        for accel in ACCELERATORS:
            for python in ("3.9", *PYTHONS):
                cell = Cell(torch=torch, accelerator=accel, python=python)
                reason = kb.cell_unavailable_reason(cell)
                if reason:
                    impossible.append(RemovedCell(cell=cell, reason=reason))
                else:
                    cells.append(cell)
    return MatrixCells(cells=tuple(cells), impossible=tuple(impossible))


def bench_runs(wheels: list[IndexedWheel]) -> list[SmokeRun]:
    """A passing smoke run for every tenth wheel, on an H100 (the front page's notes)."""
    return [
        SmokeRun(
            sha256=w.sha256,
            cell=None,
            runner="cuda",
            gpu="NVIDIA H100 80GB HBM3",
            driver="580.159.04",
            date="2026-11-25",
            python=w.filename.split("-")[2].replace("cp3", "3."),
            torch=w.torch,
        )
        for w in wheels[::10]
    ]


def make_wheelhouse(directory: Path, count: int) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    cells = [(t, a, p) for t in TORCH for a in ACCELERATORS for p in PYTHONS]
    paths: list[Path] = []
    i = 0
    while len(paths) < count:
        version = f"0.{i // len(cells)}.0"
        torch, accel, python = cells[i % len(cells)]
        paths.append(synthetic_wheel(directory, version, torch, accel, python))
        i += 1
    return paths


def _median(fn: Callable[[], object], runs: int, reset: Callable[[], None] | None = None) -> float:
    times: list[float] = []
    for _ in range(runs):
        if reset is not None:
            reset()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _cli(*argv: str) -> None:
    out = io.StringIO()
    code = cli_main(["index", *argv], out=out)
    if code != 0:
        raise SystemExit(f"buildtools index failed ({code}): {out.getvalue()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--wheels", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)

    kb = load_knowledge()
    settings = IndexSettings()
    with tempfile.TemporaryDirectory(prefix="bench-index-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        paths = make_wheelhouse(root / "wh", args.wheels)
        write_report(root / "wh", paths)
        (root / "extra").mkdir()
        extra = synthetic_wheel(root / "extra", "9.9.9", "2.13.0", "cpu", "3.12")
        (root / "extra2").mkdir()
        extra2 = synthetic_wheel(root / "extra2", "9.9.8", "2.13.0", "cpu", "3.12")
        made = time.perf_counter() - t0
        wheels = [read_wheel(p).wheel for p in paths]
        matrix, runs = bench_matrix(kb), bench_runs(wheels)
        files = render_site(wheels, settings, kb, runs=runs, matrix=matrix)
        pages = [p for p in files if p.startswith("torch-") and "/" not in p]
        size = sum(len(b) for b in files.values())

        render = _median(
            lambda: render_site(wheels, settings, kb, runs=runs, matrix=matrix), args.runs
        )
        read = _median(lambda: [read_wheel(p) for p in paths], args.runs)
        site = root / "site"

        def fresh() -> None:
            shutil.rmtree(site, ignore_errors=True)

        publish = _median(
            lambda: _cli(str(root / "wh"), "--site", str(site), "--no-matrix"), args.runs, fresh
        )
        verify = _median(
            lambda: _cli(str(root / "wh"), "--site", str(site), "--no-matrix", "--verify"),
            args.runs,
            fresh,
        )
        merged = root / "merged"

        def reset_merged() -> None:
            shutil.rmtree(merged, ignore_errors=True)
            shutil.rmtree(root / ".merged.prev", ignore_errors=True)
            _cli(str(root / "wh"), "--site", str(merged), "--no-matrix")

        merge = _median(
            lambda: _cli(str(extra), "--site", str(merged), "--no-matrix"), args.runs, reset_merged
        )

        def reset_merged_twice() -> None:
            # a site published into before (the state of any site after its first
            # release): the generation the last publish replaced is kept beside it
            reset_merged()
            _cli(str(extra2), "--site", str(merged), "--no-matrix")

        merge_again = _median(
            lambda: _cli(str(extra), "--site", str(merged), "--no-matrix"),
            args.runs,
            reset_merged_twice,
        )

    figures = {
        "wheels": args.wheels,
        "find_links_pages": len(pages),
        "generated_files": len(files),
        "generated_mb": round(size / 1e6, 2),
        "render_s": round(render, 3),
        "front_page_kb": round(len(files["index.html"]) / 1e3, 1),
        "read_s": round(read, 3),
        "publish_cli_s": round(publish, 3),
        "publish_verify_cli_s": round(verify, 3),
        "merge_one_cli_s": round(merge, 3),
        "merge_one_again_cli_s": round(merge_again, 3),
        "runs": args.runs,
        "python": sys.version.split()[0],
    }
    print(f"{args.wheels} synthetic wheels (made in {made:.1f} s), median of {args.runs} run(s)")
    print(f"{len(pages)} find-links pages, {len(files)} generated files, {size / 1e6:.1f} MB")
    print("| phase | seconds |")
    print("|---|---:|")
    print(f"| render (pages + PEP 503 + front page + index.json) | {render:.3f} |")
    print(f"front page: {len(files['index.html']) / 1e3:.0f} kB")
    print(f"| read (sha256 + METADATA + build record) | {read:.3f} |")
    print(f"| publish via CLI into a new site (read + render + link + swap) | {publish:.3f} |")
    print(f"| the same with --verify (every wheel hashed) | {verify:.3f} |")
    print(f"| merge 1 wheel via CLI into the {args.wheels}-wheel site | {merge:.3f} |")
    print(
        f"| the same into a site published into before (its previous generation kept) "
        f"| {merge_again:.3f} |"
    )
    verdict = "meets" if render <= 0.5 else "MISSES"
    print(f"page generation for {args.wheels} wheels: {render:.3f} s ({verdict} the 0.5 s target)")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
