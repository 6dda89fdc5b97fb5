"""`buildtools smoke`: install each wheel the way users get it and prove it works.

The import runs in a child process: a duplicate libtorch aborts the process rather than
raising, so only a parent can observe it and report it.

For every wheel (from wheelhouse directories, wheel files, or a find-links page, so the
published artefact itself is tested) whose accelerator matches the runner:

1. **env**: a fresh venv with exactly the torch of the wheel's cell. Either the runner's
   own torch (`system`: `--system-site-packages`, plus a `.pth` to torch's site-packages
   when the runner's Python is itself a venv; what an offline GPU runner does), or a
   torch installed from an index into a cached torch-only env (`index`). The per-wheel
   venv lies over the torch env, so a wheel never pollutes the torch it is tested with.
   On a runner declared `cuda`/`rocm`, nothing is installed unless torch sees a GPU
   (`device.check_device`: status `no-device`), and a wheel whose device code does not run
   on that GPU is `not-covered` (`device.device_coverage`), both before its install.
2. **install**: `pip install` of the wheel file, or `pip install -f PAGE name==version`.
3. **import** (child process, timeout): import torch and the extension's packages, then
   each compiled module of the wheel by its own name (`modules`: a package that swallows
   its module's ImportError would hide it), then read /proc/self/maps: two distinct files
   of one libc10/libtorch library (the auditwheel hash ignored) is a duplicate libtorch.
4. **smoke** (child process, timeout): the project's smoke command (`project.smoke`),
   run from an empty directory with script paths made absolute, so it exercises the
   installed package and not the source tree; told the runner's device and where to write
   the cases it ran (`cases`).

A crash is an outcome, not an exception: SIGABRT (the duplicate-libtorch `Tried to
register multiple backend fallbacks … Conjugate`), SIGSEGV, a hang, a non-zero exit of
the smoke command and an import failure are each classified and reported with the tail
of their output.
"""

from __future__ import annotations

__all__ = ["SmokeOptions", "run_smoke", "smoke_argv"]

import json
import platform
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

from packaging.utils import canonicalize_name

from ..context import RunContext
from ..errors import UnsafeArtefactError
from ..model import Accelerator
from ..process import ProcessRunner
from ..toolchain.venv import create_venv
from ..torchinstall import TorchInstall
from ..untrusted import printable
from ..wheel.checks.elves import WheelElf, extract_elves
from ..wheel.meta import WheelName
from .cases import CASES_ENV, DEVICE_ENV, CasesReport, read_cases
from .child import CHILD_SCRIPT, ChildReport, Stage, classify, output_tail, parse_child_report
from .gpu import DeviceCheck, DeviceKind, DriverFacts, check_device, device_coverage
from .gpu import read_driver_facts as _read_driver_facts
from .modules import ModuleOutcome, child_spec, compiled_modules, load_outcomes
from .smoke_report import RunnerInfo, SmokeReport, SmokeResult, SmokeStatus
from .smokeenvs import (
    SmokeOptions,
    StageLog,
    child_env,
    describe_install,
    describe_torch,
    index_torch_env,
    pip_targets_other_pythons,
    probe_torch,
    site_packages,
    smoke_argv,
    torch_matches,
)
from .wheelsources import SmokeTarget, WheelSource, plan_targets


def _machine_driver(kind: DeviceKind, runner: ProcessRunner, opts: SmokeOptions) -> DriverFacts:
    if opts.driver is not None:
        return opts.driver

    def read_text(path: str) -> str | None:
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def list_dev() -> list[str]:
        try:
            return [p.name for p in Path("/dev").iterdir()]
        except OSError:
            return []

    return _read_driver_facts(
        kind,
        runner=runner,
        env=child_env(opts.env),
        which=lambda name: shutil.which(name, path=opts.env.get("PATH")),
        read_text=read_text,
        list_dev=list_dev,
    )


def _device_kind(accelerator: str) -> DeviceKind | None:
    return "cuda" if accelerator == "cuda" else "rocm" if accelerator == "rocm" else None


