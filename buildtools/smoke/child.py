"""The child side of `buildtools smoke`: the import check it runs, and what an ending means.

The import check runs in the environment under test and announces each step on a tagged
line (`BUILDTOOLS_SMOKE {json}`) before taking it, so even a process killed by an abort
tells how far it got. `classify` turns how a stage ended (exit status, signal, timeout,
output, the libraries mapped) into a status and a sentence a maintainer can act on.
"""

from __future__ import annotations

__all__ = [
    "CHILD_SCRIPT",
    "CHILD_TAG",
    "DUPLICATE_DIAGNOSIS",
    "ChildReport",
    "Stage",
    "StageName",
    "classify",
    "duplicate_libs",
    "key_line",
    "output_tail",
    "parse_child_report",
]

import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..jsonfields import decode_json
from .outcome import SmokeStatus

CHILD_TAG = "BUILDTOOLS_SMOKE "
StageName = Literal["env", "install", "import", "smoke"]
DUPLICATE_DIAGNOSIS = (
    "duplicate libtorch: the wheel bundles its own libc10/libtorch; repair with excludes "
    "(`buildtools build` derives them from torch: auditwheel repair --exclude 'libtorch*.so' "
    "--exclude 'libc10*.so' …)"
)
_OUTPUT_TAIL_LINES = 60
_OUTPUT_TAIL_CHARS = 6000

# The import stage, run as a script in the env under test (cwd: an empty directory), with one
# JSON argument (`modules.child_spec`): {"packages": [{"name", "paths"}], "compiled":
# [{"name", "file"}], "watch": [...]}. Every step is announced before it is taken, so an
# abort still says where it happened. The script's own directory leaves sys.path first (a
# wheel's module named like the script must not import the script). The packages are
# imported first (a failure there ends the script); then each compiled module by its own
# name, a failure reported and the next one tried; then the maps are read: the libc10/
# libtorch files, and which of the `watch` paths (shared objects that are not importable,
# relative to site-packages) the imports mapped.
#
# An import is the wheel's only when what came back is the wheel's file: a name the standard
# library (`os`), another package or a stub put in sys.modules already takes returns that
# instead. So a package's file must be one the wheel installs for it, and a compiled
# module's must be the wheel's own `.so`, loaded by an extension loader and mapped into the
# process; anything else is an ImportError naming what came back.
CHILD_SCRIPT = r"""
import importlib, importlib.machinery, json, os, re, sys
HERE = os.path.dirname(os.path.realpath(__file__))
sys.path[:] = [p for p in sys.path if not p or os.path.realpath(p) != HERE]
TAG = "BUILDTOOLS_SMOKE "
PAT = re.compile(r"^(lib(?:c10|torch)[A-Za-z0-9_]*?)(?:-[0-9a-f]{8})?\.so(?:\.[0-9]+)*$")
TAKEN = ("the name is taken first: by the standard library, another package, or a module "
         "put in sys.modules")
spec = json.loads(sys.argv[1])
def say(**kw):
    sys.stdout.write(TAG + json.dumps(kw) + "\n")
    sys.stdout.flush()
def mapped_files():
    files = set()
    with open("/proc/self/maps") as fh:
        for line in fh:
            parts = line.rstrip("\n").split(None, 5)
            if len(parts) < 6 or not parts[5].startswith("/"):
                continue
            path = parts[5]
            if path.endswith(" (deleted)"):
                path = path[: -len(" (deleted)")]
            files.add(path)
    return files
def torch_libs(files):
    libs = {}
    for path in files:
        m = PAT.match(os.path.basename(path))
        if m:
            libs.setdefault(m.group(1), set()).add(os.path.realpath(path))
    return {k: sorted(v) for k, v in sorted(libs.items())}
def origin(mod):
    f = getattr(mod, "__file__", None)
    return os.path.realpath(f) if isinstance(f, str) else None
def package_error(name, mod, paths):
    if paths is None:
        return None
    dirs = [os.path.realpath(d) for d in paths["dirs"]]
    files = [os.path.realpath(f) for f in paths["files"]]
    got = origin(mod)
    if got is not None:
        if got in files or any(got.startswith(d + os.sep) for d in dirs):
            return None
    else:
        where = [p for p in getattr(mod, "__path__", None) or () if isinstance(p, str)]
        if any(os.path.realpath(p) in dirs for p in where):
            return None
        got = "a module with no file"
    wanted = " or ".join(files + [d + "/" for d in dirs]) or "nothing (it installs none)"
    return "import %s returned %s, not the wheel's %s (%s)" % (name, got, wanted, TAKEN)
def compiled_error(name, mod, want):
    got, want = origin(mod), os.path.realpath(want)
    if got != want:
        return "import %s returned %s, not the wheel's %s (%s)" % (
            name, got or "a module with no file", want, TAKEN)
    loader = getattr(mod, "__loader__", None)
    if not isinstance(loader, importlib.machinery.ExtensionFileLoader):
        return "import %s returned a module naming %s, not loaded from it as an extension " \
               "module (%s)" % (name, want, TAKEN)
    if want not in {os.path.realpath(f) for f in mapped_files()}:
        return "import %s returned a module naming %s, which is not mapped into the " \
               "process (%s)" % (name, want, TAKEN)
    return None
say(event="import", module="torch")
import torch
say(event="imported", module="torch", version=torch.__version__, cuda=torch.version.cuda,
    hip=getattr(torch.version, "hip", None), file=torch.__file__)
for item in spec["packages"]:
    name = item["name"]
    say(event="import", module=name)
    mod = importlib.import_module(name)
    wrong = package_error(name, mod, item["paths"])
    if wrong is not None:  # one line, as an ImportError ends: the packages stop here
        sys.stdout.write("ImportError: " + wrong + "\n")
        sys.exit(1)
    say(event="imported", module=name, file=getattr(mod, "__file__", None))
for item in spec["compiled"]:
    name = item["name"]
    say(event="load", module=name)
    try:
        mod = importlib.import_module(name)
    except BaseException as exc:  # ImportError, OSError, SystemExit: each is the module's
        say(event="load-failed", module=name, error=type(exc).__name__ + ": " + str(exc))
        continue
    wrong = compiled_error(name, mod, item["file"])
    if wrong is not None:
        say(event="load-failed", module=name, error="ImportError: " + wrong)
        continue
    say(event="loaded", module=name, file=getattr(mod, "__file__", None))
try:
    files = mapped_files()
    watched = [w for w in spec["watch"] if any(f.endswith("/" + w) for f in files)]
    say(event="maps", libs=torch_libs(files), watched=watched)
except OSError as exc:
    say(event="maps", libs=None, error=str(exc))
"""


