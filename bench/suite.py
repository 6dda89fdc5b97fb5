"""`nox -s bench`: every benchmark, side by side in one run; a table of ratios and results.json.

Each benchmark script runs in a child process (its own output streams through) and writes
its figures as JSON; this script then prints one row per target and writes
`bench/results.json` (date, machine, rows, and every script's raw figures).

    python bench/suite.py                      # the whole suite (~45 min on 2 cores)
    python bench/suite.py --quick              # fewer runs, fewer index wheels (smoke test)
    python bench/suite.py --only plan,index    # some benchmarks only
    python bench/suite.py --no-downloads       # the CUDA rows skip where its env is missing
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from device import CELL as CUDA_CELL  # bench/device.py, beside this script
from device import cached_cuda_job

from buildtools.planning import host_python

CPU_CELL = f"torch2.13.0-cpu-cp{host_python().replace('.', '')}"

BENCH = Path(__file__).resolve().parent
NAMES = (
    "plan",
    "index",
    "repair",
    "overhead",
    # containers first: its setup prefetches the CUDA cell's wheels, which incremental's
    # second-environment row reads
    "containers",
    # the docker edit target on a corpus extension with many .cu files (xformers: 18)
    "containers_corpus",
    "incremental",
    "device",
    "estimate",
    "compiler_cache",
    "distributed",
    # every Python's cu130 cell of one torch cold against one cell (device units compiled once)
    "pythons",
)


@dataclass(frozen=True)
class Row:
    name: str
    ours: str
    baseline: str
    ratio: float | None
    target: str
    ok: bool | None  # None: informational, no target

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ours": self.ours,
            "baseline": self.baseline,
            "ratio": None if self.ratio is None else round(self.ratio, 4),
            "target": self.target,
            "meets": self.ok,
        }


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    return {
        "cpu": model,
        "cores": len(os.sched_getaffinity(0)),
        "memory_gb": round(memory, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


# a benchmark that is another run of a script (its own arguments in main's script_args)
SCRIPT = {"containers_corpus": "containers"}


def _run(name: str, args: list[str], out: Path) -> dict[str, Any] | None:
    script = BENCH / f"{SCRIPT.get(name, name)}.py"
    argv = [sys.executable, str(script), *args, "--json", str(out)]
    print(f"\n=== {name}: {' '.join(argv[1:])}", flush=True)
    started = time.perf_counter()
    proc = subprocess.run(argv, check=False, timeout=6 * 3600)  # a whole benchmark
    print(f"=== {name}: {time.perf_counter() - started:.0f} s, exit {proc.returncode}", flush=True)
    if proc.returncode != 0 or not out.is_file():
        return None
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def _s(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"


def rows_for(raw: dict[str, Any]) -> list[Row]:
    """One row per target (and a few informational ones) from the scripts' figures."""
    rows: list[Row] = []
    add: Callable[[Row], None] = rows.append
    rep = raw.get("repair")
    if rep:
        ours, plain = rep["results"][0], rep["results"][1]
        size_ratio = ours["size"] / rep["raw_size"]
        add(
            Row(
                "repair: wheel size (ours / raw)",
                f"{ours['size'] / 1e6:.2f} MB",
                f"{rep['raw_size'] / 1e6:.2f} MB",
                size_ratio,
                "≤ 1.01",
                size_ratio <= 1.01,
            )
        )
        speed = plain["median"] / ours["median"]
        add(
            Row(
                "repair: time (plain auditwheel / ours)",
                _s(ours["median"]),
                _s(plain["median"]),
                speed,
                "≥ 20",
                speed >= 20,
            )
        )
        add(
            Row(
                "repair: plain auditwheel's wheel size (x raw)",
                f"{plain['size'] / 1e6:.0f} MB",
                f"{rep['raw_size'] / 1e6:.2f} MB",
                plain["size"] / rep["raw_size"],
                "-",
                None,
            )
        )
    over = raw.get("overhead")
    if over:
        add(
            Row(
                "one cell: buildtools build / plain python -m build",
                _s(over["ours_median_s"]),
                _s(over["plain_median_s"]),
                over["ratio"],
                "≤ 1.10",
                over["ratio"] <= 1.10,
            )
        )
    inc = raw.get("incremental")
    if inc:
        cpu = inc["cpu"]
        med = cpu["median_s"]
        add(
            Row(
                f"no-op rebuild / first build ({cpu['cell']})",
                _s(med["noop"]),
                _s(med["cold"]),
                cpu["noop_ratio"],
                "≤ 0.05",
                cpu["noop_ratio"] <= 0.05,
            )
        )
        add(
            Row(
                "one file touched (code edit, scatter.cpp) / cold build",
                _s(med["touch_code"]),
                _s(med["cold"]),
                cpu["touch_code_ratio"],
                "≤ 0.40",
                cpu["touch_code_ratio"] <= 0.40,
            )
        )
        add(
            Row(
                "one file touched (comment-only edit) / cold build",
                _s(med["touch_comment"]),
                _s(med["cold"]),
                cpu["touch_comment_ratio"],
                "-",
                None,
            )
        )
        cuda = inc.get("cuda", {})
        if "median_s" in cuda:
            cmed = cuda["median_s"]
            add(
                Row(
                    f"one file touched (code edit, scatter.cpp) / cold build ({cuda['cell']})",
                    _s(cmed["touch_code"]),
                    _s(cmed["cold"]),
                    cuda["touch_code_ratio"],
                    "≤ 0.40",
                    cuda["touch_code_ratio"] <= 0.40,
                )
            )
            add(
                Row(
                    f"no-op rebuild / first build ({cuda['cell']})",
                    _s(cmed["noop"]),
                    _s(cmed["cold"]),
                    cuda["noop_ratio"],
                    "≤ 0.05",
                    cuda["noop_ratio"] <= 0.05,
                )
            )
        envs = inc["environments"]
        add(
            Row(
                f"second environment / first (same torch, {envs['installer']})",
                _s(envs["second_s"]),
                _s(envs["first_s"]),
                envs["ratio"],
                "≤ 0.10",
                envs["ratio"] <= 0.10,
            )
        )
        cenv = inc.get("environments_cuda", {})
        if "ratio" in cenv:
            add(
                Row(
                    f"second environment / first ({cenv['cell']}, ~5 GB)",
                    _s(cenv["second_s"]),
                    _s(cenv["first_s"]),
                    cenv["ratio"],
                    "≤ 0.10",
                    cenv["ratio"] <= 0.10,
                )
            )
        add(
            Row(
                "second environment (uv) / first environment with pip",
                _s(envs["second_s"]),
                _s(envs["pip_first_s"]),
                envs["ratio_vs_pip"],
                "-",
                None,
            )
        )
    idx = raw.get("index")
    if idx:
        add(
            Row(
                f"index: pages for {idx['wheels']} wheels (render, front page included)",
                _s(idx["render_s"]),
                "0.5 s target",
                idx["render_s"] / 0.5,
                "≤ 0.5 s",
                idx["render_s"] <= 0.5,
            )
        )
        add(
            Row(
                f"index: publish {idx['wheels']} wheels via the CLI into a new site",
                _s(idx["publish_cli_s"]),
                "2 s target",
                idx["publish_cli_s"] / 2.0,
                "≤ 2 s",
                idx["publish_cli_s"] <= 2.0,
            )
        )
        if "merge_one_cli_s" in idx:
            add(
                Row(
                    f"index: merge 1 wheel into the {idx['wheels']}-wheel site via the CLI",
                    _s(idx["merge_one_cli_s"]),
                    "0.5 s target",
                    idx["merge_one_cli_s"] / 0.5,
                    "≤ 0.5 s",
                    idx["merge_one_cli_s"] <= 0.5,
                )
            )
        if "publish_verify_cli_s" in idx:
            add(
                Row(
                    "index: the same publish with --verify (every wheel hashed)",
                    _s(idx["publish_verify_cli_s"]),
                    _s(idx["publish_cli_s"]),
                    idx["publish_verify_cli_s"] / idx["publish_cli_s"],
                    "-",
                    None,
                )
            )
    rows += device_rows(raw)
    rows += compiler_cache_rows(raw)
    rows += distributed_rows(raw)
    pl = raw.get("plan")
    if pl:
        add(
            Row(
                f"plan: {pl['requested_cells']}-cell matrix (load + plan)",
                _s(pl["median_s"]),
                "1 s target",
                pl["median_s"] / 1.0,
                "≤ 1 s",
                pl["median_s"] <= 1.0,
            )
        )
    return rows