class _Wheel:
    """One wheel's smoke in progress: its log, its work directory, how to report it."""

    def __init__(self, number: int, target: SmokeTarget, opts: SmokeOptions) -> None:
        self.target = target
        self.started = time.monotonic()
        self.log = StageLog(opts.out_dir / "logs" / f"{number:02d}-{target.source.name}.log")
        root = opts.cache_dir / "smoke" / "work"
        root.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="smoke-", dir=root))
        self.torch_source = "system"
        self.torch: str | None = None  # the torch the wheel ran on (torch.__version__)
        self.modules: tuple[ModuleOutcome, ...] = ()
        self.device_code: str | None = None

    def result(
        self,
        stage: Stage,
        child: ChildReport | None = None,
        *,
        status: SmokeStatus | None = None,
        diagnosis: str | None = None,
        findings: Sequence[str] = (),
        cases: CasesReport | None = None,
        cases_note: str | None = None,
    ) -> SmokeResult:
        got_status, got_diagnosis, got_findings = classify(
            stage, child=child, bundled=self.target.bundled
        )
        t, src = self.target, self.target.source
        return SmokeResult(
            wheel=src.name,
            sha256=t.sha256,
            cell=t.cell,
            covers=t.covers,
            status=status or got_status,
            diagnosis=diagnosis if status is not None else got_diagnosis,
            output=output_tail(stage.output),
            duration=time.monotonic() - self.started,
            stage=stage.name,
            source=src.origin,
            torch_source=self.torch_source,
            torch=self.torch,
            findings=(*got_findings, *findings),
            log=str(self.log.path),
            modules=self.modules,
            device_code=self.device_code,
            cases=cases,
            cases_note=cases_note,
        )


def _elves(w: _Wheel) -> list[WheelElf] | Stage:
    try:
        return extract_elves(w.target.source.path, w.work / "elves")
    except (UnsafeArtefactError, OSError, ValueError) as exc:
        return Stage(name="install", returncode=1, output=f"ERROR: cannot read the wheel: {exc}\n")


@dataclass(frozen=True, kw_only=True)
class _Machine:
    """The machine the smoke runs on: its Python, torch, GPU driver and declared accelerator."""

    python: str
    torch: TorchInstall | None
    driver: DriverFacts | None
    accelerator: str


