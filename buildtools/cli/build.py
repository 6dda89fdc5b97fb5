"""`buildtools build`: its options, and the run that plans, builds and reports."""

from __future__ import annotations

__all__ = ["add_build_parser"]

import argparse
import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from ..backends.registry import BACKENDS, BackendOptions, BackendSetting, make_backend
from ..cachedir import default_cache_dir
from ..distcompile.clusterconfig import parse_scheduler_url
from ..errors import (
    BuildFailedError,
    BuildtoolsError,
    CheckFailedError,
    PlanError,
    ToolchainError,
    ToolMissingError,
)
from ..knowledge import load_knowledge
from ..matrix.config import load_matrix
from ..model import COMPILER_CACHES
from ..planning import default_matrix_path
from ..wheelbuild.build_report import CellResult
from ..wheelbuild.options import BuildOptions
from ..wheelbuild.orchestrate import build_plan
from .common import add_plan_args, plan_from_args, positive_int


def add_build_parser(sub: Any) -> None:

    p = sub.add_parser("build", help="build, repair and check the wheels of the plan")
    add_plan_args(p)
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
        choices=tuple(BACKENDS),
        default="local",
        help="where the compiler runs: "
        + "; ".join(f"{name}: {spec.help}" for name, spec in BACKENDS.items()),
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
    p.add_argument(
        "--setup-emulation",
        action="store_true",
        help="docker: where an aarch64 cell needs QEMU and none is registered, install and "
        "register it (root, Debian/Ubuntu: qemu-user-static + binfmt)",
    )
    p.add_argument("--fail-fast", action="store_true", help="stop at the first failed job")
    p.add_argument(
        "--max-jobs",
        type=positive_int,
        default=None,
        help="compiler processes per job (MAX_JOBS; default: the machine's cores split "
        "between the jobs that run at once)",
    )
    p.add_argument(
        "--jobs",
        "-j",
        type=positive_int,
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
        "--compiler-cache",
        choices=(*COMPILER_CACHES, "none"),
        default=None,
        help="the compiler cache that wraps the compilers (default: matrix "
        "build.compiler_cache, itself ccache by default); none: no compiler cache",
    )
    p.add_argument(
        "--no-ccache",
        action="store_true",
        help="no compiler cache at all (the same as --compiler-cache none)",
    )
    p.add_argument(
        "--distribute",
        default=None,
        metavar="SCHEDULER_URL",
        help="compile the units of each job on this sccache-dist scheduler's build servers, "
        "falling back to local compiles where it fails (token: $BUILDTOOLS_DIST_TOKEN, or the "
        "cluster of `buildtools dist up`; default: matrix build.distribute; `--distribute "
        "none` turns it off)",
    )
    p.add_argument(
        "--cuda-home",
        type=Path,
        default=None,
        help="a system CUDA to use when it matches torch's CUDA",
    )
    p.add_argument("--no-live", action="store_true", help="plain progress lines even in a terminal")
    p.set_defaults(handler=cmd_build)


def reproduce_command(
    args: argparse.Namespace, *, via_nox: bool = True, only: Sequence[str] = ()
) -> str:
    """The command that runs this build again: `nox -s build -- …` (what a CI job for a cell
    runs), or `buildtools build …` when it was not run through nox; `only` narrows it to
    those cells (the failed ones)."""
    argv = ["nox", "-s", "build", "--"] if via_nox else ["buildtools", "build"]
    head = len(argv)
    if args.matrix:
        argv += ["--matrix", str(args.matrix)]
    if args.profile:
        argv += ["--profile", args.profile]
    argv += [a for g in (only or args.only) for a in ("--only", g)]
    argv += [a for t in args.torch_axis or () for a in ("--torch", t)]
    if args.backend != "local":
        argv += ["--backend", args.backend]
    if args.offline:
        argv += ["--offline"]
    if args.base_image:
        argv += ["--base-image", args.base_image]
    if getattr(args, "project", None):
        argv += ["--project", str(args.project)]
    # what changes where the run reads and writes, or whether it rebuilds
    if getattr(args, "wheelhouse", None) and args.wheelhouse != Path("wheelhouse"):
        argv += ["--wheelhouse", str(args.wheelhouse)]
    for option in ("cache_dir", "index_site", "cuda_home", "distribute"):
        if getattr(args, option, None):
            argv += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
    for flag in ("force", "no_ccache"):
        if getattr(args, flag, False):
            argv.append(f"--{flag.replace('_', '-')}")
    if getattr(args, "compiler_cache", None):
        argv += ["--compiler-cache", args.compiler_cache]
    if via_nox and len(argv) == head:
        argv = argv[:3]
    return shlex.join(argv)