# --------------------------------------------------------------------------- classification


@dataclass(frozen=True, kw_only=True)
class Stage:
    """How one step ended: exit status (negative: killed by that signal), output."""

    name: StageName
    returncode: int
    output: str
    timed_out: bool = False
    timeout: float | None = None


@dataclass(frozen=True, kw_only=True)
class ChildReport:
    """What the import stage announced before it ended (or died)."""

    torch: Mapping[str, Any] | None = None
    imported: tuple[str, ...] = ()
    importing: str | None = None  # the module being imported when output stopped
    maps: Mapping[str, Sequence[str]] | None = None
    loaded: tuple[str, ...] = ()  # compiled modules imported by name
    load_failed: Mapping[str, str] = field(default_factory=dict)  # module → the error
    watched: tuple[str, ...] | None = None  # the watched files the imports mapped


def parse_child_report(output: str) -> ChildReport:
    torch: Mapping[str, Any] | None = None
    imported: list[str] = []
    importing: str | None = None
    maps: Mapping[str, Sequence[str]] | None = None
    loaded: list[str] = []
    failed: dict[str, str] = {}
    watched: tuple[str, ...] | None = None
    for line in output.splitlines():
        if not line.startswith(CHILD_TAG):
            continue
        try:
            data = decode_json(line[len(CHILD_TAG) :], what="the child's line")
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        event = data.get("event")
        if event == "import":
            importing = data.get("module")
        elif event == "imported":
            importing = None
            imported.append(str(data.get("module")))
            if data.get("module") == "torch":
                torch = data
        elif event == "load":
            importing = str(data.get("module"))
        elif event == "loaded":
            importing = None
            loaded.append(str(data.get("module")))
        elif event == "load-failed":
            importing = None
            failed[str(data.get("module"))] = str(data.get("error"))
        elif event == "maps":
            maps = data.get("libs")
            w = data.get("watched")
            watched = tuple(str(x) for x in w) if isinstance(w, list) else None
    return ChildReport(
        torch=torch,
        imported=tuple(imported),
        importing=importing,
        maps=maps,
        loaded=tuple(loaded),
        load_failed=failed,
        watched=watched,
    )


def duplicate_libs(maps: Mapping[str, Sequence[str]] | None) -> list[str]:
    """One finding per libc10/libtorch library mapped from more than one file."""
    out = []
    for name, paths in sorted((maps or {}).items()):
        if len(paths) > 1:
            out.append(f"{name} is mapped {len(paths)} times: {' and '.join(paths)}")
    return out


_SIGNALS = {int(signal.SIGABRT): "SIGABRT", int(signal.SIGSEGV): "SIGSEGV"}
_DUPLICATE_MARKERS = (
    "Tried to register multiple backend fallbacks",
    "registered at the same time",
    "PyTorch was compiled without Python support",
    "Duplicated key",
)
_ABORT_MARKERS = ("terminate called", "what():", "Fatal Python error")
_IMPORT_MARKERS = (
    "ImportError",
    "ModuleNotFoundError",
    "undefined symbol",
    "cannot open shared object file",
)