def _smoke_one(  # noqa: PLR0912, PLR0915
    number: int,
    target: SmokeTarget,
    machine: _Machine,
    opts: SmokeOptions,
    runner: ProcessRunner,
    out: TextIO,
) -> SmokeResult:
    runner_python, runner_torch = machine.python, machine.torch
    driver, accelerator = machine.driver, machine.accelerator
    src = target.source
    w = _Wheel(number, target, opts)
    log = w.log
    try:
        log.note(f"smoke {src.origin} (cell {target.cell}, sha256 {target.sha256})")
        if len(target.covers) > 1:
            log.note(f"the wheel covers {', '.join(target.covers)}; testing {target.cell}")
        # 1. env
        python_xy = ".".join(runner_python.split(".")[:2])
        system_ok = (not target.recorded or torch_matches(target, runner_torch)) and (
            python_xy == target.python
        )
        device_torch = runner_torch
        if (
            opts.torch_source == "system"
            or not target.recorded
            or (opts.torch_source == "auto" and system_ok)
        ):
            if not system_ok:
                others = [c for c in target.covers if c != target.cell]
                served = f" (nor any other cell it covers: {', '.join(others)})" if others else ""
                return SmokeResult(
                    wheel=src.name,
                    sha256=target.sha256,
                    cell=target.cell,
                    covers=target.covers,
                    status=SmokeStatus.SKIPPED,
                    diagnosis=(
                        f"needs {describe_torch(target.torch, target.cuda, target.hip)} on "
                        f"Python {target.python}{served}; {opts.torch_python} has "
                        f"{describe_install(runner_torch)} on Python {python_xy}"
                    ),
                    source=src.origin,
                    torch_source="system",
                    duration=time.monotonic() - w.started,
                )
            torch_site = runner_torch.site_packages if runner_torch is not None else None
            base_python = opts.torch_python
            w.torch = runner_torch.version if runner_torch is not None else None
        else:
            w.torch_source = "index"
            got = index_torch_env(target, opts, runner, log)
            if isinstance(got, Stage):
                return w.result(got)
            base_python, torch_site, env_python, w.torch = got
            if driver is not None:  # a GPU runner: ask this torch for its devices too
                _, device_torch = probe_torch(env_python, runner, opts.env)
        kind = _device_kind(accelerator)
        elves = _elves(w)
        if isinstance(elves, Stage):
            return w.result(elves)
        carried = sorted(
            {"CUDA" if e.info.cuda else "HIP" for e in elves if e.info.has_device_code}
        )
        if not target.recorded and kind is None and carried:
            # a recorded GPU wheel is skipped on a CPU runner by its record; this one by its ELFs
            return SmokeResult(
                wheel=src.name,
                sha256=target.sha256,
                cell=target.cell,
                status=SmokeStatus.SKIPPED,
                diagnosis=f"it carries {' and '.join(carried)} device code; this runner is "
                f"{accelerator} (test it on a GPU runner)",
                source=src.origin,
                torch_source=w.torch_source,
                duration=time.monotonic() - w.started,
            )
        listed = compiled_modules(elves, python=target.python)
        # a CPU wheel runs anywhere: on a GPU runner it is tested like on any other
        gpu_wheel = (
            target.accelerator.kind != "cpu"
            if target.recorded
            else any(e.info.has_device_code for e in elves)
        )
        device_kind = kind if gpu_wheel else None
        if device_kind is not None and driver is not None:
            refused = _device_stage(w, device_kind, device_torch, driver, opts)
            if refused is not None:
                return refused
        if device_kind is not None and device_torch is not None:
            optional = frozenset(m.arcname for m in listed if m.name in opts.optional_modules)
            coverage = device_coverage(
                elves,
                device_torch.gpus,
                kind=device_kind,
                wheel_cuda=target.cuda or device_torch.cuda,
                driver_cuda=device_torch.driver_cuda,
                optional=optional,
            )
            w.device_code = coverage.detail
            log.note(f"device code: {coverage.detail}")
            if not coverage.covered:
                return w.result(
                    Stage(name="env", returncode=1, output=coverage.detail),
                    status=SmokeStatus.NOT_COVERED,
                    diagnosis=f"the wheel's device code does not run on this GPU: {coverage.detail}",
                )
        out.write(
            printable(f"smoke {src.name}: cell {target.cell}, env (torch from {w.torch_source})\n")
        )
        venv = w.work / "env"
        python = venv / "bin" / "python"
        # A venv seeded with its own pip also gets Python 3.11's setuptools 65, which would
        # shadow the torch env's and make pip try to upgrade it (offline: fail). So: no seed
        # packages, and the base Python's pip pointed at the venv, where that pip can.
        other = pip_targets_other_pythons(base_python, runner, opts.env)
        pip_cmd = (
            [str(base_python), "-m", "pip", "--python", str(python)]
            if other
            else [str(python), "-m", "pip"]
        )
        stage = log.step(
            "env",
            lambda: create_venv(
                base_python,
                venv,
                cache_dir=opts.cache_dir,
                system_site_packages=w.torch_source == "system",
                seed=not other,
                ctx=RunContext(processes=runner, env=child_env(opts.env), log=log.fh),
            ),
        )
        if stage.returncode != 0:
            return w.result(stage)
        if torch_site is not None:
            # The runner's Python may itself be a venv whose site-packages
            # --system-site-packages does not reach: point at torch's directly.
            site = site_packages(venv, target.python)
            site.mkdir(parents=True, exist_ok=True)
            (site / "_buildtools_torch.pth").write_text(f"{torch_site}\n", encoding="utf-8")
            log.note(f"torch from {torch_site}")
        env = child_env(opts.env, venv)

        # 2. install, from where users get it
        out.write(printable(f"smoke {src.name}: install\n"))
        pip = [*pip_cmd, "install", "--no-cache-dir"]
        if w.torch_source == "system":
            pip.append("--no-index")  # an offline runner: torch is there, nothing to fetch
        if src.find_links is not None:
            wname = WheelName.parse(src.name)
            version = wname.version.replace("_", "-")
            pip += ["--find-links", src.find_links, f"{canonicalize_name(wname.name)}=={version}"]
        else:
            pip.append(str(src.path.resolve()))
        stage = log.run(runner, "install", pip, env=env, timeout=opts.timeout)
        if stage.returncode != 0:
            return w.result(stage)

        # 3. import torch and the packages, then every compiled module by name; read the maps
        modules = opts.modules or target.modules
        loading = [m.name for m in listed if m.importable and m.name]
        out.write(
            printable(
                f"smoke {src.name}: import {', '.join(modules) or '(nothing)'}; "
                f"load {', '.join(loading) or '(no compiled module)'}\n"
            )
        )
        cwd = _mkdir(w.work / "cwd")
        script = _mkdir(w.work / "child") / "buildtools_import_check.py"
        script.write_text(CHILD_SCRIPT, encoding="utf-8")
        site = site_packages(venv, target.python)
        spec = child_spec(listed, packages=modules, site=site, members=target.members)
        stage = log.run(
            runner,
            "import",
            [str(python), str(script), json.dumps(spec)],
            env=env,
            cwd=cwd,
            timeout=opts.timeout,
        )
        child = parse_child_report(stage.output)
        ran = child.torch.get("version") if child.torch else None
        if isinstance(ran, str) and w.torch is not None and ran != w.torch:
            expected, w.torch = w.torch, ran
            return w.result(
                stage,
                child,
                status=SmokeStatus.FAILED,
                diagnosis=f"the wheel ran on torch {ran}, not the {expected} under test: "
                "installing it put another torch first on the path",
            )
        w.modules, failures, notes = load_outcomes(listed, child, opts.optional_modules)
        for name in sorted(opts.optional_modules - {m.name for m in listed if m.name}):
            notes.append(f"optional module {name} is not in the wheel")
        # A second libtorch that imported cleanly is already a failure; the smoke command
        # still runs, to show what it leads to (often an abort at the first op).
        if stage.returncode != 0 or stage.timed_out:
            return w.result(stage, child, findings=notes)
        if failures:
            imported = ", ".join(child.imported[1:]) or "the packages"
            return w.result(
                stage,
                child,
                status=SmokeStatus.IMPORT_ERROR,
                diagnosis=f"import of {imported} succeeded, but compiled module "
                + "; ".join(failures)
                + " (declare a module that may fail in matrix.yaml project.optional_modules)",
                findings=notes,
            )
        if opts.smoke_command is None:
            return w.result(stage, child, findings=notes)

        # 4. the project's smoke command against the installed package
        if opts.smoke_requires:
            # from the indexes pip is configured with: the runner's own torch stays
            stage = log.run(
                runner,
                "install",
                [*pip_cmd, "install", "--no-cache-dir", *opts.smoke_requires],
                env=env,
                timeout=opts.timeout,
            )
            if stage.returncode != 0:
                return w.result(stage)
        out.write(printable(f"smoke {src.name}: {opts.smoke_command}\n"))
        argv = smoke_argv(opts.smoke_command, python=python, project_dir=opts.project_dir)
        cases_file = w.work / "cases.json"
        device = device_kind or "cpu"
        smoke_env = {**env, DEVICE_ENV: device, CASES_ENV: str(cases_file)}
        stage = log.run(runner, "smoke", argv, env=smoke_env, cwd=cwd, timeout=opts.timeout)
        return _with_cases(w, stage, ChildReport(maps=child.maps), notes, cases_file, device_kind)
    finally:
        log.close()
        if not opts.keep_envs:
            shutil.rmtree(w.work, ignore_errors=True)


