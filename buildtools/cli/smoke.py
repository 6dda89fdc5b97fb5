"""`buildtools smoke`: install each wheel in a fresh env and run its smoke test."""

from __future__ import annotations

__all__ = ["add_smoke_parser"]

import argparse
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from ..cachedir import default_cache_dir
from ..ecosystem import load_ecosystem
from ..errors import ConfigError, ExitCode, NoDeviceError, SmokeFailedError
from ..matrix.config import load_matrix
from ..model import RUNNER_ACCELERATOR_ENV
from ..planning import default_matrix_path
from ..process import SubprocessRunner
from ..smoke.run import (
    SmokeOptions,
    run_smoke,
)
from ..smoke.smoke_report import (
    ReportPaths,
    SmokeStatus,
    publish,
)
from ..smoke.wheelsources import (
    collect_wheels,
    detect_accelerator,
)
from .common import seconds


def add_smoke_parser(sub: Any) -> None:
    p = sub.add_parser(
        "smoke",
        help="install each wheel in a fresh env with its torch and run the smoke test in a child",
    )
    p.add_argument(
        "wheels",
        nargs="*",
        type=Path,
        metavar="WHEEL_OR_DIR",
        help="wheel files or wheelhouse directories (default: wheelhouse/)",
    )
    p.add_argument(
        "--find-links",
        action="append",
        default=[],
        metavar="PAGE",
        help="a find-links page (URL or file): test the published wheels, installed from it",
    )
    p.add_argument("--matrix", type=Path, default=None, help="matrix.yaml (for project.smoke)")
    p.add_argument(
        "--smoke-command", default=None, help="overrides project.smoke, e.g. 'python smoke.py'"
    )
    p.add_argument(
        "--project", type=Path, default=None, help="project dir (overrides project.path)"
    )
    p.add_argument(
        "--accelerator",
        choices=("auto", "cpu", "cuda", "rocm"),
        default="auto",
        help=f"what this runner has; cuda/rocm: refuse (exit {int(ExitCode.NO_DEVICE)}, nothing "
        "installed) when its torch sees no GPU. auto: $BUILDTOOLS_RUNNER_ACCELERATOR (the "
        "runner's declared accelerator), else nvidia-smi or /dev/nvidiactl → cuda, /dev/kfd → "
        "rocm, else cpu",
    )
    p.add_argument(
        "--torch-source",
        choices=("auto", "system", "index"),
        default="auto",
        help="system: reuse --torch-python's torch (offline runners); index: pip install the "
        "cell's torch; auto: system when it is the cell's torch",
    )
    p.add_argument(
        "--system-torch",
        dest="torch_source",
        action="store_const",
        const="system",
        help="same as --torch-source system",
    )
    p.add_argument(
        "--torch-python",
        type=Path,
        default=None,
        help="the interpreter whose torch `system` reuses (default: $BUILDTOOLS_TORCH_PYTHON, "
        "else the one running buildtools)",
    )
    p.add_argument(
        "--torch-index",
        default=None,
        help=f"index for torch (default: {load_ecosystem().pytorch_index}/<accelerator>)",
    )
    p.add_argument(
        "--window-torch",
        dest="window_torches",
        action="append",
        default=[],
        metavar="VERSION",
        help="a torch release a stable-ABI wheel is tested on beyond its build record's, "
        "inside its Requires-Dist range (release day's smoke-only run; repeatable)",
    )
    p.add_argument("--timeout", type=seconds, default=600.0, help="seconds per child process")
    p.add_argument(
        "--import",
        dest="modules",
        action="append",
        default=[],
        metavar="MODULE",
        help="modules to import (default: the wheel's top-level modules)",
    )
    p.add_argument(
        "--optional-module",
        dest="optional_modules",
        action="append",
        default=[],
        metavar="MODULE",
        help="a compiled module that may fail to load (reported, not failed); added to "
        "matrix.yaml project.optional_modules",
    )
    p.add_argument(
        "--unrecorded",
        action="store_true",
        help="also test wheels without a build record (not built by buildtools, e.g. from PyPI) "
        "against --torch-python's torch, as they are",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("smoke-results"),
        help="report.json, junit.xml and logs/ go here (default: smoke-results/)",
    )
    p.add_argument("--cache-dir", type=Path, default=None)
    p.add_argument("--keep-envs", action="store_true", help="keep each wheel's venv")
    p.set_defaults(handler=cmd_smoke)


@dataclass(frozen=True, kw_only=True)
class _Project:
    """What the smoke takes from matrix.yaml's project (and the flags that override it)."""

    command: str | None
    directory: Path | None
    requires: tuple[str, ...] = ()
    optional_modules: frozenset[str] = frozenset()


