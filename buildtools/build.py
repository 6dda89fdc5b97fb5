"""`buildtools build`: plan → toolchain → raw wheel → repair → relabel → check → wheelhouse.

The executor decides nothing: every value comes from the BuildJob. A failed cell never
removes or overwrites a good wheel: work happens in a staging directory and only a wheel
whose checks passed is moved (atomically) into the wheelhouse.
"""

from __future__ import annotations

__all__ = [
    "Backend",
    "BuildOptions",
    "LocalBackend",
    "add_build_parser",
    "build_plan",
    "cmd_build",
    "reproduce_command",
]

import argparse
import contextlib
import hashlib
import json
import os
import shlex
import shutil
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Protocol, TextIO

from . import __version__
from .ccache import (
    CCACHE_INSTALL_HINT,
    CompilerCache,
    ccache_env,
    ccache_root,
    find_ccache,
    make_masquerade,
    no_ccache_env,
)
from .checks import Expectation, TorchTarget, check_wheel, load_torch_target
from .errors import BuildFailedError, BuildtoolsError, CheckFailedError, PlanError
from .fingerprint import source_fingerprint
from .incremental import PriorWheels, compute_fingerprints, skipped_results
from .knowledge import Knowledge, load_knowledge
from .model import Accelerator, BuildJob, Finding, Severity
from .planner import Plan
from .progress import make_progress
from .repair import repair_against_torch
from .report import CellResult, RunReport, Status, write_atomic
from .runner import Runner, SubprocessRunner
from .scheduler import HostResources, Slots, host_resources, plan_slots
from .toolchain import Toolchain, prepare_toolchain
from .wheelmeta import make_build_record, relabel_wheel

SHIMS = Path(__file__).parent / "data" / "shims"


def default_cache_dir(env: Mapping[str, str]) -> Path:
    """Where torch environments and build trees live between runs."""
    if env.get("BUILDTOOLS_CACHE_DIR"):
        return Path(env["BUILDTOOLS_CACHE_DIR"])
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".cache")
    return Path(base) / "torch-buildtools"


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    project_dir: Path
    wheelhouse: Path
    cache_dir: Path
    env: Mapping[str, str]
    fail_fast: bool = False
    max_jobs: int | None = None
    cuda_home: Path | None = None
    live: bool = True
    reproduce: str = ""
    matrix: str = "matrix.yaml"
    force: bool = False  # rebuild even when a wheel with the job's fingerprint exists
    index_site: Path | None = None  # a published site whose wheels count as built
    ccache: bool = True  # False: --no-ccache (each job's matrix build.ccache also counts)
    jobs: int | None = None  # jobs compiling at once (default: as the machine allows)
    host: HostResources | None = None  # cores and memory (default: this machine's)


class Backend(Protocol):
    """Where the compiler runs: it turns a job + toolchain into raw wheel(s).

    `needs_host_toolkit`: the host toolchain compiles (else it holds torch only, for the
    checks). `repairs_inside`: build_raw returns wheels already repaired, so build_job
    skips the host repair (the docker backend repairs in the container, where the wheel's
    dependencies live).
    """

    name: str
    needs_host_toolkit: bool
    repairs_inside: bool

    def preflight(self, runner: Runner) -> None:
        """Raise ToolMissingError before any job when what the backend needs is missing."""
        ...

    def build_raw(
        self,
        job: BuildJob,
        toolchain: Toolchain,
        *,
        project_dir: Path,
        out_dir: Path,
        build_dir: Path,
        env: Mapping[str, str],
        runner: Runner,
        log: IO[str],
    ) -> list[Path]: ...