def _with_cases(
    w: _Wheel,
    stage: Stage,
    child: ChildReport,
    notes: list[str],
    cases_file: Path,
    kind: DeviceKind | None,
) -> SmokeResult:
    """The smoke command's result with the cases it reported; no device case on a GPU fails."""
    cases = read_cases(cases_file)
    if cases is None or isinstance(cases, str):
        note = cases or f"not reported by the smoke command (${CASES_ENV} unwritten)"
        return w.result(stage, child, findings=notes, cases_note=note)
    res = w.result(stage, child, findings=notes, cases=cases)
    if res.status is SmokeStatus.PASSED and kind is not None and cases.ran_on_device == 0:
        ran = ", ".join(f"{k} {v}" for k, v in sorted(cases.counts.items())) or "none"
        return replace(
            res,
            status=SmokeStatus.FAILED,
            diagnosis=f"the smoke command ran no case on the {kind} device (it reported: {ran})",
        )
    return res


def _device_stage(
    w: _Wheel,
    kind: DeviceKind,
    torch: TorchInstall | None,
    driver: DriverFacts,
    opts: SmokeOptions,
) -> SmokeResult | None:
    """`no-device` for the torch this wheel is tested with, where it sees no GPU."""
    check = check_device(kind, torch=torch, driver=driver, env=opts.env, torch_required=True)
    if check.ok:
        return None
    w.log.note(check.line())
    return w.result(
        Stage(name="env", returncode=1, output=check.line()),
        status=SmokeStatus.NO_DEVICE,
        diagnosis=check.line(),
    )


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _no_device_results(
    planned: Sequence[SmokeTarget | SmokeResult], check: DeviceCheck
) -> list[SmokeResult]:
    out: list[SmokeResult] = []
    for p in planned:
        if isinstance(p, SmokeResult):
            out.append(p)
            continue
        out.append(
            SmokeResult(
                wheel=p.source.name,
                sha256=p.sha256,
                cell=p.cell,
                covers=p.covers,
                status=SmokeStatus.NO_DEVICE,
                diagnosis=f"not installed: {check.line()}",
                stage="env",
                source=p.source.origin,
            )
        )
    return out


