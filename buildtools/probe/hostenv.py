"""What a Python environment has installed, as that environment's own interpreter reports it.

Every stage that asks "which torch is installed here" asks through this module: the
toolchain (verifying a new environment, reusing a cached one), `torch: current`, `doctor`,
`smoke` and the wheel checks. The script in `buildtools.probe.inspector` runs in a child
process of that interpreter, through the ProcessRunner, in up to two steps:

1. a static report that never imports torch (an import that aborts must not hide the rest):
   torch's location and `torch/version.py`, every distribution (with its shared objects from
   RECORD, its build record, `direct_url.json` and installer where asked);
2. `import torch`: `torch.__version__`, the C++ ABI flag, the arch list it was compiled for
   and the GPUs it sees; in a second process (doctor: when it dies, the report says how), or
   in the same one where one process is cheaper (the toolchain).

`parse_snapshot` turns the output into an `EnvSnapshot` whose `torch` is the one record of an
installed torch, `torchinstall.TorchInstall`.
"""

from __future__ import annotations

__all__ = [
    "BUILD_WORDS",
    "DistInfo",
    "EnvSnapshot",
    "parse_snapshot",
    "probe_environment",
    "probe_script",
    "read_torch_install",
]

import functools
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from packaging.utils import canonicalize_name

from ..context import RunContext
from ..errors import ToolMissingError
from ..jsonfields import decode_json
from ..process import ProcessRunner
from ..torchinstall import TorchInstall
from .inspector import TAG, read_version_py

BUILD_WORDS: Mapping[str, str] = {
    "release": "release wheel",
    "prerelease": "pre-release wheel",
    "nightly": "nightly wheel",
    "source": "source build",
    "vendor": "vendor build",
}


@functools.cache
def probe_script() -> str:
    """The text the child interpreter runs (`python -c`): buildtools/probe/inspector.py."""
    return Path(__file__).with_name("inspector.py").read_text(encoding="utf-8")


# --- records -------------------------------------------------------------------------------


def _file_url_path(url: str) -> Path | None:
    parsed = urlparse(url)
    if parsed.scheme != "file":
        return None
    return Path(unquote(parsed.path))


@dataclass(frozen=True, kw_only=True)
class DistInfo:
    """One installed distribution, with the shared objects its RECORD lists."""

    name: str
    version: str
    location: Path  # the directory its RECORD paths are relative to (site-packages)
    shared_objects: tuple[Path, ...] = ()
    has_record: bool = True
    build_record: str | None = None  # raw text of <dist-info>/buildtools.json
    direct_url: Mapping[str, Any] | None = None
    installer: str | None = None
    requires: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)

    @property
    def editable(self) -> bool:
        info = (self.direct_url or {}).get("dir_info")
        return isinstance(info, dict) and bool(info.get("editable"))

    @property
    def source_dir(self) -> Path | None:
        """The local source directory it was installed from, when that is recorded."""
        if not self.direct_url or "dir_info" not in self.direct_url:
            return None
        url = self.direct_url.get("url")
        return _file_url_path(url) if isinstance(url, str) else None


@dataclass(frozen=True, kw_only=True)
class EnvSnapshot:
    """A Python environment as its interpreter reports it."""

    python: Path
    python_version: str  # "3.11.7"
    implementation: str = "cpython"
    prefix: Path | None = None
    base_prefix: Path | None = None
    machine: str = field(default_factory=platform.machine)
    site_packages: Path | None = None  # its own purelib: where an install goes
    site_dirs: tuple[Path, ...] = ()
    dists: tuple[DistInfo, ...] = ()
    torch: TorchInstall | None = None

    @property
    def python_xy(self) -> str:
        return ".".join(self.python_version.split(".")[:2])

    @property
    def in_venv(self) -> bool:
        return self.prefix is not None and self.prefix != self.base_prefix

    @property
    def platform(self) -> str:
        return f"linux_{self.machine}"


# --- parsing -------------------------------------------------------------------------------