def compiler_cache_rows(raw: dict[str, Any]) -> list[Row]:
    """sccache against ccache, step by step (bench/compiler_cache.py): which tool is better."""
    rows: list[Row] = []
    for kind, cmp in (raw.get("compiler_cache") or {}).items():
        if not isinstance(cmp, dict) or "sccache_over_ccache" not in cmp:
            continue
        times = {t: cmp["rows"][t]["times_s"] for t in ("sccache", "ccache")}
        for step, ratio in cmp["sccache_over_ccache"].items():
            rows.append(
                Row(
                    f"compiler cache, {step}: sccache / ccache ({cmp['cell']})",
                    _s(times["sccache"][step]),
                    _s(times["ccache"][step]),
                    ratio,
                    "-",
                    None,
                )
            )
        # each tool builds in its own scratch directory (torch's headers are seen through a
        # link there, outside the /site-packages map): the bytes are compared per tool
        for tool in ("sccache", "ccache"):
            digests = {cmp["rows"][tool]["sha256"][k] for k in ("cold", "warm", "warm_moved")}
            rows.append(
                Row(
                    f"the same, {tool}: the {kind} wheel of the cold, warm and moved builds",
                    "identical" if len(digests) == 1 else "DIFFER",
                    "-",
                    None,
                    "identical",
                    len(digests) == 1,
                )
            )
    return rows


