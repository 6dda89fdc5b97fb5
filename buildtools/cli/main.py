"""Command line: `buildtools <verb>`; every user mistake ends in a message and an exit code."""

from __future__ import annotations

__all__ = ["main"]

import argparse
import contextlib
import errno
import importlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from .. import __version__
from ..errors import BuildtoolsError, ExitCode, Terminated, cleanup_notes
from ..files import describe_os_error
from ..untrusted import shown
from .common import add_plan_args

if TYPE_CHECKING:
    from ..planner import Plan
    from .missing import MissingReport

Handler = Callable[[argparse.Namespace, TextIO], int]


def _print_plan_table(result: Plan, out: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from ..knowledge import load_knowledge
    from ..planner import abi_window, cuda_split, window_build

    # values are text, never rich markup (an image or a reason may hold "[/…]")
    console = Console(
        file=out, highlight=False, markup=False, width=max(Console(file=out).width, 120)
    )
    grouped = any(len(job.cells) > 1 for job in result.jobs)
    table = Table(title=f"plan (profile: {result.profile or 'all cells'})")
    table.add_column("job", no_wrap=True)
    if grouped:
        table.add_column("cells", no_wrap=True)
    for col in ("python", "archs", "image", "requires"):
        table.add_column(col, overflow="fold")
    for job in result.jobs:
        archs = job.toolkit.arch_list.split(";") if job.toolkit else []
        arch_text = (
            f"{archs[0]} … {archs[-1]} ({len(archs)})" if len(archs) > 3 else ";".join(archs) or "-"
        )
        row = [job.id]
        if grouped:
            row.append("\n".join(job.cell_ids))
        row += [", ".join(job.pythons), arch_text, job.image, job.requires_dist]
        table.add_row(*map(Text, row))
    console.print(table)
    console.print(
        f"{len(result.cells)} cell(s) in {len(result.jobs)} job(s); "
        f"{result.builds_saved} build(s) saved by the ABI mode; "
        f"{result.excluded} excluded by rules; {len(result.removed)} removed as impossible"
    )
    for removed in result.removed:
        console.print(f"  removed {removed.cell.id}: {removed.reason}")
    for job in result.jobs:
        window = abi_window(job)
        if window:
            console.print(f"ABI window of {job.id} (Requires-Dist {job.requires_dist}):")
            console.print(f"  {window_build(job)}")
            for torch, where in window:
                console.print(f"  torch {torch}: {where}")
    for line in cuda_split(result.jobs, result.removed, load_knowledge()):
        console.print(line)
    for resolution in result.ranges:
        console.print(
            f"torch {resolution.spec!r} → {', '.join(resolution.versions) or 'no release'} "
            f"({resolution.note})"
        )
        for version, why in resolution.left_out:
            console.print(f"  left out {version}: {why}")


def _print_published(report: MissingReport, out: TextIO) -> None:
    count = len(report.published)
    out.write(
        shown(
            f"--missing {report.site}: {count} cell(s) of version {report.version} already "
            f"published there; planned: only the cells it has no wheel for",
            newlines=False,
        )
        + "\n"
    )
    for cell, wheel in report.smoke_only:  # inside a published window: smoke, never rebuild
        line = f"  smoke-only {cell}: {wheel} admits its torch; smoke it there, no rebuild"
        out.write(shown(line, newlines=False) + "\n")


def _print_coverage(result: Plan, site: Path | None, out: TextIO) -> None:
    """The matrix as a grid: what this plan builds, what other profiles do, what cannot
    exist; with a site, what it publishes and which cells a smoke test proved."""
    from ..index.coverage import coverage_map, render_text
    from ..index.manifest import read_manifest
    from ..knowledge import load_knowledge

    manifest = read_manifest(site) if site is not None else None
    cmap = coverage_map(
        manifest.wheels if manifest else (),
        kb=load_knowledge(),
        runs=manifest.smoke if manifest else (),
        matrix=result.matrix,
        planned={c.id for c in result.cells},
    )
    out.write("\n")
    for line in render_text(cmap):
        out.write(line + "\n")


def cmd_plan(args: argparse.Namespace, out: TextIO) -> int:
    from .common import plan_from_args
    from .estimate import estimate_for, nvcc_threads_of, print_estimate
    from .missing import missing_plan

    missing: MissingReport | None = None
    if args.missing:
        result, project_dir, missing = missing_plan(args)
    else:
        result, project_dir = plan_from_args(args)
    estimate = (
        estimate_for(result, project_dir, cache_dir=args.cache_dir) if args.estimate else None
    )
    if args.format == "json":
        # the scheduler's nvcc threads on this machine (a build elsewhere chooses its own)
        threads = nvcc_threads_of(result, project_dir)
        data: dict[str, Any] = {
            "include": [{**j.to_plan_json(), "nvcc_threads": threads[j.id]} for j in result.jobs]
        }
        if estimate is not None:
            data["estimate"] = estimate.to_json()
        out.write(json.dumps(data, indent=2, sort_keys=True))
        out.write("\n")
    elif args.format == "ids":
        for cell in result.cells:
            out.write(cell.id + "\n")
    else:
        _print_plan_table(result, out)
        _print_coverage(result, args.site, out)
        if missing is not None:
            _print_published(missing, out)
    if estimate is not None and args.format != "json":
        print_estimate(estimate, out)
    return 0


def cmd_schema(args: argparse.Namespace, out: TextIO) -> int:
    from ..matrix.config import json_schema

    out.write(json.dumps(json_schema(), indent=2, sort_keys=True) + "\n")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose one error line quotes the command line (an unrecognized
    argument as typed, with its controls) through the one sanitiser; every verb's
    subparser is one too (argparse makes them of the parent's class)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, shown(f"{self.prog}: error: {message}", newlines=False) + "\n")


def build_parser(extra: Sequence[Callable[[Any], None]] = ()) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="buildtools", description="Plan, build, repair and check PyTorch extension wheels."
    )
    parser.add_argument("--version", action="version", version=f"torch-buildtools {__version__}")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    p = sub.add_parser("plan", help="print the plan: cells, jobs, builds saved, removed cells")
    add_plan_args(p)
    p.add_argument("--format", choices=("table", "json", "ids"), default="table")
    p.add_argument(
        "--estimate",
        action="store_true",
        help="also estimate each job's build time (recorded timings, else a model), the "
        "run's wall time here, and CI's wall time and runner-minutes",
    )
    p.add_argument(
        "--missing",
        metavar="SITE",
        default=None,
        help="plan only the cells SITE (a directory or URL `buildtools index` made) has no "
        "wheel for at the project's version",
    )
    p.add_argument(
        "--project-version",
        default=None,
        metavar="VERSION",
        help="with --missing: the project's version (default: read from its source)",
    )
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="the cache whose timings and environments --estimate reads "
        "(default: $BUILDTOOLS_CACHE_DIR or ~/.cache/torch-buildtools)",
    )
    p.add_argument(
        "--site",
        type=Path,
        default=None,
        metavar="DIR",
        help="a site `buildtools index` wrote: its published and smoke-tested cells join "
        "the coverage grid",
    )
    p.set_defaults(handler=cmd_plan)

    p = sub.add_parser("schema", help="print the JSON Schema of matrix.yaml (for editors)")
    p.set_defaults(handler=cmd_schema)

    for add in extra:
        add(sub)
    return parser


