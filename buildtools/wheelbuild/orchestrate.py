"""`buildtools build`: plan → toolchain → raw wheel → repair → relabel → check → wheelhouse.

The executor decides nothing: every value comes from the BuildJob. A failed cell never
removes or overwrites a good wheel: work happens in a staging directory and only a wheel
whose checks passed is moved (atomically) into the wheelhouse.
"""

from __future__ import annotations

from ..backends.base import (
    JOB_CACHE_TOOL_VAR,
    JOB_CCACHE_VAR,
    NVCC_THREADS_VAR,
    Backend,
    nvcc_keep_env,
)
from ..backends.local import object_dir
from ..context import RunContext
from .environment import build_tree, job_environment, source_date_epoch
from .options import BuildOptions, BuildSession

__all__ = ["Backend", "BuildOptions", "build_plan"]

import contextlib
import shlex
import shutil
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Literal, TextIO

from .. import __version__
from ..errors import BuildFailedError, BuildtoolsError, CheckFailedError
from ..files import copy_atomic, describe_os_error, sha256_file
from ..knowledge import Knowledge
from ..locks import file_lock
from ..model import BuildJob, BuildRecord, Finding, Severity
from ..planner import Plan
from ..process import ProcessRunner, SubprocessRunner
from ..toolchain.envs import Toolchain
from ..wheel.checks import Expectation, check_wheel
from ..wheel.meta import relabel_wheel
from ..wheel.repair import RepairTarget, repair_against_torch
from .build_report import CellResult, RunReport, Status
from .compilercache import (
    bypassing_compilers,
    cache_holds_entries,
    job_tool,
    sccache_server,
    select_compiler_cache,
)
from .deviceunits import WrapSummary, container_wrap_env, read_wrap_log, wrap_env
from .distribute import DistributingBackend, plan_distribution
from .fingerprint import scan_sources, source_fingerprint
from .incremental import PriorWheels, compute_fingerprints, skipped_results
from .progress import make_progress
from .scheduler import Slots, device_sources, host_resources, nvcc_threads, plan_slots
from .timings import JobTiming, read_timings, update_timings
from .window import build_toolchain, window_targets

# A local host's glibc decides the best tag; a weaker one than promised is reported, not
# fatal (the docker backend builds in the promised image).
WEAKER_PLATFORM_TAG: Literal["error", "warning"] = "warning"


@dataclass
class _JobRun:
    job: BuildJob
    log_path: Path
    durations: dict[str, float] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    units: WrapSummary | None = None  # what the nvcc wrapper did
    slowest_units: list[tuple[str, float]] = field(default_factory=list)  # from .ninja_log


def _timed(run: _JobRun, stage: str, started: float) -> None:
    run.durations[stage] = run.durations.get(stage, 0.0) + time.monotonic() - started


def build_job(
    job: BuildJob,
    session: BuildSession,
    *,
    stage: Any,
    fingerprint: str | None = None,
    compile_slot: contextlib.AbstractContextManager[Any] | None = None,
) -> list[CellResult]:
    """Build, repair, relabel and check one job; returns one result per cell it covers.

    `fingerprint` goes into the wheel's build record; `compile_slot` is held while the
    compiler runs (the scheduler's share of the machine).
    """
    opts = session.opts
    logs = opts.wheelhouse / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    # two runs of the same job into one wheelhouse would share its log and its wheel: the
    # second waits, then builds (or finds the first one's wheel unchanged next time)
    with file_lock(
        logs / f".{job.id}.lock",
        waiting=f"{job.id}: another buildtools run is building it into {opts.wheelhouse}; "
        "waiting for it to finish",
    ):
        return _build_job_locked(
            job,
            session,
            stage=stage,
            fingerprint=fingerprint,
            compile_slot=compile_slot,
            logs=logs,
        )