def distributed_rows(raw: dict[str, Any]) -> list[Row]:
    """The CUDA cell through a loopback sccache-dist cluster (bench/distributed.py)."""
    dist = raw.get("distributed")
    if not dist or "ratio_2x1_vs_1x1" not in dist:
        return []
    runs = dist["runs"]
    return [
        Row(
            "CUDA cell cold through sccache-dist: 2 servers x 1 core / 1 x 1, MAX_JOBS = the "
            f"cluster's slots ({dist['cell']})",
            _s(runs["2x1"]["wall_s"]),
            _s(runs["1x1"]["wall_s"]),
            dist["ratio_2x1_vs_1x1"],
            "≤ 0.6",
            dist["ratio_2x1_vs_1x1"] <= 0.6,
        ),
        Row(
            "the same: wheels of local, 1x1 and 2x1 builds byte-identical",
            "identical" if dist["identical_wheels"] else "DIFFER",
            "-",
            None,
            "identical",
            bool(dist["identical_wheels"]),
        ),
    ]


def _docker_rows(
    cell: dict[str, Any], what: str, edited: str, edit_target: str | None
) -> list[Row]:
    """A bench/containers.py cell's rows: no-op / cold, edit / cold (its target, or none),
    and the comment-only edit when it was measured."""
    if "noop_ratio" not in cell or "edit_ratio" not in cell:
        return []
    med = cell["median_s"]
    limit = float(edit_target.split()[-1]) if edit_target else None
    rows = [
        Row(
            f"docker: no-op rebuild / first build ({what})",
            _s(med["noop"]),
            _s(med["cold"]),
            cell["noop_ratio"],
            "≤ 0.05",
            cell["noop_ratio"] <= 0.05,
        ),
        Row(
            f"docker: code edit of {edited} / cold build ({what})",
            _s(med["edit"]),
            _s(med["cold"]),
            cell["edit_ratio"],
            edit_target or "-",
            cell["edit_ratio"] <= limit if limit is not None else None,
        ),
    ]
    if "comment_ratio" in cell:
        rows.append(
            Row(
                f"docker: comment-only edit / cold build ({what}; ccache hits)",
                _s(med["comment"]),
                _s(med["cold"]),
                cell["comment_ratio"],
                "-",
                None,
            )
        )
    return rows