class LocalBackend:
    """PEP 517 build with `build --no-isolation` inside the job's torch environment."""

    name = "local"
    needs_host_toolkit = True
    repairs_inside = False

    def preflight(self, runner: Runner) -> None:
        """Nothing to check ahead: each job's toolchain names what it misses."""

    def build_raw(
        self,
        job: BuildJob,
        toolchain: Toolchain,
        *,
        project_dir: Path,
        out_dir: Path,
        build_dir: Path,
        env: Mapping[str, str],
        runner: Runner,
        log: IO[str],
    ) -> list[Path]:
        build_dir.mkdir(parents=True, exist_ok=True)
        # A per-job build tree keeps object files of one toolchain away from another's and
        # lets ninja rebuild incrementally (setuptools reads DIST_EXTRA_CONFIG).
        extra_cfg = build_dir / "buildtools-setup.cfg"
        # setuptools skips an extension whose .so is newer than its sources, blind to headers,
        # flags and environment; `force` hands every build to ninja, which tracks all of those.
        extra_cfg.write_text(
            f"[build]\nbuild_base = {build_dir / 'setuptools'}\n\n[build_ext]\nforce = 1\n"
        )
        full_env = {**env, "DIST_EXTRA_CONFIG": str(extra_cfg)}
        argv = [
            str(toolchain.python),
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(out_dir),
            str(project_dir),
        ]
        result = runner.run(argv, cwd=project_dir, env=full_env, log=log)
        if not result.ok:
            raise BuildFailedError(f"`python -m build` exited {result.returncode}")
        wheels = sorted(out_dir.glob("*.whl"))
        if not wheels:
            raise BuildFailedError("the build finished but produced no wheel")
        return wheels


def build_tree(
    job: BuildJob, toolchain: Toolchain, project_dir: Path, env: Mapping[str, str], cache_dir: Path
) -> Path:
    """The job's persistent build tree: one per project × toolchain × job environment.

    Object files are reused only by a build that would compile them the same way.
    """
    digest = hashlib.sha256()
    for part in (
        str(project_dir.resolve()),
        toolchain.key,
        *(f"{k}={v}" for k, v in sorted(job.env)),
    ):
        digest.update(part.encode() + b"\0")
    for key in ("CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "NVCC_FLAGS"):
        digest.update(f"{key}={env.get(key, '')}".encode() + b"\0")
    return cache_dir / "build" / f"{job.id}-{digest.hexdigest()[:16]}"


def job_environment(
    job: BuildJob,
    toolchain: Toolchain,
    opts: BuildOptions,
    *,
    compiler_cache: CompilerCache | None = None,
) -> dict[str, str]:
    """The exact environment of a job's build: host env + toolchain + job vars + MAX_JOBS,
    then the compiler cache (`compiler_cache`), or none at all when it is None.

    `opts.max_jobs` is the scheduler's share for this job and wins over any other MAX_JOBS
    (the host's, the matrix's): N concurrent jobs x MAX_JOBS never exceed the machine.
    """
    env = dict(opts.env)
    for key, value in toolchain.build_env:
        if key == "PATH" and env.get("PATH"):
            env[key] = f"{value}{os.pathsep}{env['PATH']}"
        else:
            env[key] = value
    env.update(job.env)
    if job.toolkit is not None and env.get("BUILDTOOLS_FORCE_CUDA_AVAILABLE", "1") == "1":
        # setup.py files that ask torch.cuda.is_available() still build device code here
        env["BUILDTOOLS_FORCE_CUDA_AVAILABLE"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SHIMS), env.get("PYTHONPATH")) if p)
    if opts.max_jobs is not None:
        env["MAX_JOBS"] = str(opts.max_jobs)
    elif "MAX_JOBS" not in env:
        env["MAX_JOBS"] = str(os.cpu_count() or 1)
    env["PYTHONNOUSERSITE"] = "1"
    if compiler_cache is not None:
        env.update(
            ccache_env(
                job,
                compiler_cache,
                project_dir=opts.project_dir,
                cuda_home=toolchain.cuda_home,
                path=env.get("PATH", ""),
            )
        )
    else:
        env.update(no_ccache_env())
    return env


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass
class _JobRun:
    job: BuildJob
    log_path: Path
    durations: dict[str, float] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)


def _timed(run: _JobRun, stage: str, started: float) -> None:
    run.durations[stage] = run.durations.get(stage, 0.0) + time.monotonic() - started


