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
2. **install**: `pip install` of the wheel file, or `pip install -f PAGE name==version`.
3. **import** (child process, timeout): import torch and the extension, then read
   /proc/self/maps: two distinct files of one libc10/libtorch library (the auditwheel
   hash ignored) is a duplicate libtorch.
4. **smoke** (child process, timeout): the project's smoke command (`project.smoke`),
   run from an empty directory with script paths made absolute, so it exercises the
   installed package and not the source tree.

A crash is an outcome, not an exception: SIGABRT (the duplicate-libtorch `Tried to
register multiple backend fallbacks … Conjugate`), SIGSEGV, a hang, a non-zero exit of
the smoke command and an import failure are each classified and reported with the tail
of their output.
"""

from __future__ import annotations

__all__ = ["SmokeOptions", "run_smoke", "smoke_argv"]

import contextlib
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Literal, TextIO

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..ecosystem import load_ecosystem
from ..errors import BuildtoolsError, ToolMissingError
from ..locks import file_lock
from ..probe.hostenv import probe_environment
from ..process import CommandResult, ProcessRunner
from ..toolchain.pythons import find_python
from ..toolchain.venv import create_venv, install
from ..torchinstall import TorchInstall
from ..wheel.meta import WheelName
from .child import (
    CHILD_SCRIPT,
    ChildReport,
    Stage,
    StageName,
    classify,
    output_tail,
    parse_child_report,
)
from .report import RunnerInfo, SmokeReport, SmokeResult, SmokeStatus
from .wheels import SmokeTarget, WheelSource, plan_targets

TorchSource = Literal["auto", "system", "index"]

# --------------------------------------------------------------------------- execution


@dataclass(frozen=True, kw_only=True)
class SmokeOptions:
    """Everything one `buildtools smoke` run needs; the world comes in through these."""

    out_dir: Path
    cache_dir: Path
    env: Mapping[str, str]
    smoke_command: str | None = None
    smoke_requires: tuple[str, ...] = ()  # pip requirements of the smoke command (pytest)
    project_dir: Path | None = None
    torch_source: TorchSource = "auto"
    torch_python: Path = field(default_factory=lambda: Path(sys.executable))
    torch_index: str | None = None
    timeout: float = 600.0
    modules: tuple[str, ...] = ()
    keep_envs: bool = False
    command: str = ""


def _child_env(env: Mapping[str, str], venv: Path | None = None) -> dict[str, str]:
    # variables that would leak the runner's environment into the one under test
    dropped = load_ecosystem().dropped_env
    out = {k: v for k, v in env.items() if k not in dropped}
    out["PYTHONUNBUFFERED"] = "1"
    out["PYTHONFAULTHANDLER"] = "1"  # a segfault prints the Python stack too
    out["PYTHONDONTWRITEBYTECODE"] = "1"
    out["PYTHONNOUSERSITE"] = "1"
    out["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    if venv is not None:
        out["VIRTUAL_ENV"] = str(venv)
        out["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return out


def _probe_torch(
    python: Path, runner: ProcessRunner, env: Mapping[str, str], *, devices: bool = True
) -> tuple[str, TorchInstall | None]:
    """(Python version, the torch `python` imports; None where it has none that imports)."""
    try:
        snapshot = probe_environment(
            python,
            runner=runner,
            env=_child_env(env),
            separate_import=False,
            devices=devices,
            files=False,
        )
    except ToolMissingError:
        return platform.python_version(), None
    torch = snapshot.torch
    return snapshot.python_version, torch if torch is not None and torch.imported else None


def _gpu_driver(
    kind: str, runner: ProcessRunner, env: Mapping[str, str]
) -> tuple[str | None, str | None]:
    """(GPU name, driver version) from nvidia-smi, or amdgpu's module version."""
    if kind == "cuda" and shutil.which("nvidia-smi", path=env.get("PATH")):
        result = runner.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            env=_child_env(env),
            capture=True,
            timeout=60,
        )
        if result.ok and result.output.strip():
            name, _, driver = result.output.strip().splitlines()[0].rpartition(",")
            return name.strip() or None, driver.strip() or None
    if kind == "rocm":
        version = Path("/sys/module/amdgpu/version")
        with contextlib.suppress(OSError):
            return None, version.read_text().strip() or None
    return None, None


def _public(version: str) -> str:
    try:
        return Version(version).public
    except InvalidVersion:
        return version