def device_rows(raw: dict[str, Any]) -> list[Row]:
    """The rows of the release path: CUDA cell, docker backend, the estimate."""
    rows: list[Row] = []
    dev = raw.get("device")
    if dev and "ratio" in dev:
        rows.append(
            Row(
                f"CUDA cell cold ({dev['cell']}): buildtools build / plain python -m build",
                _s(dev["ours_median_s"]),
                _s(dev["plain_median_s"]),
                dev["ratio"],
                "≤ 0.70",
                dev["ratio"] <= 0.70,
            )
        )
    for cell in (raw.get("containers") or {}).get("cells", []):
        device = "-cpu-" not in cell["cell"]
        edited = "scatter_cuda.cu" if device else "scatter.cpp"
        rows += _docker_rows(cell, cell["cell"], f"{edited}", "≤ 0.40" if device else None)
    # the many-.cu case: one .cu of a corpus extension edited
    for cell in (raw.get("containers_corpus") or {}).get("cells", []):
        edited = f"one .cu ({cell['edited'].rsplit('/', 1)[-1]})"
        rows += _docker_rows(cell, f"{cell['project']}, {cell['cell']}", edited, "≤ 0.25")
    rows += pythons_rows(raw.get("pythons") or {})
    est = raw.get("estimate")
    if est and "measured_s" in est:
        error = abs(est["model_ratio"] - 1)
        rows.append(
            Row(
                f"estimate (model) / measured wall, pr profile ({len(est['cells'])} cells)",
                _s(est["model_s"]),
                _s(est["measured_s"]),
                est["model_ratio"],
                "within 25 %",
                error <= 0.25,
            )
        )
        for source in ("model", "recorded"):  # a rebuild with the compiler cache kept
            ratio = est[f"warm_{source}_ratio"]
            rows.append(
                Row(
                    f"estimate ({source}{' timings' if source == 'recorded' else ''}) / "
                    "measured wall, the same, warm (build trees gone, compiler cache kept)",
                    _s(est[f"warm_{source}_s"]),
                    _s(est["warm_measured_s"]),
                    ratio,
                    "within 25 %",
                    abs(ratio - 1) <= 0.25,
                )
            )
    return rows


def pythons_rows(py: dict[str, Any]) -> list[Row]:
    """Every Python's cell of one torch × CUDA against one (bench/pythons.py)."""
    if "ratio" not in py:
        return []
    n = len(py["cells"])
    rows = [
        Row(
            f"{n} Pythons' cells cold / one cell ({py['cells'][0]} …; device units compiled once)",
            _s(py["all_s"]),
            _s(py["one_s"]),
            py["ratio"],
            "≤ 1.5 (5 Pythons)",
            py["ratio"] <= 1.5,
        )
    ]
    for cell, same in (py.get("identical") or {}).items():
        rows.append(
            Row(
                f"the same: {cell}'s wheel against its cell built alone",
                "identical" if same else "differ",
                "-",
                None,
                "identical",
                same,
            )
        )
    return rows


def table(rows: list[Row]) -> str:
    head = ("benchmark", "ours", "baseline", "ratio", "target", "verdict")
    body = [
        (
            r.name,
            r.ours,
            r.baseline,
            "-" if r.ratio is None else f"{r.ratio:.3f}",
            r.target,
            "-" if r.ok is None else ("meets" if r.ok else "MISSES"),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in (head, *body)) for i in range(len(head))]
    lines = [
        " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in (head, *body)
    ]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


# the benchmarks that build the CUDA cell with the shared environment (~5 GB of wheels)
NEEDS_CUDA_ENV = (
    "incremental",
    "device",
    "containers",
    "containers_corpus",
    "distributed",
    "pythons",
)