def _targets(
    job: BuildJob, toolchain: Toolchain, opts: BuildOptions, runner: Runner, log: IO[str]
) -> list[TorchTarget]:
    """The torch installations the wheel must work with (several for a stable-ABI job)."""
    targets = [load_torch_target(toolchain.site_packages)]
    for other in job.torch_versions:
        if other == job.torch:
            continue
        from dataclasses import replace

        sibling = replace(job, torch=other, torch_requirement=f"torch=={other}")
        tc = prepare_toolchain(
            sibling,
            job.build_python,
            cache_dir=opts.cache_dir / "envs",
            runner=runner,
            log=log,
            env=opts.env,
            cuda_home=opts.cuda_home,
            with_toolkit=False,
        )
        targets.append(load_torch_target(tc.site_packages))
    return targets


def build_job(
    job: BuildJob,
    *,
    kb: Knowledge,
    opts: BuildOptions,
    backend: Backend,
    runner: Runner,
    stage: Any,
    fingerprint: str | None = None,
    compile_slot: contextlib.AbstractContextManager[Any] | None = None,
    compiler_cache: CompilerCache | None = None,
) -> list[CellResult]:
    """Build, repair, relabel and check one job; returns one result per cell it covers.

    `fingerprint` goes into the wheel's build record; `compile_slot` is held while the
    compiler runs (the scheduler's share of the machine); `compiler_cache` is ccache, or
    None for no compiler cache.
    """
    logs = opts.wheelhouse / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    run = _JobRun(job=job, log_path=logs / f"{job.id}.log")
    staging = Path(tempfile.mkdtemp(prefix=f"{job.id}.", dir=opts.cache_dir / "staging"))
    wheel: Path | None = None
    reason: str | None = None
    failure: str | None = None
    try:
        with run.log_path.open("w", encoding="utf-8") as log:
            log.write(
                f"# torch-buildtools {__version__}: job {job.id} (cells {', '.join(job.cell_ids)})\n"
            )
            try:
                started = time.monotonic()
                stage(job.id, "env")
                toolchain = prepare_toolchain(
                    job,
                    job.build_python,
                    cache_dir=opts.cache_dir / "envs",
                    runner=runner,
                    log=log,
                    env=opts.env,
                    cuda_home=opts.cuda_home,
                    with_toolkit=backend.needs_host_toolkit,
                )
                _timed(run, "env", started)

                stage(job.id, "waiting for a compile slot")
                slot = compile_slot if compile_slot is not None else contextlib.nullcontext()
                with slot:
                    started = time.monotonic()
                    stage(job.id, "build")
                    raw = _compile(
                        job,
                        toolchain,
                        opts=opts,
                        backend=backend,
                        runner=runner,
                        log=log,
                        staging=staging,
                        compiler_cache=compiler_cache,
                    )
                _timed(run, "build", started)
                if len(raw) != 1:
                    raise BuildFailedError(f"expected one wheel, the build produced {len(raw)}")

                started = time.monotonic()
                stage(job.id, "repair")
                repaired = (
                    raw[0]
                    if backend.repairs_inside
                    else _repair(
                        job, toolchain, raw[0], staging, kb, env=opts.env, runner=runner, log=log
                    )
                )
                record = _build_record(job, toolchain, opts, fingerprint=fingerprint)
                final = relabel_wheel(
                    repaired,
                    out_dir=staging / "final",
                    local_version=job.local_version,
                    requires_dist_torch=job.requires_dist,
                    build_record=record,
                )
                _timed(run, "repair", started)

                started = time.monotonic()
                stage(job.id, "check")
                targets = _targets(job, toolchain, opts, runner, log)
                run.findings.extend(
                    check_wheel(
                        final,
                        targets=targets,
                        expect=Expectation.from_job(job, weaker_platform_tag="warning"),
                    )
                )
                _timed(run, "check", started)
                errors = [f for f in run.findings if f.severity is Severity.ERROR]
                for f in run.findings:
                    log.write(f"# finding {f.severity.value} [{f.code}] {f.message}\n")
                if errors:
                    rejected = opts.wheelhouse / "rejected"
                    rejected.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(final, rejected / final.name)
                    reason = f"{len(errors)} check error(s): " + "; ".join(
                        sorted({f.code for f in errors})
                    )
                    raise CheckFailedError(reason + f" (wheel kept in {rejected / final.name})")
                opts.wheelhouse.mkdir(parents=True, exist_ok=True)
                tmp = opts.wheelhouse / f".{final.name}.tmp"
                shutil.copy2(final, tmp)
                tmp.replace(opts.wheelhouse / final.name)
                wheel = opts.wheelhouse / final.name
            except BuildtoolsError as exc:
                reason = str(exc)
                failure = "check" if isinstance(exc, CheckFailedError) else type(exc).__name__
                log.write(f"\n# FAILED: {exc}\n")
            except Exception as exc:  # a bug must not take the other cells down
                reason = f"internal error: {exc!r}"
                failure = "internal"
                log.write("\n# INTERNAL ERROR\n" + traceback.format_exc())
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    results = []
    size = wheel.stat().st_size if wheel else None
    digest = _sha256(wheel) if wheel else None
    for cell in job.cells:
        results.append(
            CellResult(
                cell=cell.id,
                job=job.id,
                status=Status.BUILT if wheel else Status.FAILED,
                wheel=str(wheel) if wheel else None,
                sha256=digest,
                size=size,
                log=str(run.log_path),
                reason=reason,
                failure=failure,
                durations=dict(run.durations),
                findings=list(run.findings),
            )
        )
    return results


