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
import hashlib
import os
import shlex
import shutil
import tempfile
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol, TextIO

from . import __version__
from .checks import Expectation, TorchTarget, check_wheel, load_torch_target
from .errors import BuildFailedError, BuildtoolsError, CheckFailedError, PlanError
from .fingerprint import source_fingerprint
from .knowledge import Knowledge, load_knowledge
from .model import Accelerator, BuildJob, Finding, Severity
from .planner import Plan
from .progress import make_progress
from .repair import repair_against_torch
from .report import CellResult, RunReport, Status
from .runner import Runner, SubprocessRunner
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


def job_environment(job: BuildJob, toolchain: Toolchain, opts: BuildOptions) -> dict[str, str]:
    """The exact environment of a job's build: host env + toolchain + job vars + MAX_JOBS."""
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
    if "MAX_JOBS" not in env:
        env["MAX_JOBS"] = str(opts.max_jobs or os.cpu_count() or 1)
    env["PYTHONNOUSERSITE"] = "1"
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
) -> list[CellResult]:
    """Build, repair, relabel and check one job; returns one result per cell it covers."""
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

                started = time.monotonic()
                stage(job.id, "build")
                env = (
                    job_environment(job, toolchain, opts)
                    if backend.needs_host_toolkit
                    else dict(opts.env)
                )
                log.write(
                    "# job environment: "
                    + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(job.env))
                    + "\n"
                )
                raw = backend.build_raw(
                    job,
                    toolchain,
                    project_dir=opts.project_dir,
                    out_dir=staging / "raw",
                    build_dir=build_tree(job, toolchain, opts.project_dir, env, opts.cache_dir),
                    env=env,
                    runner=runner,
                    log=log,
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
                record = _build_record(job, toolchain, opts)
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


def _build_record(job: BuildJob, toolchain: Toolchain, opts: BuildOptions) -> dict[str, object]:
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
        fingerprint=source_fingerprint(opts.project_dir),
        cells=job.cell_ids,
    )
    record["job"] = job.id
    record["torch_versions"] = list(job.torch_versions)
    record["platform"] = job.platform
    record["promised_platform_tag"] = job.platform_tag
    return record


def build_plan(
    plan: Plan,
    *,
    kb: Knowledge,
    opts: BuildOptions,
    runner: Runner | None = None,
    backend: Backend | None = None,
    out: TextIO,
) -> RunReport:
    """Run every job of the plan; one failing job never stops the others (unless fail_fast)."""
    runner = runner or SubprocessRunner()
    backend = backend or LocalBackend()
    backend.preflight(runner)
    (opts.cache_dir / "staging").mkdir(parents=True, exist_ok=True)
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
    with make_progress([j.id for j in plan.jobs], out=out, live=opts.live) as progress:
        for job in plan.jobs:
            results = build_job(
                job, kb=kb, opts=opts, backend=backend, runner=runner, stage=progress.stage
            )
            report.cells.extend(results)
            status = results[0].status.value
            progress.finish(
                job.id, status if status != "failed" else f"FAILED (log: {results[0].log})"
            )
            if opts.fail_fast and results[0].status is Status.FAILED:
                break
    report.finished = time.time()
    report.write(opts.wheelhouse / "report.json")
    return report


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
    p.add_argument("--max-jobs", type=int, default=None, help="compile parallelism (MAX_JOBS)")
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
    return shlex.join(argv)


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