def _torch_matches(target: SmokeTarget, torch: TorchInstall | None) -> bool:
    """The same torch build: version (with its local label when the record has one), CUDA/HIP."""
    if torch is None:
        return False
    # a record with a local label ("2.11.0+cu130") names the exact build
    v = torch.version
    same = v == target.torch if "+" in target.torch else _public(v) == _public(target.torch)
    return (
        same
        and (torch.cuda or None) == (target.cuda or None)
        and (torch.hip or None) == (target.hip or None)
    )


def _describe_torch(torch: str | None, cuda: str | None, hip: str | None) -> str:
    if torch is None:
        return "no torch"
    build = f"CUDA {cuda}" if cuda else f"HIP {hip}" if hip else "CPU"
    return f"torch {torch} ({build})"


def _describe_install(torch: TorchInstall | None) -> str:
    if torch is None:
        return "no torch"
    return _describe_torch(torch.version, torch.cuda, torch.hip)


def _timed_out(result: CommandResult) -> bool:
    # SubprocessRunner's answer when it killed a command at its timeout
    return result.timed_out


class _Log:
    """One wheel's log file; each stage's output is read back from it."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fh: IO[str] = path.open("w", encoding="utf-8")

    def run(
        self,
        runner: ProcessRunner,
        name: StageName,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path | None = None,
        timeout: float | None = None,
    ) -> Stage:
        self.fh.flush()
        start = self.path.stat().st_size
        result = runner.run(argv, cwd=cwd, env=env, log=self.fh, timeout=timeout)
        self.fh.flush()
        with self.path.open("r", encoding="utf-8", errors="replace") as fh:
            fh.seek(start)
            output = fh.read()
        if not output and result.output and not _timed_out(result):
            output = result.output
        return Stage(
            name=name,
            returncode=result.returncode,
            output=output,
            timed_out=_timed_out(result),
            timeout=timeout,
        )

    def step(self, name: StageName, action: Callable[[], object]) -> Stage:
        """A stage done by buildtools itself (`action` runs its processes with this log):
        its output is what it logged, its failure the error it raised."""
        self.fh.flush()
        start = self.path.stat().st_size
        returncode = 0
        try:
            action()
        except BuildtoolsError as exc:
            self.fh.write(f"ERROR: {exc}\n")
            returncode = 1
        self.fh.flush()
        with self.path.open("r", encoding="utf-8", errors="replace") as fh:
            fh.seek(start)
            output = fh.read()
        return Stage(name=name, returncode=returncode, output=output)

    def note(self, text: str) -> None:
        self.fh.write(f"[buildtools] {text}\n")
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()


def _site_packages(venv: Path, python_xy: str) -> Path:
    return venv / "lib" / f"python{python_xy}" / "site-packages"


def _index_torch_env(
    target: SmokeTarget, opts: SmokeOptions, runner: ProcessRunner, log: _Log
) -> tuple[Path, Path] | Stage:
    """(base Python, torch site-packages) of a cached torch-only env from an index."""
    home = Path(opts.env["HOME"]) if opts.env.get("HOME") else Path.home()
    index = opts.torch_index or f"{load_ecosystem().pytorch_index}/{target.accelerator.name}"
    key = hashlib.sha256(
        f"{target.python}|{target.torch}|{target.accelerator.name}|{index}".encode()
    ).hexdigest()[:12]
    root = opts.cache_dir / "smoke" / "torch" / f"py{target.python}-torch{target.torch}-{key}"
    try:
        base = find_python(target.python, env=opts.env, home=home)
    except BuildtoolsError as exc:
        return Stage(name="env", returncode=1, output=f"ERROR: {exc}\n")
    with file_lock(root.parent / f".{root.name}.lock"):
        ready = root / ".buildtools-ready"
        if ready.is_file():
            log.note(f"reusing the torch env {root}")
            return base, _site_packages(root, target.python)
        if root.exists():
            shutil.rmtree(root)
        env = _child_env(opts.env)
        python = root / "bin" / "python"

        def make() -> None:
            create_venv(base, root, runner=runner, log=log.fh, env=env, cache_dir=opts.cache_dir)
            install(
                python,
                [f"torch=={_public(target.torch)}"],
                runner=runner,
                log=log.fh,
                env=env,
                cache_dir=opts.cache_dir,
                extra_index=index,
            )

        stage = log.step("env", make)
        if stage.returncode != 0:
            return stage
        _, torch = _probe_torch(python, runner, opts.env, devices=False)
        if torch is None or not _torch_matches(target, torch):
            return Stage(
                name="env",
                returncode=1,
                output=(
                    f"ERROR: pip installed {_describe_install(torch)}"
                    f" from {index} and pip's indexes; the cell needs "
                    f"{_describe_torch(target.torch, target.cuda, target.hip)}: pass the right "
                    "--torch-index\n"
                ),
            )
        ready.write_text(json.dumps(torch.to_json()) + "\n")
    return base, _site_packages(root, target.python)


def _pip_targets_other_pythons(python: Path, runner: ProcessRunner, env: Mapping[str, str]) -> bool:
    """True when `python -m pip` is pip >= 22.3, which installs into another env (--python)."""
    result = runner.run(
        [str(python), "-m", "pip", "--version"], env=_child_env(env), capture=True, timeout=120
    )
    m = re.match(r"pip (\d+)\.(\d+)", result.output.strip()) if result.ok else None
    return m is not None and (int(m[1]), int(m[2])) >= (22, 3)


def smoke_argv(command: str, *, python: Path, project_dir: Path | None) -> list[str]:
    """The smoke command with `python` → the env's interpreter and relative paths made absolute."""
    argv = shlex.split(command)
    if argv and re.fullmatch(r"python(\d(\.\d+)?)?", argv[0]):
        argv[0] = str(python)
    if project_dir is not None:
        for i, arg in enumerate(argv[1:], start=1):
            if (
                not arg.startswith("-")
                and not Path(arg).is_absolute()
                and (project_dir / arg).exists()
            ):
                argv[i] = str((project_dir / arg).resolve())
    return argv