def _signal_of(returncode: int) -> int | None:
    """The signal that ended a process: -N from Python, 128+N when a shell reported it."""
    if returncode < 0:
        return -returncode
    if returncode > 128 and returncode - 128 in _SIGNALS:
        return returncode - 128
    return None


def key_line(output: str, markers: Sequence[str] = ()) -> str | None:
    lines = [
        ln.strip()
        for ln in output.splitlines()
        if ln.strip() and not ln.startswith((CHILD_TAG, "$ "))
    ]
    # a line that starts with a marker ("ImportError: …") says more than one that quotes it
    # (a traceback's `raise ImportError(...)`)
    for test in (str.startswith, str.__contains__):
        for marker in markers:
            for line in lines:
                if test(line, marker):
                    return line[:300]
    for line in reversed(lines):
        if not line.startswith(("frame #", "File ", "Traceback", "[buildtools]")):
            return line[:300]
    return None


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def classify(
    stage: Stage,
    *,
    child: ChildReport | None = None,
    bundled: Sequence[str] = (),
) -> tuple[SmokeStatus, str | None, list[str]]:
    """(status, diagnosis, findings) of the stage where a wheel's smoke test ended."""
    findings = duplicate_libs(child.maps if child else None)
    mapped_twice = bool(findings)
    duplicate = mapped_twice or any(m in stage.output for m in _DUPLICATE_MARKERS)
    if bundled:
        findings.append("the wheel bundles " + ", ".join(bundled))

    def dup(prefix: str) -> str:
        where = f" ({'; '.join(findings)})" if findings else ""
        return f"{prefix}{DUPLICATE_DIAGNOSIS}{where}"

    where: str = stage.name
    if child is not None and child.importing:
        where = f"import of {child.importing}"
    if stage.timed_out:
        return (
            SmokeStatus.TIMEOUT,
            f"{where}: killed after {stage.timeout:g} s without finishing; last output: "
            f"{key_line(stage.output) or '(none)'}",
            findings,
        )
    sig = _signal_of(stage.returncode)
    if sig == signal.SIGABRT:
        reason = key_line(stage.output, ("what():", "terminate called", "Assertion", "abort"))
        if duplicate or bundled:
            return SmokeStatus.ABORTED, dup(f"{where}: SIGABRT ({reason}): "), findings
        return SmokeStatus.ABORTED, f"{where}: SIGABRT: {reason or 'aborted'}", findings
    if sig == signal.SIGSEGV:
        hint = f" (likely cause: {DUPLICATE_DIAGNOSIS})" if duplicate or bundled else ""
        return SmokeStatus.SEGFAULT, f"{where}: SIGSEGV: segmentation fault{hint}", findings
    if sig is not None:
        return SmokeStatus.FAILED, f"{where}: killed by {_signal_name(sig)}", findings
    if stage.name in ("env", "install"):
        if stage.returncode == 0:
            return SmokeStatus.PASSED, None, findings
        what = (
            "no environment with the cell's torch"
            if stage.name == "env"
            else "pip could not install the wheel"
        )
        reason = key_line(stage.output, ("ERROR:", "error:"))
        return SmokeStatus.FAILED, f"{stage.name}: {what}: {reason or 'failed'}", findings
    if stage.returncode != 0 and mapped_twice:
        # the root cause, whatever the smoke command made of it
        reason = key_line(stage.output, ("FAIL", "Error", "error"))
        return SmokeStatus.FAILED, dup(f"{where} exited {stage.returncode} ({reason}); "), findings
    if stage.returncode != 0:
        if stage.name == "import" or any(m in stage.output for m in _IMPORT_MARKERS[2:]):
            reason = key_line(stage.output, _IMPORT_MARKERS)
            return SmokeStatus.IMPORT_ERROR, f"{where}: {reason or 'import failed'}", findings
        reason = key_line(stage.output, ("FAIL", "Error", "error"))
        return (
            SmokeStatus.WRONG_RESULT,
            f"smoke command exited {stage.returncode}: {reason or '(no output)'}",
            findings,
        )
    if duplicate and findings:
        prefix = "the smoke command passed, but " if stage.name == "smoke" else f"{where}: "
        return SmokeStatus.FAILED, dup(prefix), findings
    return SmokeStatus.PASSED, None, findings


def output_tail(text: str) -> str:
    """The last lines of `text`; the line that explains a crash stays in front of them."""
    keep = key_line(text, _ABORT_MARKERS)
    lines = text.rstrip().splitlines()[-_OUTPUT_TAIL_LINES:]
    tail = "\n".join(lines)[-_OUTPUT_TAIL_CHARS:]
    if keep and keep not in tail:
        tail = f"{keep}\n[…]\n{tail}"
    return tail