def _compile(
    job: BuildJob,
    toolchain: Toolchain,
    *,
    opts: BuildOptions,
    backend: Backend,
    runner: Runner,
    log: IO[str],
    staging: Path,
    compiler_cache: CompilerCache | None,
) -> list[Path]:
    """The backend's build of the raw wheel(s), in the job's exact environment."""
    if backend.needs_host_toolkit:
        env = job_environment(job, toolchain, opts, compiler_cache=compiler_cache)
    else:
        env = dict(opts.env)
        if opts.max_jobs is not None:
            env["MAX_JOBS"] = str(opts.max_jobs)
        if compiler_cache is not None:  # the container mounts the job's cache
            directory = compiler_cache.dir_for(job)
            directory.mkdir(parents=True, exist_ok=True)
            env["BUILDTOOLS_JOB_CCACHE_DIR"] = str(directory)
    log.write(
        "# job environment: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(job.env)) + "\n"
    )
    if compiler_cache is not None:
        log.write(
            f"# compiler cache: ccache {compiler_cache.program}, "
            f"CCACHE_DIR={compiler_cache.dir_for(job)}\n"
        )
    return backend.build_raw(
        job,
        toolchain,
        project_dir=opts.project_dir,
        out_dir=staging / "raw",
        build_dir=build_tree(job, toolchain, opts.project_dir, env, opts.cache_dir),
        env=env,
        runner=runner,
        log=log,
    )


def _repair(
    job: BuildJob,
    toolchain: Toolchain,
    raw: Path,
    staging: Path,
    kb: Knowledge,
    *,
    env: Mapping[str, str],
    runner: Runner,
    log: IO[str],
) -> Path:
    """Repair at the promised tag when the host allows it, else the best it allows.

    A weaker tag is not an error here: the platform-tag check reports it (a warning for
    local builds, where the manylinux image is not used).
    """
    return repair_against_torch(
        raw,
        dest_dir=staging / "repaired",
        site_packages=toolchain.site_packages,
        promised=job.platform_tag,
        never_bundle=kb.never_bundle,
        policy=job.repair_command if job.repair == "command" else job.repair,
        user_excludes=job.repair_excludes,
        runner=runner,
        env=env,
        log=log,
    )


def _build_record(
    job: BuildJob, toolchain: Toolchain, opts: BuildOptions, *, fingerprint: str | None = None
) -> dict[str, object]:
    accel = Accelerator.parse(job.accelerator)
    record = make_build_record(
        torch=toolchain.torch_version,
        accelerator=job.accelerator,
        cxx11_abi=toolchain.cxx11_abi,
        cuda=toolchain.cuda_version if accel.kind == "cuda" else None,
        hip=toolchain.hip_version if accel.kind == "rocm" else None,
        arch_list=job.toolkit.arch_list if job.toolkit else None,
        python=toolchain.python_version,
        abi=job.abi,
        torch_requirement=job.requires_dist,
        fingerprint=fingerprint,
        cells=job.cell_ids,
    )
    record["source_fingerprint"] = source_fingerprint(opts.project_dir)
    record["job"] = job.id
    record["torch_versions"] = list(job.torch_versions)
    record["platform"] = job.platform
    record["promised_platform_tag"] = job.platform_tag
    return record