def _smoke_project(args: argparse.Namespace) -> _Project:
    """The smoke command, the project directory, what the command needs, optional modules.

    `--smoke-command` replaces project.smoke only: with `--matrix` named, the project
    directory (where the command's relative paths point), smoke_requires and
    optional_modules still come from it.
    """
    given = args.project.resolve() if args.project else None
    flags = frozenset(getattr(args, "optional_modules", None) or ())
    if args.smoke_command is not None and args.matrix is None:
        return _Project(command=args.smoke_command, directory=given, optional_modules=flags)
    path = args.matrix or default_matrix_path()
    if args.matrix is None and not path.is_file():
        return _Project(command=None, directory=given, optional_modules=flags)
    mf = load_matrix(path)  # a named one that is missing or no file: one line, exit 3
    project = mf.matrix.project
    return _Project(
        command=args.smoke_command if args.smoke_command is not None else project.smoke,
        directory=given or mf.project_dir,
        requires=tuple(project.smoke_requires),
        optional_modules=flags | frozenset(project.optional_modules),
    )


def _runner_accelerator(args: argparse.Namespace, env: dict[str, str], out: TextIO) -> str:
    """--accelerator, or what `auto` resolves to; a GPU-declared runner never becomes cpu."""
    declared = env.get(RUNNER_ACCELERATOR_ENV, "").strip() or None
    if declared is not None and declared not in ("cpu", "cuda", "rocm"):
        raise ConfigError(
            f"${RUNNER_ACCELERATOR_ENV}={declared!r}: allowed: cpu, cuda, rocm (what the "
            "workflow declares this runner to have)"
        )
    if args.accelerator != "auto":
        if declared in ("cuda", "rocm") and args.accelerator != declared:
            raise ConfigError(
                f"--accelerator {args.accelerator} on a runner declared {declared} "
                f"(${RUNNER_ACCELERATOR_ENV}): a GPU runner's smoke runs on its GPU; pass "
                f"--accelerator {declared} or unset the variable"
            )
        return str(args.accelerator)
    if declared is not None:
        out.write(f"smoke: accelerator auto → {declared} (${RUNNER_ACCELERATOR_ENV})\n")
        return declared
    found = detect_accelerator(exists=os.path.exists, which=shutil.which)
    why = {
        "cuda": "nvidia-smi or /dev/nvidiactl present",
        "rocm": "/dev/kfd present",
        "cpu": f"no nvidia-smi, /dev/nvidiactl or /dev/kfd; ${RUNNER_ACCELERATOR_ENV} unset",
    }[found]
    out.write(f"smoke: accelerator auto → {found} ({why})\n")
    return found


def cmd_smoke(args: argparse.Namespace, out: TextIO) -> int:
    env = dict(os.environ)
    project = _smoke_project(args)
    cache_dir = (args.cache_dir or default_cache_dir(env)).resolve()
    paths: list[Path] = args.wheels or ([] if args.find_links else [Path("wheelhouse")])
    out_dir = args.out.resolve()
    sources = collect_wheels(paths, args.find_links, download_dir=out_dir / "downloads")
    if not sources:
        raise ConfigError(
            f"no wheels found in {', '.join(map(str, paths + args.find_links))}; build some with "
            "`buildtools build`, or name wheel files, directories or --find-links pages"
        )
    accelerator = _runner_accelerator(args, env, out)
    smoke_command = project.command
    opts = SmokeOptions(
        out_dir=out_dir,
        cache_dir=cache_dir,
        env=env,
        smoke_command=smoke_command,
        smoke_requires=project.requires,
        project_dir=project.directory,
        optional_modules=project.optional_modules,
        torch_source=args.torch_source,
        torch_python=args.torch_python
        or Path(env.get("BUILDTOOLS_TORCH_PYTHON") or sys.executable),
        torch_index=args.torch_index,
        timeout=args.timeout,
        modules=tuple(args.modules),
        keep_envs=args.keep_envs,
        window_torches=tuple(args.window_torches),
        command=shlex.join(["buildtools", "smoke", *sys.argv[2:]]),
    )
    if smoke_command is None:
        out.write("smoke: no project.smoke command (matrix.yaml) or --smoke-command: import only\n")
    report = run_smoke(
        sources,
        opts=opts,
        runner=SubprocessRunner(),
        accelerator=accelerator,
        out=out,
        unrecorded=args.unrecorded,
    )
    paths_out = ReportPaths(json=out_dir / "report.json", junit=out_dir / "junit.xml")
    report.print_table(out)
    publish(report, paths=paths_out, env=env, out=out)
    out.write(f"report: {paths_out.json}\njunit: {paths_out.junit}\n")
    if report.runner.device_ok is False or any(
        r.status is SmokeStatus.NO_DEVICE for r in report.results
    ):
        raise NoDeviceError(
            f"{report.runner.device_check or 'no GPU visible'}\nnothing was installed or "
            f"tested on this {accelerator} runner (report: {paths_out.json})"
        )
    failed = report.failed
    if failed:
        lines = "\n".join(f"  {r.wheel}: {r.status.value}: {r.diagnosis}" for r in failed)
        raise SmokeFailedError(f"{len(failed)} wheel(s) failed the smoke test:\n{lines}")
    if all(r.status is SmokeStatus.SKIPPED for r in report.results):
        raise SmokeFailedError(
            f"no wheel was tested: all {len(report.results)} were skipped on this {accelerator} "
            "runner (see the report); pass --accelerator or run on the matching runner"
        )
    return 0