def run_smoke(
    sources: Sequence[WheelSource],
    *,
    opts: SmokeOptions,
    runner: ProcessRunner,
    accelerator: str,
    out: TextIO,
    unrecorded: bool = False,
    now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
) -> SmokeReport:
    """Smoke-test every wheel that matches this runner; never raises for a wheel's failure.

    On a `cuda`/`rocm` runner whose torch sees no GPU nothing is installed: every wheel is
    `no-device` (the report's `runner.device_check` says what was checked and why).
    """
    runner_python, runner_torch = probe_torch(opts.torch_python, runner, opts.env)
    kind = _device_kind(accelerator)
    driver = _machine_driver(kind, runner, opts) if kind is not None else None
    check = None
    if kind is not None and driver is not None:
        check = check_device(
            kind,
            torch=runner_torch,
            driver=driver,
            env=opts.env,
            torch_required=opts.torch_source == "system" or unrecorded,
            python=opts.torch_python,
        )
    gpus = runner_torch.gpus if runner_torch is not None else ()
    info = RunnerInfo(
        accelerator=accelerator,
        gpu=(gpus[0].name if gpus else None)
        or (driver.gpu_names[0] if driver is not None and driver.gpu_names else None),
        driver=driver.driver if driver is not None else None,
        torch=runner_torch.version if runner_torch else None,
        torch_cuda=runner_torch.cuda if runner_torch else None,
        python=runner_python,
        date=now().isoformat(timespec="seconds"),
        host=platform.node(),
        gpus=gpus,
        driver_cuda=runner_torch.driver_cuda if runner_torch else None,
        device_check=check.line() if check is not None else None,
        device_ok=check.ok if check is not None else None,
    )
    unrecorded_accel = None
    if unrecorded and runner_torch is not None:
        try:
            unrecorded_accel = Accelerator.parse(runner_torch.accelerator)
        except ValueError:
            unrecorded_accel = None
    planned_targets = plan_targets(
        sources,
        runner_accelerator=accelerator,
        runner_python=".".join(runner_python.split(".")[:2]),
        runner_torch=runner_torch.version if runner_torch else None,
        unrecorded=unrecorded_accel,
        window_torches=opts.window_torches,
    )
    if check is not None and not check.ok:
        return SmokeReport(
            runner=info,
            results=tuple(_no_device_results(planned_targets, check)),
            command=opts.command,
            smoke_command=opts.smoke_command,
        )
    if check is not None:
        out.write(printable(check.line()) + "\n")
    results: list[SmokeResult] = []
    for number, planned in enumerate(planned_targets, 1):
        if isinstance(planned, SmokeResult):
            out.write(
                printable(f"smoke {planned.wheel}: {planned.status.value}: {planned.diagnosis}\n")
            )
            results.append(planned)
            continue
        machine = _Machine(
            python=runner_python, torch=runner_torch, driver=driver, accelerator=accelerator
        )
        res = _smoke_one(number, planned, machine, opts, runner, out)
        out.write(
            printable(
                f"smoke {res.wheel}: {res.status.value.upper()} in {res.duration:.1f} s"
                + (f": {res.diagnosis}" if res.diagnosis else "")
            )
            + "\n"
        )
        results.append(res)
    return SmokeReport(
        runner=info,
        results=tuple(results),
        command=opts.command,
        smoke_command=opts.smoke_command,
    )