def _smoke_one(
    number: int,
    target: SmokeTarget,
    runner_python: str,
    runner_torch: TorchInstall | None,
    opts: SmokeOptions,
    runner: ProcessRunner,
    out: TextIO,
) -> SmokeResult:
    started = time.monotonic()
    src = target.source
    log = _Log(opts.out_dir / "logs" / f"{number:02d}-{src.name}.log")
    work = Path(tempfile.mkdtemp(prefix="smoke-", dir=_mkdir(opts.cache_dir / "smoke" / "work")))
    torch_source: str = "system"
    stages: list[Stage] = []

    def result(stage: Stage, child: ChildReport | None = None) -> SmokeResult:
        status, diagnosis, findings = classify(stage, child=child, bundled=target.bundled)
        return SmokeResult(
            wheel=src.name,
            sha256=target.sha256,
            cell=target.cell,
            covers=target.covers,
            status=status,
            diagnosis=diagnosis,
            output=output_tail(stage.output),
            duration=time.monotonic() - started,
            stage=stage.name,
            source=src.origin,
            torch_source=torch_source,
            findings=tuple(findings),
            log=str(log.path),
        )

    try:
        log.note(f"smoke {src.origin} (cell {target.cell}, sha256 {target.sha256})")
        if len(target.covers) > 1:
            log.note(f"the wheel covers {', '.join(target.covers)}; testing {target.cell}")
        # 1. env
        python_xy = ".".join(runner_python.split(".")[:2])
        system_ok = _torch_matches(target, runner_torch) and python_xy == target.python
        if opts.torch_source == "system" or (opts.torch_source == "auto" and system_ok):
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
                        f"needs {_describe_torch(target.torch, target.cuda, target.hip)} on "
                        f"Python {target.python}{served}; {opts.torch_python} has "
                        f"{_describe_install(runner_torch)} on Python {python_xy}"
                    ),
                    source=src.origin,
                    torch_source="system",
                    duration=time.monotonic() - started,
                )
            torch_site = runner_torch.site_packages if runner_torch is not None else None
            base_python = opts.torch_python
        else:
            torch_source = "index"
            got = _index_torch_env(target, opts, runner, log)
            if isinstance(got, Stage):
                return result(got)
            base_python, torch_site = got
        out.write(f"smoke {src.name}: cell {target.cell}, env (torch from {torch_source})\n")
        venv = work / "env"
        python = venv / "bin" / "python"
        # A venv seeded with its own pip also gets Python 3.11's setuptools 65, which would
        # shadow the torch env's and make pip try to upgrade it (offline: fail). So: no seed
        # packages, and the base Python's pip pointed at the venv, where that pip can.
        other = _pip_targets_other_pythons(base_python, runner, opts.env)
        if other:
            pip_cmd = [str(base_python), "-m", "pip", "--python", str(python)]
        else:
            pip_cmd = [str(python), "-m", "pip"]
        stage = log.step(
            "env",
            lambda: create_venv(
                base_python,
                venv,
                runner=runner,
                log=log.fh,
                env=_child_env(opts.env),
                cache_dir=opts.cache_dir,
                system_site_packages=torch_source == "system",
                seed=not other,
            ),
        )
        if stage.returncode != 0:
            return result(stage)
        if torch_site is not None:
            # The runner's Python may itself be a venv whose site-packages
            # --system-site-packages does not reach: point at torch's directly.
            site = _site_packages(venv, target.python)
            site.mkdir(parents=True, exist_ok=True)
            (site / "_buildtools_torch.pth").write_text(f"{torch_site}\n", encoding="utf-8")
            log.note(f"torch from {torch_site}")
        env = _child_env(opts.env, venv)

        # 2. install, from where users get it
        out.write(f"smoke {src.name}: install\n")
        pip = [*pip_cmd, "install", "--no-cache-dir"]
        if torch_source == "system":
            pip.append("--no-index")  # an offline runner: torch is there, nothing to fetch
        if src.find_links is not None:
            wname = WheelName.parse(src.name)
            version = wname.version.replace("_", "-")
            pip += ["--find-links", src.find_links, f"{canonicalize_name(wname.name)}=={version}"]
        else:
            pip.append(str(src.path.resolve()))
        stage = log.run(runner, "install", pip, env=env, timeout=opts.timeout)
        stages.append(stage)
        if stage.returncode != 0:
            return result(stage)

        # 3. import torch and the extension; read the maps
        modules = opts.modules or target.modules
        out.write(f"smoke {src.name}: import {', '.join(modules) or '(nothing)'}\n")
        cwd = _mkdir(work / "cwd")
        script = _mkdir(work / "child") / "buildtools_import_check.py"
        script.write_text(CHILD_SCRIPT, encoding="utf-8")
        stage = log.run(
            runner,
            "import",
            [str(python), str(script), *modules],
            env=env,
            cwd=cwd,
            timeout=opts.timeout,
        )
        child = parse_child_report(stage.output)
        # A second libtorch that imported cleanly is already a failure; the smoke command
        # still runs, to show what it leads to (often an abort at the first op).
        if stage.returncode != 0 or stage.timed_out or opts.smoke_command is None:
            return result(stage, child)

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
                return result(stage)
        out.write(f"smoke {src.name}: {opts.smoke_command}\n")
        argv = smoke_argv(opts.smoke_command, python=python, project_dir=opts.project_dir)
        stage = log.run(runner, "smoke", argv, env=env, cwd=cwd, timeout=opts.timeout)
        return result(stage, ChildReport(maps=child.maps))
    finally:
        log.close()
        if not opts.keep_envs:
            shutil.rmtree(work, ignore_errors=True)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_smoke(
    sources: Sequence[WheelSource],
    *,
    opts: SmokeOptions,
    runner: ProcessRunner,
    accelerator: str,
    out: TextIO,
    now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
) -> SmokeReport:
    """Smoke-test every wheel that matches this runner; never raises for a wheel's failure."""
    runner_python, runner_torch = _probe_torch(opts.torch_python, runner, opts.env)
    gpu, driver = _gpu_driver(accelerator, runner, opts.env)
    info = RunnerInfo(
        accelerator=accelerator,
        gpu=gpu or (runner_torch.gpus[0].name if runner_torch and runner_torch.gpus else None),
        driver=driver,
        torch=runner_torch.version if runner_torch else None,
        torch_cuda=runner_torch.cuda if runner_torch else None,
        python=runner_python,
        date=now().isoformat(timespec="seconds"),
        host=platform.node(),
    )
    results: list[SmokeResult] = []
    planned_targets = plan_targets(
        sources,
        runner_accelerator=accelerator,
        runner_python=".".join(runner_python.split(".")[:2]),
        runner_torch=runner_torch.version if runner_torch else None,
    )
    for number, planned in enumerate(planned_targets, 1):
        if isinstance(planned, SmokeResult):
            out.write(f"smoke {planned.wheel}: {planned.status.value}: {planned.diagnosis}\n")
            results.append(planned)
            continue
        res = _smoke_one(number, planned, runner_python, runner_torch, opts, runner, out)
        out.write(
            f"smoke {res.wheel}: {res.status.value.upper()} in {res.duration:.1f} s"
            + (f": {res.diagnosis}" if res.diagnosis else "")
            + "\n"
        )
        results.append(res)
    return SmokeReport(
        runner=info,
        results=tuple(results),
        command=opts.command,
        smoke_command=opts.smoke_command,
    )
