"""The environments of `buildtools smoke`: the torch a wheel is tested with, a log per wheel.

A wheel is installed into a venv that lies over a torch-only environment: the runner's own
torch (`system`) or one pip installed from an index and cached (`index`). Every child
process gets the runner's environment less what would leak into the one under test
(`ecosystem.dropped_env`); each stage's output is written to the wheel's log and read back
from it.
"""

from __future__ import annotations

__all__ = [
    "SmokeOptions",
    "StageLog",
    "TorchSource",
    "child_env",
    "describe_install",
    "describe_torch",
    "index_torch_env",
    "pip_targets_other_pythons",
    "probe_torch",
    "public_version",
    "site_packages",
    "smoke_argv",
    "torch_matches",
]

import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from packaging.version import InvalidVersion, Version

from ..context import RunContext
from ..ecosystem import load_ecosystem
from ..errors import BuildtoolsError, ToolMissingError
from ..jsonfields import decode_json
from ..locks import file_lock
from ..probe.hostenv import probe_environment
from ..process import CommandResult, ProcessRunner
from ..toolchain.findpython import find_python
from ..toolchain.venv import create_venv, install
from ..torchinstall import TorchInstall, window_build_ok
from .child import Stage, StageName
from .gpu import DriverFacts
from .wheelsources import SmokeTarget

TorchSource = Literal["auto", "system", "index"]


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
    # compiled modules that may fail to load (matrix.yaml project.optional_modules): reported
    optional_modules: frozenset[str] = frozenset()
    keep_envs: bool = False
    # releases beyond its record a stable wheel is smoke-tested on too (release day)
    window_torches: tuple[str, ...] = ()
    command: str = ""
    # the GPU driver as the machine shows it; None: read it (nvidia-smi, /proc, /dev)
    driver: DriverFacts | None = None


def child_env(env: Mapping[str, str], venv: Path | None = None) -> dict[str, str]:
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


def probe_torch(
    python: Path, runner: ProcessRunner, env: Mapping[str, str], *, devices: bool = True
) -> tuple[str, TorchInstall | None]:
    """(Python version, the torch `python` imports; None where it has none that imports)."""
    try:
        snapshot = probe_environment(
            python,
            ctx=RunContext(processes=runner, env=child_env(env)),
            separate_import=False,
            devices=devices,
            files=False,
        )
    except ToolMissingError:
        return platform.python_version(), None
    torch = snapshot.torch
    return snapshot.python_version, torch if torch is not None and torch.imported else None


def public_version(version: str) -> str:
    try:
        return Version(version).public
    except InvalidVersion:
        return version


def torch_matches(target: SmokeTarget, torch: TorchInstall | None) -> bool:
    """The same torch build: version (with its local label when the record has one), CUDA/HIP.

    A window target of a CPU wheel (another release its stable ABI claims) needs the release
    only: any build of it carries the CPU libraries the wheel uses (`window_build_ok`); the
    report records the build it ran on."""
    if torch is None:
        return False
    if target.window and window_build_ok(target.accelerator.kind):
        return public_version(torch.version) == public_version(target.torch)
    # a record with a local label ("2.11.0+cu130") names the exact build
    v = torch.version
    same = (
        v == target.torch
        if "+" in target.torch
        else public_version(v) == public_version(target.torch)
    )
    return (
        same
        and (torch.cuda or None) == (target.cuda or None)
        and (torch.hip or None) == (target.hip or None)
    )


def same_build(target: SmokeTarget, torch: TorchInstall) -> bool:
    return (torch.cuda or None) == (target.cuda or None) and (torch.hip or None) == (
        target.hip or None
    )


def describe_torch(torch: str | None, cuda: str | None, hip: str | None) -> str:
    if torch is None:
        return "no torch"
    build = f"CUDA {cuda}" if cuda else f"HIP {hip}" if hip else "CPU"
    return f"torch {torch} ({build})"


def describe_install(torch: TorchInstall | None) -> str:
    if torch is None:
        return "no torch"
    return describe_torch(torch.version, torch.cuda, torch.hip)


def _timed_out(result: CommandResult) -> bool:
    # SubprocessRunner's answer when it killed a command at its timeout
    return result.timed_out


class StageLog:
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


def site_packages(venv: Path, python_xy: str) -> Path:
    return venv / "lib" / f"python{python_xy}" / "site-packages"


def index_torch_env(
    target: SmokeTarget, opts: SmokeOptions, runner: ProcessRunner, log: StageLog
) -> tuple[Path, Path, Path, str | None] | Stage:
    """(base Python, torch site-packages, its Python, its torch's version as its marker
    recorded it) of a cached torch-only env from an index."""
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
    python = root / "bin" / "python"
    with file_lock(root.parent / f".{root.name}.lock"):
        ready = root / ".buildtools-ready"
        if ready.is_file():
            log.note(f"reusing the torch env {root}")
            version: str | None
            try:
                marker = decode_json(ready.read_bytes(), what=str(ready), max_bytes=1 << 20)
                version = str(marker["version"])
            except (OSError, ValueError, KeyError, TypeError):
                version = None  # unreadable (an older marker): not recorded, never guessed
            return base, site_packages(root, target.python), python, version
        if root.exists():
            shutil.rmtree(root)
        env = child_env(opts.env)

        def make() -> None:
            create_venv(
                base,
                root,
                cache_dir=opts.cache_dir,
                ctx=RunContext(processes=runner, env=env, log=log.fh),
            )
            install(
                python,
                [f"torch=={public_version(target.torch)}"],
                cache_dir=opts.cache_dir,
                extra_index=index,
                ctx=RunContext(processes=runner, env=env, log=log.fh),
            )

        stage = log.step("env", make)
        if stage.returncode != 0:
            return stage
        _, torch = probe_torch(python, runner, opts.env, devices=False)
        if torch is None or not torch_matches(target, torch):
            return Stage(
                name="env",
                returncode=1,
                output=(
                    f"ERROR: pip installed {describe_install(torch)}"
                    f" from {index} and pip's indexes; the cell needs "
                    f"{describe_torch(target.torch, target.cuda, target.hip)}: pass the right "
                    "--torch-index\n"
                ),
            )
        if not same_build(target, torch):
            log.note(
                f"{describe_install(torch)} stands for torch {public_version(target.torch)}: "
                "a CPU wheel's ABI window needs the release, any build of it"
            )
        ready.write_text(json.dumps(torch.to_json()) + "\n")
    return base, site_packages(root, target.python), python, torch.version


def pip_targets_other_pythons(python: Path, runner: ProcessRunner, env: Mapping[str, str]) -> bool:
    """True when `python -m pip` is pip >= 22.3, which installs into another env (--python)."""
    result = runner.run(
        [str(python), "-m", "pip", "--version"], env=child_env(env), capture=True, timeout=120
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