def ensure_cuda_env() -> str | None:
    """Make the CUDA cell's environment once where it is missing (a download, not timed as
    part of any benchmark): a `buildtools build` of that cell into a throwaway wheelhouse.
    Returns why it could not be made, or None."""
    env = {k: v for k, v in os.environ.items() if k != "BUILDTOOLS_CCACHE_DIR"}
    if cached_cuda_job(env)[1]:
        return None
    print(f"\n=== setup: the environment of {CUDA_CELL} (once; downloads ~5 GB)", flush=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-setup-") as tmp:
        argv = [sys.executable, "-m", "buildtools", "build", "--matrix", "matrix.yaml"]
        argv += ["--profile", "release", "--only", CUDA_CELL, "--wheelhouse", tmp, "--no-live"]
        proc = subprocess.run(argv, cwd=BENCH.parent, check=False, timeout=3 * 3600)
    print(f"=== setup: {time.perf_counter() - started:.0f} s, exit {proc.returncode}", flush=True)
    return None if proc.returncode == 0 else f"building {CUDA_CELL} failed (exit {proc.returncode})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--only", default=",".join(NAMES), help="comma-separated: " + ",".join(NAMES)
    )
    parser.add_argument("--quick", action="store_true", help="fewer runs (a smoke test)")
    parser.add_argument("--json", type=Path, default=BENCH / "results.json")
    parser.add_argument(
        "--no-downloads",
        action="store_true",
        help="do not make the CUDA cell's environment where it is missing (its rows skip)",
    )
    args = parser.parse_args(argv)
    wanted = [n for n in args.only.split(",") if n]
    unknown = sorted(set(wanted) - set(NAMES))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(NAMES)}")
    runs = "1" if args.quick else None
    script_args: dict[str, list[str]] = {
        "plan": ["--runs", runs or "5"],
        "index": ["--runs", runs or "3", *(["--wheels", "2000"] if args.quick else [])],
        "repair": ["--runs", runs or "2"],
        "overhead": ["--runs", runs or "2"],
        "incremental": ["--runs", runs or "2", *(["--cuda", "no"] if args.quick else [])],
        "device": ["--runs", runs or "2"],
        "estimate": [],
        # the CPU cell every step; the CUDA cell no-op and a .cu edit (a comment-only edit
        # is of scatter.cpp): cold ~2 min with six archs
        "containers": ["--runs", "1", "--cell", CPU_CELL, "--cell", CUDA_CELL],
        # xformers' own 18 .cu files (flash-attention off, as in the corpus' CUDA build), sm_90,
        # one abi3 job; its import test needs numpy (prefetched): cold ~8 min on 2 cores
        "containers_corpus": [
            "--cell",
            CUDA_CELL,
            "--steps",
            "noop,edit",
            "--corpus",
            "xformers",
            "--edit",
            "xformers/csrc/attention/cuda/matmul.cu",
            "--abi",
            "abi3",
            "--arch-list",
            "9.0",
            "--build-env",
            "XFORMERS_DISABLE_FLASH_ATTN=1",
            "--prefetch",
            "numpy",
        ],
        "compiler_cache": ["--cuda", "no"],
        "distributed": [],
        # the example's torch 2.11.0 cu130 cells, every Python the plan has (the environments
        # bench/device.py's setup makes for 3.12; the others as `buildtools build` makes them)
        "pythons": ["--identity", "one"],
    }
    started = time.perf_counter()
    raw: dict[str, Any] = {}
    failed: list[str] = []
    if set(wanted) & set(NEEDS_CUDA_ENV) and not args.no_downloads:
        why = ensure_cuda_env()
        if why:
            print(f"setup: {why}; the CUDA rows will say they were skipped", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-suite-") as tmp:
        for name in NAMES:
            if name in wanted:
                data = _run(name, script_args[name], Path(tmp) / f"{name}.json")
                if data is None:
                    failed.append(name)
                else:
                    raw[name] = data
    rows = rows_for(raw)
    print(f"\nbenchmarks, side by side in one run ({time.perf_counter() - started:.0f} s):\n")
    print(table(rows))
    if failed:
        print(f"\nFAILED (no figures): {', '.join(failed)}")
    result = {
        "schema": "torch-buildtools/bench/v1",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "seconds": round(time.perf_counter() - started, 1),
        "rows": [r.to_json() for r in rows],
        "failed": failed,
        "raw": raw,
    }
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
