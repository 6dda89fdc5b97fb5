"""`buildtools doctor`: diagnose torch and its extensions in a Python environment."""

from __future__ import annotations

__all__ = ["add_doctor_parser"]

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any, TextIO

from ..context import RunContext
from ..doctor.diagnose import diagnose
from ..doctor.doctor_report import DOCTOR_SCHEMA, DoctorReport
from ..doctor.matching import IndexSettings, ProjectRef
from ..errors import ConfigError
from ..matrix.config import load_matrix
from ..probe.hostenv import probe_environment
from ..process import ProcessRunner, SubprocessRunner
from .common import seconds


def add_doctor_parser(sub: Any) -> None:
    """`buildtools doctor`: diagnose torch and its extensions in a Python environment."""
    p = sub.add_parser(
        "doctor",
        help="why a torch extension fails to import here, and the command that fixes it",
    )
    p.add_argument(
        "--python",
        type=Path,
        default=None,
        metavar="PATH",
        help="interpreter of the environment to inspect (default: the one running buildtools)",
    )
    p.add_argument(
        "--index",
        default=None,
        metavar="URL",
        help="base URL of the project's find-links pages (default: matrix.yaml index.base_url)",
    )
    p.add_argument(
        "--matrix",
        type=Path,
        default=None,
        help="matrix.yaml with the project and index settings (default: ./matrix.yaml if any)",
    )
    p.add_argument(
        "--json", action="store_true", help=f"print the report as JSON ({DOCTOR_SCHEMA})"
    )
    p.add_argument(
        "--timeout",
        type=seconds,
        default=300.0,
        metavar="SECONDS",
        help="how long the inspected interpreter may take to report, and to import torch "
        "(default: 300; a hanging import is reported as such)",
    )
    p.add_argument(
        "--no-import",
        action="store_true",
        help="do not import torch (static facts only; no GPU information)",
    )
    p.set_defaults(handler=cmd_doctor, runner=None)


def _settings(args: argparse.Namespace) -> tuple[IndexSettings, ProjectRef | None, list[str]]:
    notes: list[str] = []
    path: Path | None = args.matrix
    explicit = path is not None
    if path is None:
        path = Path(os.environ.get("BUILDTOOLS_MATRIX", "matrix.yaml"))
    index = IndexSettings()
    project: ProjectRef | None = None
    if explicit or path.is_file():
        try:
            mf = load_matrix(path)
        except ConfigError as exc:
            if explicit:
                raise
            notes.append(f"{path} ignored (invalid: {str(exc).splitlines()[0]})")
        else:
            m = mf.matrix
            index = IndexSettings(base_url=m.index.base_url, local_version=m.index.local_version)
            project = ProjectRef(name=m.project.name, path=mf.project_dir)
    if args.index:
        index = IndexSettings(base_url=args.index, local_version=index.local_version)
    return index, project, notes


def cmd_doctor(args: argparse.Namespace, out: TextIO) -> int:
    """Probe the environment, diagnose, print; exit DOCTOR_BROKEN when something is broken."""
    runner: ProcessRunner = args.runner or SubprocessRunner()
    python = args.python or Path(sys.executable)
    snapshot = probe_environment(
        python,
        ctx=RunContext.of(processes=runner),
        import_torch=not args.no_import,
        timeout=getattr(args, "timeout", 300.0),
    )
    index, project, notes = _settings(args)
    if args.python is None and snapshot.torch is None:
        # e.g. run from nox's own venv, which has buildtools but not the user's torch
        notes.append(
            f"doctor inspects the environment it runs in ({sys.executable}), which has no "
            "torch: buildtools was installed apart from your extension (nox's venv, pipx). "
            "Point it at the environment where the extension fails: "
            "`buildtools doctor --python /path/to/env/bin/python`"
        )
    pip = "pip" if args.python is None else f"{shlex.quote(str(snapshot.python))} -m pip"
    report = diagnose(snapshot, index=index, project=project, pip=pip)
    if notes:
        report = DoctorReport(
            snapshot=report.snapshot,
            torch_cxx11_abi=report.torch_cxx11_abi,
            torch_findings=report.torch_findings,
            packages=report.packages,
            notes=(*report.notes, *notes),
        )
    if args.json:
        out.write(json.dumps(report.to_json(), indent=2) + "\n")
    else:
        report.render(out)
    return report.exit_code