def _tagged(output: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for line in output.splitlines():
        if line.startswith(TAG):
            try:
                data = decode_json(line[len(TAG) :], what="the probe's line")
            except ValueError:
                continue
            if isinstance(data, dict):
                found.append(data)
    return found


def _json_or_none(text: object) -> dict[str, Any] | None:
    if not isinstance(text, str):
        return None
    try:
        data = decode_json(text, what="the probe's record")
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _tail(output: str, lines: int = 6) -> str:
    kept = [ln for ln in output.strip().splitlines() if not ln.startswith(TAG)]
    return "\n".join(kept[-lines:])


def _dist(d: Mapping[str, Any]) -> DistInfo:
    return DistInfo(
        name=str(d["name"]),
        version=str(d["version"]),
        location=Path(d["location"]),
        shared_objects=tuple(Path(p) for p in d.get("shared_objects", ())),
        has_record=bool(d.get("has_record", True)),
        build_record=_opt_str(d.get("build_record")),
        direct_url=_json_or_none(d.get("direct_url")),
        installer=_opt_str(d.get("installer")),
        requires=tuple(str(r) for r in d.get("requires", ())),
    )


def _from_version_py(values: Mapping[str, object], package_dir: Path, **more: Any) -> TorchInstall:
    """The record of the torch in `package_dir` whose torch/version.py holds `values`."""
    return TorchInstall.from_json(
        {
            "version": values.get("__version__"),
            "package_dir": str(package_dir),
            "cuda": values.get("cuda"),
            "hip": values.get("hip"),
            "git_version": values.get("git_version"),
            "debug": values.get("debug"),
            **more,
        }
    )


def _static_torch(
    raw: Mapping[str, Any], dists: tuple[DistInfo, ...], py: Mapping[str, Any]
) -> TorchInstall:
    """torch as its files describe it: version.py, else its distribution's version."""
    values = dict(raw.get("version_py") or {})
    package_dir = Path(raw["package_dir"])
    dist = next((d for d in dists if d.key == "torch" and d.location == package_dir.parent), None)
    dist = dist or next((d for d in dists if d.key == "torch"), None)
    if not _opt_str(values.get("__version__")):
        values["__version__"] = dist.version if dist else "unknown"
    return _from_version_py(
        values,
        package_dir,
        requires=list(dist.requires) if dist else [],
        dist_version=dist.version if dist else None,
        has_record=dist.has_record if dist else False,
        direct_url=dist.direct_url if dist else None,
        installer=dist.installer if dist else None,
        python=py.get("executable"),
        python_version=py.get("version"),
        platform=f"linux_{py.get('machine') or platform.machine()}",
    )


_IMPORTED_KEYS = ("version", "cuda", "hip", "git_version")


def _with_import(
    torch: TorchInstall, imported: Mapping[str, Any] | None, output: str
) -> TorchInstall:
    """`torch` completed by what `import torch` said (None: the import left no report)."""
    if imported is None:
        return replace(torch, imported=False, import_error=_tail(output) or "no output")
    if imported.get("error"):
        return replace(torch, imported=False, import_error=str(imported["error"]))
    said = {k: v for k, v in imported.items() if v is not None and k in _IMPORTED_KEYS}
    if imported.get("file"):
        said["package_dir"] = str(Path(imported["file"]).parent)
    # what the import said wins; the ABI, archs and GPUs only it can say
    return TorchInstall.from_json(
        {
            **torch.to_json(),
            **said,
            "cxx11_abi": imported.get("cxx11_abi"),
            "arch_list": imported.get("arch_list") or [],
            "gpus": imported.get("gpus") or [],
            "device_available": imported.get("device_available"),
            "device_count": imported.get("device_count"),
            "driver_cuda": imported.get("driver_cuda"),
            "device_error": imported.get("device_error"),
            "imported": True,
        }
    )


def _imported(output: str) -> dict[str, Any] | None:
    return next(
        (r["imported"] for r in _tagged(output) if isinstance(r.get("imported"), dict)), None
    )


def parse_snapshot(static_output: str, import_output: str | None = None) -> EnvSnapshot:
    """Read the probe's output: the static report, and what `import torch` said, from
    `import_output` where the import ran in a process of its own, else from an import report
    following the static one (`--static --import-torch`), if there is one."""
    static = next((r for r in _tagged(static_output) if "python" in r), None)
    if static is None:
        raise ValueError("no probe result in the output")
    py = static["python"]
    dists = tuple(_dist(d) for d in static.get("dists", ()))
    torch: TorchInstall | None = None
    raw = static.get("torch")
    if isinstance(raw, dict):
        torch = _static_torch(raw, dists, py)
        if import_output is not None:
            torch = _with_import(torch, _imported(import_output), import_output)
        elif (imported := _imported(static_output)) is not None:
            torch = _with_import(torch, imported, static_output)
    return EnvSnapshot(
        python=Path(py["executable"]),
        python_version=str(py["version"]),
        implementation=str(py.get("implementation", "cpython")),
        prefix=Path(py["prefix"]) if py.get("prefix") else None,
        base_prefix=Path(py["base_prefix"]) if py.get("base_prefix") else None,
        machine=str(py.get("machine") or platform.machine()),
        site_packages=Path(py["purelib"]) if py.get("purelib") else None,
        site_dirs=tuple(Path(p) for p in static.get("site_dirs", ())),
        dists=dists,
        torch=torch,
    )


# --- running -------------------------------------------------------------------------------


def _exited(returncode: int, output: str, *, timed_out: bool = False, timeout: float = 0) -> str:
    if timed_out:
        return (
            f"`import torch` did not finish within {timeout:g} s and was killed (a hang: a "
            f"network file system, a lock, a debugger hook?): {_tail(output) or 'no output'}"
        )
    signal = f" (killed by signal {-returncode})" if returncode < 0 else ""
    return f"`import torch` exited {returncode}{signal}: {_tail(output) or 'no output'}"


def probe_environment(  # noqa: PLR0913
    python: Path,
    *,
    ctx: RunContext,
    import_torch: bool = True,
    separate_import: bool = True,
    devices: bool = True,
    files: bool = True,
    isolated: bool = False,
    timeout: float = 300,
) -> EnvSnapshot:
    """Ask `python` what it has installed (and, with `import_torch`, what torch reports).

    `separate_import` imports torch in a second process, so a crash or a hang there loses
    nothing of the static report; otherwise one process does both (the static report is
    printed first). `devices` asks torch for its arch list and GPUs, `files` lists every
    distribution's shared objects. The interpreter runs as the user runs it (PYTHONPATH and
    the user site count, as they do for the import that fails) unless `isolated` (-I).
    Raises ToolMissingError when it does not run.
    """
    argv = [str(python), *(["-I"] if isolated else []), "-c", probe_script()]
    argv += [*([] if files else ["--no-files"]), *([] if devices else ["--no-devices"])]
    combined = import_torch and not separate_import
    first = [*argv, "--static", "--import-torch"] if combined else argv
    result = ctx.run(first, capture=True, timeout=timeout)
    # a combined run that died importing torch has printed its static report already
    if not result.ok and not (combined and _tagged(result.output)):
        raise ToolMissingError(
            f"{python}: does not run as a Python interpreter (exit {result.returncode}): "
            f"{_tail(result.output) or 'no output'}; pass --python PATH of the environment's "
            "interpreter (e.g. .venv/bin/python)"
        )
    try:
        snapshot = parse_snapshot(result.output)
    except (ValueError, KeyError, TypeError) as exc:
        raise ToolMissingError(
            f"{python}: its report could not be read ({exc}); is it CPython >= 3.8?"
        ) from exc
    torch = snapshot.torch
    if torch is None or not import_torch:
        return snapshot
    if combined:
        if not result.ok or torch.imported is None:  # it died importing torch
            died = _exited(
                result.returncode, result.output, timed_out=result.timed_out, timeout=timeout
            )
            torch = replace(torch, imported=False, import_error=died)
        return replace(snapshot, torch=torch)
    imported = ctx.run([*argv, "--import-torch"], capture=True, timeout=timeout)
    if not imported.ok:
        died = _exited(
            imported.returncode, imported.output, timed_out=imported.timed_out, timeout=timeout
        )
        return replace(snapshot, torch=replace(torch, imported=False, import_error=died))
    return parse_snapshot(result.output, imported.output)


def read_torch_install(
    site_packages: Path, *, runner: ProcessRunner | None = None
) -> TorchInstall | None:
    """The torch in the directory `site_packages`, read from torch/version.py (no import).

    With a `runner`, a torch whose version.py cannot be read is asked directly: the
    interpreter of that environment (<env>/bin/python) imports it. None when neither says.
    """
    package_dir = site_packages / "torch"
    values = read_version_py(package_dir / "version.py")
    version = values.get("__version__")
    if isinstance(version, str) and version:
        return _from_version_py(values, package_dir)
    if runner is None or len(site_packages.parents) < 3:
        return None
    # <env>/lib/pythonX.Y/site-packages → <env>/bin/python
    python = site_packages.parents[2] / "bin" / "python"
    try:
        snapshot = probe_environment(
            python,
            ctx=RunContext.of(processes=runner),
            separate_import=False,
            devices=False,
            files=False,
        )
    except ToolMissingError:
        return None
    torch = snapshot.torch
    return torch if torch is not None and torch.imported else None