def _requested_max_jobs(plan: Plan, opts: BuildOptions) -> int | None:
    """MAX_JOBS someone asked for: --max-jobs, else the host's MAX_JOBS, else the matrix's."""
    if opts.max_jobs is not None:
        return opts.max_jobs
    for value in (opts.env.get("MAX_JOBS"), *(j.env_dict.get("MAX_JOBS") for j in plan.jobs)):
        if value and value.isdigit() and int(value) > 0:
            return int(value)
    return None


def _compiler_cache(
    opts: BuildOptions, plan: Plan, report_note: Callable[[str], None]
) -> CompilerCache | None:
    """ccache when wanted and installed (a note says so when it is wanted but missing)."""
    if not opts.ccache or not any(j.ccache for j in plan.jobs):
        return None
    program = find_ccache(opts.env)
    if program is None:
        report_note(f"ccache is not installed, so compiles are not cached; {CCACHE_INSTALL_HINT}")
        return None
    cache = CompilerCache(program=program, root=ccache_root(opts.cache_dir, opts.env))
    make_masquerade(cache)
    return cache


def _timings_path(opts: BuildOptions) -> Path:
    return opts.cache_dir / "timings.json"


def _read_timings(opts: BuildOptions) -> dict[str, float]:
    try:
        data = json.loads(_timings_path(opts).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def build_plan(
    plan: Plan,
    *,
    kb: Knowledge,
    opts: BuildOptions,
    runner: Runner | None = None,
    backend: Backend | None = None,
    out: TextIO,
    fingerprints: Mapping[str, str | None] | None = None,
) -> RunReport:
    """Run every job of the plan; one failing job never stops the others (unless fail_fast).

    A job whose fingerprint is on a wheel of the wheelhouse or of `opts.index_site` is
    skipped (`skipped-unchanged`) unless `opts.force`. The others run concurrently within
    the machine's compile budget (`scheduler.plan_slots`). `fingerprints` (job id →
    fingerprint) replaces their computation (tests).
    """
    runner = runner or SubprocessRunner()
    backend = backend or LocalBackend()
    (opts.cache_dir / "staging").mkdir(parents=True, exist_ok=True)
    logs = opts.wheelhouse / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    report = RunReport(
        matrix=opts.matrix,
        profile=plan.profile,
        backend=backend.name,
        started=time.time(),
        reproduce=opts.reproduce,
    )
    for removed in plan.removed:
        report.cells.append(
            CellResult(
                cell=removed.cell.id,
                job="-",
                status=Status.EXCLUDED_BY_COMPAT,
                reason=removed.reason,
            )
        )
    if fingerprints is None:
        with (logs / "fingerprints.log").open("w", encoding="utf-8") as flog:
            fingerprints = compute_fingerprints(
                plan, opts=opts, backend=backend, runner=runner, log=flog
            )
    prior = PriorWheels(opts.wheelhouse, index_site=opts.index_site)
    results: dict[str, list[CellResult]] = {}
    todo: list[BuildJob] = []
    for job in plan.jobs:
        found = None if opts.force else prior.find(fingerprints.get(job.id))
        if found is not None:
            results[job.id] = skipped_results(job, found, logs)
        else:
            todo.append(job)
    if todo:
        backend.preflight(runner)
    slots = plan_slots(
        todo,
        opts.host or host_resources(),
        max_jobs=_requested_max_jobs(plan, opts),
        concurrent=opts.jobs,
    )
    if todo:
        report.notes.append(f"scheduler: {slots.reason}")
    compiler_cache = _compiler_cache(opts, plan, report.notes.append)
    _run_jobs(
        todo,
        slots,
        results,
        kb=kb,
        opts=replace(opts, max_jobs=slots.max_jobs),
        backend=backend,
        runner=runner,
        out=out,
        fingerprints=fingerprints,
        compiler_cache=compiler_cache,
        skipped=[j.id for j in plan.jobs if j.id in results],
    )
    for job in plan.jobs:
        report.cells.extend(results.get(job.id, []))
    report.finished = time.time()
    report.write(opts.wheelhouse / "report.json")
    return report


def _run_jobs(
    todo: list[BuildJob],
    slots: Slots,
    results: dict[str, list[CellResult]],
    *,
    kb: Knowledge,
    opts: BuildOptions,
    backend: Backend,
    runner: Runner,
    out: TextIO,
    fingerprints: Mapping[str, str | None],
    compiler_cache: CompilerCache | None,
    skipped: list[str],
) -> None:
    """Build `todo` with `slots.workers` threads, `slots.concurrent` compiling at once."""
    if hasattr(backend, "max_jobs"):
        # the docker backend passes MAX_JOBS into its containers: the scheduler's share
        setattr(backend, "max_jobs", slots.max_jobs)  # noqa: B010
    timings = _read_timings(opts)
    compile_slots = threading.BoundedSemaphore(slots.concurrent)
    stop = threading.Event()
    lock = threading.Lock()
    ids = [j.id for j in todo]
    with make_progress(
        [*skipped, *ids],
        out=out,
        live=opts.live,
        expected={i: timings[i] for i in ids if i in timings},
        concurrent=slots.concurrent,
    ) as progress:
        for job_id in skipped:
            progress.finish(job_id, Status.SKIPPED_UNCHANGED.value, counted=False)

        def one(job: BuildJob) -> None:
            if stop.is_set():
                progress.finish(job.id, "not started (--fail-fast)", counted=False)
                return
            started = time.monotonic()
            cells = build_job(
                job,
                kb=kb,
                opts=opts,
                backend=backend,
                runner=runner,
                stage=progress.stage,
                fingerprint=fingerprints.get(job.id),
                compile_slot=compile_slots,
                compiler_cache=compiler_cache if job.ccache else None,
            )
            with lock:
                results[job.id] = cells
                if cells[0].status is Status.BUILT:
                    timings[job.id] = round(time.monotonic() - started, 1)
            status = cells[0].status.value
            progress.finish(
                job.id, status if status != "failed" else f"FAILED (log: {cells[0].log})"
            )
            if opts.fail_fast and cells[0].status is Status.FAILED:
                stop.set()

        if slots.workers <= 1:
            for job in todo:
                one(job)
        else:
            with ThreadPoolExecutor(max_workers=slots.workers) as pool:
                for future in [pool.submit(one, job) for job in todo]:
                    future.result()
    if todo:
        write_atomic(_timings_path(opts), json.dumps(timings, indent=1, sort_keys=True) + "\n")


def add_build_parser(sub: Any) -> None:
    from .cli import _add_plan_args

    p = sub.add_parser("build", help="build, repair and check the wheels of the plan")
    _add_plan_args(p)
    p.add_argument(
        "--project", type=Path, default=None, help="extension source dir (overrides project.path)"
    )
    p.add_argument("--wheelhouse", type=Path, default=Path("wheelhouse"))
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="envs and build trees (default: ~/.cache/torch-buildtools)",
    )
    p.add_argument(
        "--backend",
        choices=("local", "docker"),
        default="local",
        help="where the compiler runs: local venvs, or cibuildwheel in builder images",
    )
    p.add_argument(
        "--offline",
        action="store_true",
        help="docker: prefetch every wheel on the host, build with the network off",
    )
    p.add_argument(
        "--base-image",
        default=None,
        metavar="IMAGE",
        help="docker: build every job FROM this image instead of the plan's (e.g. a "
        "local base from docker/local-base.sh where no registry is reachable)",
    )
    p.add_argument("--fail-fast", action="store_true", help="stop at the first failed job")
    p.add_argument(
        "--max-jobs",
        type=int,
        default=None,
        help="compiler processes per job (MAX_JOBS; default: the machine's cores split "
        "between the jobs that run at once)",
    )
    p.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=None,
        help="jobs that compile at once (default: as many as cores and memory allow)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="rebuild every job, even one whose wheel (same fingerprint) is already built",
    )
    p.add_argument(
        "--index-site",
        type=Path,
        default=None,
        metavar="DIR",
        help="a published site (with index.json): a job whose fingerprint it lists is skipped",
    )
    p.add_argument(
        "--no-ccache",
        action="store_true",
        help="no compiler cache (default: ccache when installed; matrix build.ccache: false)",
    )
    p.add_argument(
        "--cuda-home",
        type=Path,
        default=None,
        help="a system CUDA to use when it matches torch's CUDA",
    )
    p.add_argument("--no-live", action="store_true", help="plain progress lines even in a terminal")
    p.set_defaults(handler=cmd_build)