def _build_job_locked(
    job: BuildJob,
    session: BuildSession,
    *,
    stage: Any,
    fingerprint: str | None,
    compile_slot: contextlib.AbstractContextManager[Any] | None,
    logs: Path,
) -> list[CellResult]:
    kb, opts, backend, runner = session.kb, session.opts, session.backend, session.runner
    run = _JobRun(job=job, log_path=logs / f"{job.id}.log")
    job_started = time.monotonic()
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
                run.job, toolchain = build_toolchain(  # a stable window: a torch it can have
                    job,
                    kb,
                    opts,
                    with_toolkit=backend.needs_host_toolkit,
                    ctx=RunContext(processes=runner, env=opts.env, log=log),
                )
                job = run.job
                _timed(run, "env", started)

                stage(job.id, "waiting for a compile slot")
                slot = compile_slot if compile_slot is not None else contextlib.nullcontext()
                with slot:
                    started = time.monotonic()
                    stage(job.id, "build")
                    raw = _compile(
                        run,
                        toolchain,
                        session=session,
                        ctx=RunContext(processes=runner, env=opts.env, log=log),
                        staging=staging,
                    )
                _timed(run, "build", started)
                run.units = read_wrap_log(staging / "devicewrap.jsonl")
                log.writelines(f"# {line}\n" for line in (run.units.lines() if run.units else ()))
                if len(raw) != 1:
                    raise BuildFailedError(f"expected one wheel, the build produced {len(raw)}")
                if raw[0].name.endswith("-none-any.whl"):
                    # nothing was compiled: auditwheel would only say "not a platform wheel"
                    raise BuildFailedError(
                        f"the build produced a pure-Python wheel ({raw[0].name}): the project "
                        "compiled no extension for this cell. Its setup.py may build one only "
                        "when a variable is set (`buildtools init` lists those it reads; set "
                        "them in project.build_env)"
                    )

                started = time.monotonic()
                stage(job.id, "repair")
                repaired = (
                    raw[0]
                    if backend.repairs_inside
                    else _repair(
                        job,
                        toolchain,
                        raw[0],
                        staging,
                        kb,
                        ctx=RunContext(processes=runner, env=opts.env, log=log),
                    )
                )
                record = BuildRecord.for_job(
                    job,
                    torch=toolchain.torch.version,
                    cxx11_abi=bool(toolchain.torch.cxx11_abi),
                    python=toolchain.python_version,
                    device_runtime=(
                        toolchain.torch.hip
                        if job.accelerator.kind == "rocm"
                        else toolchain.torch.cuda
                    ),
                    fingerprint=fingerprint,
                    source_fingerprint=source_fingerprint(opts.project_dir),
                )
                # how this build judged a weaker tag, so a standalone `check` agrees with it
                record = replace(
                    record,
                    weaker_platform_tag=WEAKER_PLATFORM_TAG,
                    arch_flags_replaced=run.units.replaced
                    if run.units and run.units.replaced
                    else None,
                )
                final = relabel_wheel(
                    repaired,
                    out_dir=staging / "final",
                    local_version=job.local_version,
                    requires_dist_torch=job.requires_dist,
                    # how fast it compiled (nvcc --threads, MAX_JOBS) follows the machine's
                    # cores and stays out of the wheel: timings.json and the report keep it
                    build_record=record.to_json(),
                    source_date_epoch=source_date_epoch(opts.env),
                )
                _timed(run, "repair", started)

                started = time.monotonic()
                stage(job.id, "check")
                targets = window_targets(toolchain)
                run.findings.extend(
                    check_wheel(
                        final,
                        targets=targets,
                        # what `buildtools check` reads back: the record, the matrix's limits
                        expect=Expectation.of(record, settings=opts.settings, job=job),
                        knowledge=kb,  # the never_bundle list repair excluded
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
                copy_atomic(final, opts.wheelhouse / final.name)
                wheel = opts.wheelhouse / final.name
            except BuildtoolsError as exc:
                reason = str(exc)
                failure = "check" if isinstance(exc, CheckFailedError) else type(exc).__name__
                log.write(f"\n# FAILED: {exc}\n")
            except OSError as exc:  # a full disk, a read-only wheelhouse: the cell fails, named
                reason = describe_os_error(exc)
                failure = "filesystem"
                log.write(f"\n# FAILED: {reason}\n")
            except Exception as exc:  # a bug must not take the other cells down
                reason = f"internal error: {exc!r}"
                failure = "internal"
                log.write("\n# INTERNAL ERROR\n" + traceback.format_exc())
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    elapsed = time.monotonic() - job_started
    results = []
    st = wheel.stat() if wheel else None
    digest = sha256_file(wheel) if wheel else None
    for cell in job.cells:
        results.append(
            CellResult(
                cell=cell.id,
                job=job.id,
                status=Status.BUILT if wheel else Status.FAILED,
                wheel=str(wheel) if wheel else None,
                sha256=digest,
                size=st.st_size if st else None,
                mtime_ns=st.st_mtime_ns if st else None,
                log=str(run.log_path),
                reason=reason,
                failure=failure,
                durations=dict(run.durations),
                elapsed=elapsed,
                findings=list(run.findings),
                units=run.units.to_json() if run.units else None,
                # the units ninja ran (its log), else those the nvcc wrapper timed
                slowest_units=run.slowest_units
                or list(run.units.slowest[:10] if run.units else ()),
            )
        )
    return results


def _compile(
    run: _JobRun, toolchain: Toolchain, *, session: BuildSession, ctx: RunContext, staging: Path
) -> list[Path]:
    """The backend's build of the raw wheel(s), in the job's exact environment, followed by
    `session.watch` (the slowest units it ran go to `run`)."""
    job, opts, backend = run.job, session.opts, session.backend
    compiler_cache = session.compiler_cache
    log = ctx.stream
    notes: list[str] = []
    if backend.needs_host_toolkit:
        env = job_environment(job, toolchain, opts, compiler_cache=compiler_cache, notes=notes)
        if job.toolkit is not None and job.toolkit.kind == "cuda":
            # nvcc's intermediate files by name, not by pid (reproducible); removed with staging
            (staging / "nvcc").mkdir(parents=True, exist_ok=True)
            env.update(nvcc_keep_env(staging / "nvcc", env, project_dir=opts.project_dir))
    else:
        env = dict(opts.env)
        if opts.max_jobs is not None:
            env["MAX_JOBS"] = str(opts.max_jobs)
        if opts.nvcc_threads > 1:  # the container's nvcc gets them (NVCC_APPEND_FLAGS)
            env[NVCC_THREADS_VAR] = str(opts.nvcc_threads)
        if compiler_cache is not None:  # the container mounts the job's cache
            directory = compiler_cache.dir_for(job)
            directory.mkdir(parents=True, exist_ok=True)
            env[JOB_CCACHE_VAR] = str(directory)
            env[JOB_CACHE_TOOL_VAR] = compiler_cache.tool
        env.update(container_wrap_env(job, env, staging=staging, opts=opts))
    log.write(
        "# job environment: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(job.env)) + "\n"
    )
    log.writelines(f"# {note}\n" for note in notes)
    if compiler_cache is not None:
        log.write(
            f"# compiler cache: {compiler_cache.tool} {compiler_cache.program}, "
            f"cache {compiler_cache.dir_for(job)}\n"
        )
    build_dir = build_tree(job, toolchain, opts.project_dir, env, opts.cache_dir)
    # the host's compile: its objects (and ninja, which `session.watch` finds in /proc)
    where = object_dir(opts.project_dir, build_dir) if backend.needs_host_toolkit else None
    if where is not None:  # nvcc behind the wrapper: arch flags, unit reuse
        env.update(wrap_env(job, toolchain, env, staging=staging, opts=opts, tree=build_dir))
    # two runs building the same job share its build tree: ninja must not run twice in it
    with (
        file_lock(
            build_dir.with_name(build_dir.name + ".lock"),
            waiting=f"{job.id}: another build uses {build_dir}; waiting for it to finish",
        ),
        sccache_server(
            compiler_cache if backend.needs_host_toolkit else None,
            job,
            env=env,
            ctx=ctx,
            report=lambda line: _log_line(log, line),
        ),
        session.watch(job.id, run.log_path, project_dir=opts.project_dir, units_dir=where) as units,
    ):
        raw = backend.build_raw(
            job,
            toolchain,
            project_dir=opts.project_dir,
            out_dir=staging / "raw",
            build_dir=build_dir,
            ctx=ctx.with_env(env),
        )
    run.slowest_units = units.slowest(10) if units else []
    return raw


def _log_line(log: IO[str], line: str) -> None:
    log.write(f"# {line}\n")


def _repair(
    job: BuildJob,
    toolchain: Toolchain,
    raw: Path,
    staging: Path,
    kb: Knowledge,
    *,
    ctx: RunContext,
) -> Path:
    """Repair at the promised tag when the host allows it, else the best it allows.

    A weaker tag is not an error here: the platform-tag check reports it (a warning for
    local builds, where the manylinux image is not used).
    """
    return repair_against_torch(
        raw,
        dest_dir=staging / "repaired",
        target=RepairTarget(
            site_packages=toolchain.site_packages,
            promised=job.platform_tag,
            never_bundle=kb.never_bundle,
        ),
        repair=job.repair,
        ctx=ctx,
    )


def _requested_max_jobs(plan: Plan, opts: BuildOptions) -> int | None:
    """MAX_JOBS someone asked for: --max-jobs, else the host's MAX_JOBS, else the matrix's."""
    if opts.max_jobs is not None:
        return opts.max_jobs
    for value in (opts.env.get("MAX_JOBS"), *(j.env_dict.get("MAX_JOBS") for j in plan.jobs)):
        if value and value.isdigit() and int(value) > 0:
            return int(value)
    return None


def build_plan(
    plan: Plan,
    *,
    kb: Knowledge,
    opts: BuildOptions,
    runner: ProcessRunner | None = None,
    backend: Backend,
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
    (opts.cache_dir / "staging").mkdir(parents=True, exist_ok=True)
    logs = opts.wheelhouse / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    scan = scan_sources(opts.project_dir)
    for rel, why in scan.skipped:
        out.write(f"note: {rel} is {why}: not part of the build's sources (skipped)\n")
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
    note = report.notes.append
    dist = plan_distribution(opts, runner=runner, note=note) if todo else None
    host = opts.host or host_resources()
    slots = plan_slots(
        todo,
        dist.sized(host) if dist else host,
        max_jobs=_requested_max_jobs(plan, opts),
        concurrent=opts.jobs,
    )
    if todo:
        report.notes.append(f"scheduler: {slots.reason}")
    cu_files = device_sources(scan.files)
    threads = {j.id: nvcc_threads(j, slots, device_sources=cu_files) for j in todo}
    for job_id, n in threads.items():
        if n > 1:
            report.notes.append(f"scheduler: {job_id}: nvcc --threads {n}")
    # the compiler caches the jobs that will compile want (none when all are unchanged; a
    # distributed build compiles through each job's own sccache instead)
    caches = {
        tool: select_compiler_cache(
            tool, cache_dir=opts.cache_dir, env=opts.env, note=report.notes.append
        )
        for tool in sorted({t for t in (job_tool(j, opts.compiler_cache) for j in todo) if t})
        if not dist
    }
    bypass = bypassing_compilers(opts.env) if backend.needs_host_toolkit else None
    if bypass and (dist or any(caches.values())):
        note(bypass)
    session = BuildSession(
        kb=kb,
        opts=replace(opts, max_jobs=slots.max_jobs),
        backend=DistributingBackend(backend, dist, opts=opts) if dist else backend,
        runner=runner,
        compiler_caches={t: c for t, c in caches.items() if c is not None},
    )
    skipped = [j.id for j in plan.jobs if j.id in results]
    results.update(
        _run_jobs(
            todo,
            slots,
            session,
            out=out,
            fingerprints=fingerprints,
            skipped=skipped,
            threads=threads,
        )
    )
    for job in plan.jobs:
        report.cells.extend(results.get(job.id, []))
    if dist:
        dist.report(report.cells, note)
    report.finished = time.time()
    report.write(opts.wheelhouse / "report.json")
    return report


def _run_jobs(
    todo: list[BuildJob],
    slots: Slots,
    session: BuildSession,
    *,
    out: TextIO,
    fingerprints: Mapping[str, str | None],
    skipped: list[str],
    threads: Mapping[str, int],
) -> dict[str, list[CellResult]]:
    """Build `todo` with `slots.workers` threads, `slots.concurrent` compiling at once."""
    opts, backend = session.opts, session.backend
    results: dict[str, list[CellResult]] = {}
    if hasattr(backend, "max_jobs"):
        # the docker backend passes MAX_JOBS into its containers: the scheduler's share
        setattr(backend, "max_jobs", slots.max_jobs)  # noqa: B010
    timings = read_timings(opts.cache_dir, project=opts.project_dir)
    built: dict[str, JobTiming] = {}
    compile_slots = threading.BoundedSemaphore(slots.concurrent)
    stop = threading.Event()
    lock = threading.Lock()
    ids = [j.id for j in todo]
    with make_progress(
        [*skipped, *ids],
        out=out,
        live=opts.live,
        expected={i: timings[i].seconds for i in ids if i in timings},
        concurrent=slots.concurrent,
        interval=opts.progress_interval,
    ) as progress:
        for job_id in skipped:
            progress.finish(job_id, Status.SKIPPED_UNCHANGED.value, counted=False)

        def one(job: BuildJob) -> None:
            if stop.is_set():
                progress.finish(job.id, "not started (--fail-fast)", counted=False)
                return
            started = time.monotonic()
            cache = session.cache_for(job)
            warm = cache is not None and cache_holds_entries(cache.dir_for(job))
            cells = build_job(
                job,
                replace(
                    session,
                    opts=replace(opts, nvcc_threads=threads.get(job.id, 1)),
                    compiler_cache=cache,
                    watch=progress.watch,
                ),
                stage=progress.stage,
                fingerprint=fingerprints.get(job.id),
                compile_slot=compile_slots,
            )
            with lock:
                results[job.id] = cells
                if cells[0].status is Status.BUILT:
                    built[job.id] = JobTiming(
                        seconds=time.monotonic() - started,
                        stages=cells[0].durations,
                        max_jobs=opts.max_jobs,
                        nvcc_threads=threads.get(job.id) if job.toolkit else None,
                        warm=warm if cache is not None else None,
                    )
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
        update_timings(opts.cache_dir, built, project=opts.project_dir)
    return results
