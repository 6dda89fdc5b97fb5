"""`buildtools check WHEEL… --torch SITE_PACKAGES…`: the static checks on built wheels."""

from __future__ import annotations

__all__ = ["add_check_parser"]

import argparse
import json
import os
import shlex
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from ..cachedir import default_cache_dir
from ..errors import ExitCode, ToolMissingError, UnsafeArtefactError
from ..files import describe_os_error
from ..matrix.config import BuildSettings, load_matrix
from ..model import ABI_MODES, BuildRecord, Finding
from ..planning import default_matrix_path
from ..toolchain.envs import find_toolchain
from ..toolchain.indexprobe import index_hint
from ..untrusted import printable
from ..wheel.archive import ArchiveError, open_wheel
from ..wheel.checks import (
    Expectation,
    TorchTarget,
    check_wheel,
    device_code,
    has_errors,
    load_torch_target,
)
from ..wheel.meta import read_build_record


def add_check_parser(sub: Any) -> None:
    """`buildtools check WHEEL… --torch SITE_PACKAGES…`: the static checks on built wheels."""
    p = sub.add_parser("check", help="static checks of built wheels against target torch installs")
    p.add_argument("wheels", nargs="+", type=Path, metavar="WHEEL")
    p.add_argument(
        "--torch",
        dest="torch_sites",
        action="append",
        type=Path,
        default=None,
        metavar="SITE_PACKAGES",
        help="site-packages of a target torch (repeatable: check against each; default: "
        "the environment `buildtools build` made for the torch of the wheel's build record, "
        "else the torch of the Python running buildtools)",
    )
    p.add_argument(
        "--accelerator",
        default=None,
        help="cpu, cuXYZ or rocmX.Y (default: from the wheel's build record, else cpu)",
    )
    p.add_argument("--arch-list", default=None, help="promised archs, e.g. '8.0;9.0;12.0+PTX'")
    p.add_argument("--platform-tag", default=None, help="promised tag, e.g. manylinux_2_28_x86_64")
    p.add_argument(
        "--weaker-platform-tag",
        choices=("error", "warning"),
        default=None,
        help="severity of a tag weaker than promised (default: what the build that made the "
        "wheel used, from its build record; else error)",
    )
    p.add_argument("--local-version", default=None, help="expected local label, e.g. pt211cu130")
    p.add_argument("--requires-torch", default=None, help="expected pin, e.g. 'torch==2.11.*'")
    p.add_argument("--no-build-record", action="store_true", help="do not require buildtools.json")
    p.add_argument(
        "--abi",
        choices=ABI_MODES,
        default=None,
        help="the wheel's ABI mode (default: its build record's); `stable` judges every torch "
        "symbol it imports by the stable-ABI facts, e.g. of a wheel not built by buildtools",
    )
    p.add_argument(
        "--matrix",
        type=Path,
        default=None,
        help="matrix.yaml whose build: settings (size_warning, size_error) the checks apply, "
        "as `buildtools build` does (default: $BUILDTOOLS_MATRIX or ./matrix.yaml when it "
        "exists; else the defaults)",
    )
    p.add_argument("--json", action="store_true", help="print findings as JSON")
    p.set_defaults(handler=cmd_check)