def reproduce_command(args: argparse.Namespace) -> str:
    """The nox command that runs this build again (what a CI job for a cell runs)."""
    argv = ["nox", "-s", "build", "--"]
    if args.matrix:
        argv += ["--matrix", str(args.matrix)]
    if args.profile:
        argv += ["--profile", args.profile]
    argv += [a for g in args.only for a in ("--only", g)]
    argv += [a for t in args.torch_axis or () for a in ("--torch", t)]
    if args.backend != "local":
        argv += ["--backend", args.backend]
    if args.offline:
        argv += ["--offline"]
    if args.base_image:
        argv += ["--base-image", args.base_image]
    if getattr(args, "project", None):
        argv += ["--project", str(args.project)]
    return shlex.join(argv if len(argv) > 4 else argv[:3])


def cmd_build(args: argparse.Namespace, out: TextIO) -> int:
    from .cli import make_plan

    result, project_dir = make_plan(args)
    env = dict(os.environ)
    if args.project is not None:
        project_dir = args.project.resolve()
    if not project_dir.is_dir():
        raise BuildFailedError(
            f"project directory {project_dir} does not exist; set project.path in matrix.yaml or pass --project"
        )
    opts = BuildOptions(
        project_dir=project_dir,
        wheelhouse=args.wheelhouse.resolve(),
        cache_dir=(args.cache_dir or default_cache_dir(env)).resolve(),
        env=env,
        fail_fast=args.fail_fast,
        max_jobs=args.max_jobs,
        cuda_home=args.cuda_home or (Path(env["CUDA_HOME"]) if env.get("CUDA_HOME") else None),
        live=not args.no_live,
        reproduce=reproduce_command(args),
        matrix=str(args.matrix or "matrix.yaml"),
        force=args.force,
        index_site=args.index_site.resolve() if args.index_site else None,
        ccache=not args.no_ccache,
        jobs=args.jobs,
    )
    kb = load_knowledge()
    backend: Backend = LocalBackend()
    current = [j.id for j in result.jobs if j.torch_source == "current"]
    if args.backend != "local" and current:
        raise PlanError(
            f"{', '.join(current)}: torch: current builds against a torch on this host, so only "
            "with --backend local; select the other cells with --only for the docker backend"
        )
    if args.backend == "docker":
        from .dockerbackend import DockerBackend

        backend = DockerBackend(
            kb=kb,
            cache_dir=opts.cache_dir,
            env=env,
            offline=args.offline,
            max_jobs=args.max_jobs,
            base_image=args.base_image,
        )
    elif args.offline or args.base_image:
        raise BuildFailedError("--offline and --base-image apply to --backend docker only")
    report = build_plan(result, kb=kb, opts=opts, backend=backend, out=out)
    report.print_table(out)
    out.write(f"report: {opts.wheelhouse / 'report.json'}\n")
    out.write(f"reproduce: {opts.reproduce}\n")
    failed = report.failed
    if failed:
        lines = "\n".join(f"  {c.cell}: {c.reason} (log: {c.log})" for c in failed)
        check_only = all(c.failure == "check" for c in failed)
        cls = CheckFailedError if check_only else BuildFailedError
        raise cls(f"{len(failed)} cell(s) failed:\n{lines}")
    return 0