def _verb(module: str, add: str) -> Callable[[Any], None]:
    """A verb's parser, its module imported only when the verb is: a command pays for the
    imports of its own verb alone (`buildtools build` of an unchanged cell is mostly start)."""

    def register(sub: Any) -> None:
        getattr(importlib.import_module(f"{__package__}.{module}"), add)(sub)

    return register


# verb → (module of buildtools.cli, its add-parser function); `plan` and `schema` are here
VERBS: dict[str, tuple[str, str]] = {
    "build": ("build", "add_build_parser"),
    "check": ("check", "add_check_parser"),
    "ci": ("ci", "add_ci_parser"),
    "dist": ("dist", "add_dist_parser"),
    "doctor": ("doctor", "add_doctor_parser"),
    "index": ("index", "add_index_parser"),
    "init": ("init", "add_init_parser"),
    "knowledge": ("knowledge", "add_knowledge_parser"),
    "smoke": ("smoke", "add_smoke_parser"),
}


def _extra_verbs(argv: Sequence[str] | None = None) -> list[Callable[[Any], None]]:
    """Every verb's parser; only the named verb's when `argv` starts with one (a command's
    parse needs no other verb's parser; `--help`, a typo or no verb still lists them all)."""
    first = argv[0] if argv else None
    if first in ("plan", "schema"):
        return []
    chosen = [first] if first in VERBS else list(VERBS)
    return [_verb(*VERBS[name]) for name in chosen]


def _say(line: str) -> None:
    """One line on stderr (when there is a stderr at all). A message quotes what it refuses
    (a path, a URL, a field, a loader's message): its credentials redacted, made printable."""
    if sys.stderr is not None:
        sys.stderr.write(shown(line) + "\n")
        sys.stderr.flush()


def _interrupted(exc: KeyboardInterrupt) -> int:
    """One line: which signal, and what was ended or removed on the way out."""
    terminated = isinstance(exc, Terminated)
    name = "SIGTERM" if terminated else "Ctrl-C (SIGINT)"
    done = cleanup_notes(exc)
    said = "; ".join(done) if done else "no child process was running"
    _say(f"interrupted by {name}: {said}")
    return int(ExitCode.TERMINATED if terminated else ExitCode.INTERRUPTED)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (what `timeout` and a cancelled CI job send) raises `Terminated` where the
    process is, so it unwinds as Ctrl-C does: every child's process group ended by the
    runner, staging directories removed. Only the first one: a second SIGTERM during that
    cleanup is ignored rather than leaving it half done."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = False

    def terminate(signum: int, frame: object) -> None:
        nonlocal fired
        if not fired:
            fired = True
            raise Terminated(signum)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    out = out if out is not None else sys.stdout
    if out is None:  # started with standard output closed (`>&-`)
        _say(
            "error: standard output is closed; give it a file (`> out.txt`) or /dev/null "
            "(`> /dev/null`)"
        )
        return int(ExitCode.FILESYSTEM)
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_extra_verbs(argv))
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    with _sigterm_as_interrupt():
        try:
            code = handler(args, out)
            out.flush()
            return code
        except BuildtoolsError as exc:
            _say(f"error: {exc}")
            return int(exc.exit_code)
        except KeyboardInterrupt as exc:
            return _interrupted(exc)
        except BrokenPipeError:
            _quiet_stdout(out)
            return int(ExitCode.OK)
        except OSError as exc:  # the file system said no: one line naming the path and the remedy
            if exc.filename is None and exc.errno == errno.EBADF:
                _quiet_stdout(out)
                _say("error: standard output cannot be written (closed?); give it a file")
                return int(ExitCode.FILESYSTEM)
            _say(f"error: {describe_os_error(exc)}")
            return int(ExitCode.FILESYSTEM)


def _quiet_stdout(out: TextIO) -> None:
    """Point standard output at /dev/null, so that the interpreter's last flush of what is
    still buffered for a closed or broken stream raises nothing more at exit."""
    if out is sys.stdout:
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