def _running_torch_site() -> Path | None:
    """site-packages of the torch importable here (found without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parents[1]


def _record(wheel: Path) -> BuildRecord | None:
    try:
        return read_build_record(wheel)
    except (ValueError, KeyError, OSError, zipfile.BadZipFile):  # the checks report it
        return None


def _recipe(wheel: Path, record: BuildRecord) -> str:
    """The exact commands that make an environment with the record's torch and check. Each
    command is an argv list joined by shlex: the record's torch and Python are the wheel's
    text, quoted as values, never pasted into the shell line."""
    py = ".".join((record.python or "3.12").split(".")[:2])
    base = record.torch.split("+", 1)[0]
    venv = f"/tmp/torch-{record.torch.replace('+', '-')}"
    commands = [
        [f"python{py}", "-m", "venv", venv],
        [
            f"{venv}/bin/pip",
            "install",
            f"torch=={base}",
            "--index-url",
            index_hint(record.accelerator),
        ],
        ["buildtools", "check", str(wheel), "--torch", f"{venv}/lib/python{py}/site-packages"],
    ]
    return " && ".join(shlex.join(argv) for argv in commands)


def _target_site(wheel: Path, cache: Path) -> Path:
    """Where the torch to check `wheel` against lives when no --torch is given: the
    environment `buildtools build` made for its build record's torch, else the running one
    when it is that torch (or the wheel has no record)."""
    record = _record(wheel)
    running = _running_torch_site()
    if record is None:
        if running is None:
            raise ToolMissingError(
                f"{wheel.name}: no build record says which torch it was built for and no torch "
                "is importable here; pass --torch SITE_PACKAGES of the target torch"
            )
        return running
    found = find_toolchain(cache, torch_version=record.torch, python=record.python)
    if found is not None:
        return found
    if running is not None and load_torch_target(running).version == record.torch:
        return running
    raise ToolMissingError(
        f"{wheel.name} was built against torch {record.torch} (its build record), and no "
        f"environment with that torch is in {cache} (`buildtools build` makes one) nor "
        f"importable here; pass --torch SITE_PACKAGES of one, e.g.: {_recipe(wheel, record)}"
    )


def _targets(wheel: Path, sites: list[Path] | None, cache: Path) -> list[TorchTarget]:
    return [load_torch_target(site) for site in (sites or [_target_site(wheel, cache)])]


def _settings(args: argparse.Namespace) -> BuildSettings | None:
    """matrix.yaml's `build:` whose wheel-size thresholds a build applies: --matrix, else
    $BUILDTOOLS_MATRIX or ./matrix.yaml when it exists (as `buildtools build` reads it)."""
    path: Path | None = getattr(args, "matrix", None)
    if path is None:
        default = default_matrix_path()
        path = default if default.is_file() else None
    return load_matrix(path).matrix.build if path is not None else None


def _expectation_for(
    wheel: Path, args: argparse.Namespace, settings: BuildSettings | None
) -> Expectation:
    """What the build promised (`Expectation.of` its record and the matrix); an explicit
    option replaces what it says."""
    try:
        record = read_build_record(wheel)
    except ValueError:  # the build-record check reports it
        record = None
    given = {
        "accelerator": args.accelerator,
        "arch_list": args.arch_list,
        "platform_tag": args.platform_tag,
        "weaker_platform_tag": args.weaker_platform_tag,
        "local_version": args.local_version,
        "requires_dist_torch": args.requires_torch,
        "abi": getattr(args, "abi", None),
    }
    return replace(
        Expectation.of(record, settings=settings),
        build_record=not args.no_build_record,
        **{name: value for name, value in given.items() if value},
    )


def _unreadable(wheel: Path) -> str | None:
    """Why `wheel` cannot be checked at all (missing, not a regular file, misnamed, not a
    wheel pip would install, over the archive limits, a member whose CRC or length is
    wrong: `wheel.archive`), or None. UnsafeArtefactError when a member names a place
    outside the wheel."""
    if not wheel.exists() and not wheel.is_symlink():
        return f"{wheel}: no such file"
    try:
        with open_wheel(wheel) as archive:
            archive.verify()  # every member inflates to what it claims, as pip will check
            return None
    except UnsafeArtefactError:
        raise
    except OSError as exc:
        return describe_os_error(exc)
    except ArchiveError as exc:
        return f"{wheel.name}: cannot be read: {exc.problem}"


def _line(out: TextIO, text: str) -> None:
    """One line of the report: wheel names, findings and build-record fields are the
    wheel's text, made printable (no ESC, no bidi, no workflow command, no line break)."""
    out.write(printable(text, newlines=False) + "\n")


def cmd_check(args: argparse.Namespace, out: TextIO) -> int:
    """Run `check_wheel` on each wheel; exit code CHECK_FAILED when any finding is an error.

    A wheel that cannot be read (missing, misnamed, not a zip, a corrupt shared object) fails
    with its reason and the others are still checked; one whose members would unpack
    outside the extraction directory fails with UNSAFE_ARTEFACT (nothing is unpacked).
    """
    cache = default_cache_dir(os.environ) / "envs"
    settings = _settings(args)  # a named matrix that is missing or invalid: one line, exit 3
    report: dict[str, object] = {}
    failed = unsafe = False
    for wheel in args.wheels:
        findings: list[Finding] = []
        targets: list[TorchTarget] = []
        try:
            problem = _unreadable(wheel)
            if problem is None:
                targets = _targets(wheel, args.torch_sites, cache)
                expect = _expectation_for(wheel, args, settings)
                findings = check_wheel(wheel, targets=targets, expect=expect)
        except UnsafeArtefactError as exc:
            problem, unsafe = str(exc), True
        except (ValueError, OSError) as exc:  # a shared object that is not a readable ELF
            problem = f"{wheel.name}: cannot be read: {exc}"
        if problem is not None:
            failed = True
            report[wheel.name] = {"error": problem}
            if not args.json:
                _line(out, f"FAIL  {wheel.name}")
                _line(out, f"  error   {problem}")
            continue
        failed |= has_errors(findings)
        report[wheel.name] = [
            {
                "code": f.code,
                "severity": f.severity.value,
                "message": f.message,
                "path": f.path,
                "details": list(f.details),
            }
            for f in findings
        ]
        if not args.json:
            status = "FAIL" if has_errors(findings) else "ok"
            _line(out, f"{status}  {wheel.name}")
            for f in findings:
                _line(out, f"  {f.severity.value:<7} {f.code}: {f.message}")
                for line in f.details:
                    _line(out, f"            {line}")
            for target in targets:  # what a pass is a pass against
                _line(out, f"  checked against torch {target.version} ({target.site_packages})")
            for arcname, code in device_code(wheel):
                _line(out, f"  {arcname}: {code}")
    if args.json:
        out.write(json.dumps(report, indent=2) + "\n")
    if unsafe:
        return int(ExitCode.UNSAFE_ARTEFACT)
    return int(ExitCode.CHECK_FAILED) if failed else int(ExitCode.OK)