# a run whose failed cells all failed the same way exits with that failure's code
_FAILURES: dict[str | None, type[BuildtoolsError]] = {
    "check": CheckFailedError,
    "ToolchainError": ToolchainError,
    "ToolMissingError": ToolMissingError,
}


def _failure_class(failed: list[CellResult]) -> type[BuildtoolsError]:
    """The error of the run: the cells' own class when they share one (a torch that is not
    the cell's build: 7), else `build failed` (8)."""
    kinds = {c.failure for c in failed}
    return _FAILURES.get(kinds.pop(), BuildFailedError) if len(kinds) == 1 else BuildFailedError


def _distribute(flag: str | None, setting: str | None) -> str | None:
    """The scheduler URL of the run: --distribute (`none`: off), else build.distribute."""
    if flag is not None:
        return None if flag.lower() == "none" else parse_scheduler_url(flag)
    return parse_scheduler_url(setting, what="matrix.yaml build.distribute") if setting else None


def cmd_build(args: argparse.Namespace, out: TextIO) -> int:

    result, project_dir = plan_from_args(args)
    env = dict(os.environ)
    via_nox = env.get("NOX_CURRENT_SESSION") == "build"  # nox sets it in its sessions
    settings = load_matrix(args.matrix or default_matrix_path(env)).matrix.build
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
        reproduce=reproduce_command(args, via_nox=via_nox),
        matrix=str(args.matrix or "matrix.yaml"),
        force=args.force,
        index_site=args.index_site.resolve() if args.index_site else None,
        compiler_cache="none" if args.no_ccache else args.compiler_cache,
        jobs=args.jobs,
        settings=settings,
        distribute=_distribute(args.distribute, settings.distribute),
        distribute_by_default=args.distribute is None,
    )
    kb = load_knowledge()
    current = [j.id for j in result.jobs if j.torch_source == "current"]
    if current and not BACKENDS[args.backend].builds_current_torch:
        able = [n for n, spec in BACKENDS.items() if spec.builds_current_torch]
        raise PlanError(
            f"{', '.join(current)}: torch: current builds against a torch on this host, so only "
            f"with --backend {' or '.join(able)}; select the other cells with --only for the "
            f"{args.backend} backend"
        )
    backend = make_backend(
        args.backend,
        BackendSetting(kb=kb, cache_dir=opts.cache_dir, env=env),
        BackendOptions(
            offline=args.offline,
            base_image=args.base_image,
            setup_emulation=args.setup_emulation,
            max_jobs=args.max_jobs,
        ),
    )
    report = build_plan(result, kb=kb, opts=opts, backend=backend, out=out)
    report.print_table(out)
    out.write(f"report: {opts.wheelhouse / 'report.json'}\n")
    out.write(f"reproduce: {opts.reproduce}\n")
    failed = report.failed
    if failed:
        again = reproduce_command(args, via_nox=via_nox, only=sorted({c.cell for c in failed}))
        out.write(f"reproduce the failed cell(s): {again}\n")
        lines = "\n".join(f"  {c.cell}: {c.reason} (log: {c.log})" for c in failed)
        raise _failure_class(failed)(f"{len(failed)} cell(s) failed:\n{lines}")
    return 0
