"""The child side of the probe: runs inside the inspected interpreter and prints what it has.

`buildtools.probe.hostenv` runs this file's text with `python [-I] -c TEXT FLAG…` in any
CPython >= 3.8, so nothing here imports buildtools and nothing needs a newer Python at run
time. Each report is one tagged JSON line, flushed before the next step is taken:

    (no flag), --static  the static report: the interpreter, its site directories, every
                         distribution, and where torch is with its torch/version.py read, not
                         imported (an import that aborts must not hide the rest)
    --import-torch       `import torch` and what it says (version, CUDA/HIP, C++ ABI, the arch
                         list and the GPUs it sees); alone, only that, so a crash in a process
                         of its own loses nothing else; with --static, after the static line
    --no-files           distributions by name, version and location only (torch's in full);
                         without it also their shared objects (RECORD), build record,
                         direct_url.json, installer and requirements
    --no-devices         no arch list and no GPUs (asking initialises CUDA)

buildtools imports `read_version_py` from here as well: the one reader of torch/version.py.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

TAG = "BUILDTOOLS_ENV "
SCHEMA = 1


def read_version_py(path: str | os.PathLike[str]) -> dict[str, str | bool | int | None]:
    """The literal assignments of torch/version.py (`__version__`, `cuda`, `hip`, `debug`,
    `git_version`), read without importing torch; {} when the file cannot be read."""
    out: dict[str, str | bool | int | None] = {}
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return out
    for node in tree.body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and value is not None:
            try:
                v = ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError):
                continue
            if v is None or isinstance(v, (str, bool, int)):
                out[target.id] = v
    return out


def _site_dirs() -> list[str]:
    import site
    import sysconfig

    dirs: list[str] = []
    with contextlib.suppress(AttributeError):  # an old virtualenv's site module
        dirs += list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    paths = sysconfig.get_paths()
    dirs += [paths["purelib"], paths["platlib"]]
    for p in sys.path:
        if p and p not in dirs and Path(p).name in ("site-packages", "dist-packages"):
            dirs.append(p)
    seen: list[str] = []
    for d in dirs:
        if Path(d).is_dir() and d not in seen:
            seen.append(d)
    return seen


def _distributions(*, files: bool) -> list[dict[str, Any]]:
    import importlib.metadata as md

    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        key = name.lower().replace("_", "-").replace(".", "-")
        if key in seen:
            continue  # shadowed by an earlier entry of sys.path
        seen.add(key)
        entry: dict[str, Any] = {
            "name": name,
            "version": dist.version,
            "location": os.path.normpath(str(dist.locate_file(""))),
        }
        if files or key == "torch":
            listed = dist.files
            sos = [
                os.path.normpath(str(dist.locate_file(f)))
                for f in listed or ()
                if f.name.endswith(".so") or ".so." in f.name
            ]

            def text(name: str, dist: Any = dist) -> str | None:
                try:
                    found = dist.read_text(name)
                except Exception:
                    return None
                return found if isinstance(found, str) else None

            entry.update(
                shared_objects=sos,
                has_record=listed is not None,
                build_record=text("buildtools.json"),
                direct_url=text("direct_url.json"),
                installer=(text("INSTALLER") or "").strip() or None,
                # only where doctor reads them (an exact torch pin): keeps the output small
                requires=list(dist.requires or []) if (sos or key == "torch") else [],
            )
        out.append(entry)
    return out


def static_report(*, files: bool) -> dict[str, Any]:
    """The interpreter, its site directories and distributions, and torch's files."""
    import importlib.util
    import sysconfig

    info: dict[str, Any] = {
        "schema": SCHEMA,
        "python": {
            "version": platform.python_version(),
            "implementation": sys.implementation.name,
            "executable": sys.executable,
            "prefix": sys.prefix,
            "base_prefix": getattr(sys, "base_prefix", sys.prefix),
            "machine": platform.machine(),
            "purelib": sysconfig.get_paths()["purelib"],
        },
        "site_dirs": _site_dirs(),
        "dists": _distributions(files=files),
        "torch": None,
    }
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError) as exc:
        info["torch_error"] = type(exc).__name__ + ": " + str(exc)
        return info
    if spec is not None and spec.origin:
        pkg = Path(os.path.abspath(spec.origin)).parent  # noqa: PTH100 (no symlink resolution)
        info["torch"] = {
            "package_dir": str(pkg),
            "version_py": read_version_py(pkg / "version.py"),
        }
    return info


def _driver_cuda(torch: Any) -> str | None:
    """The CUDA version the driver supports ("13.0"), asked without a device: torch's private
    binding where it has one, else cuDriverGetVersion from libcuda.so.1; None: no driver."""
    number = 0
    binding = getattr(torch._C, "_cuda_getDriverVersion", None)
    if callable(binding):
        with contextlib.suppress(Exception):
            number = int(binding())
    if number <= 0:
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            value = ctypes.c_int(0)
            if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(value)) == 0:
                number = value.value
    return f"{number // 1000}.{number % 1000 // 10}" if number > 0 else None


def import_report(*, devices: bool) -> dict[str, Any]:
    """What `import torch` reports; {"error": …} when the import raises."""
    import importlib

    out: dict[str, Any] = {}
    try:
        torch = importlib.import_module("torch")
    except BaseException as exc:  # SystemExit too: the report is all this process is for
        out["error"] = type(exc).__name__ + ": " + str(exc)
        return out
    version = getattr(torch, "version", None)
    out["version"] = str(torch.__version__)
    out["file"] = os.path.abspath(str(torch.__file__))  # noqa: PTH100 (no symlink resolution)
    out["cuda"] = getattr(version, "cuda", None)
    out["hip"] = getattr(version, "hip", None)
    out["git_version"] = getattr(version, "git_version", None)
    try:
        out["cxx11_abi"] = bool(torch._C._GLIBCXX_USE_CXX11_ABI)
    except AttributeError:
        out["cxx11_abi"] = None
    if not devices:
        return out
    gpus: list[dict[str, Any]] = []
    try:
        if getattr(version, "cuda", None):
            driver_cuda = _driver_cuda(torch)
            if driver_cuda:
                out["driver_cuda"] = driver_cuda
        out["arch_list"] = list(torch.cuda.get_arch_list())
        out["device_available"] = bool(torch.cuda.is_available())
        out["device_count"] = int(torch.cuda.device_count())
        if out["device_available"]:
            for i in range(out["device_count"]):
                p = torch.cuda.get_device_properties(i)
                gpus.append(
                    {
                        "index": i,
                        "name": str(p.name),
                        "capability": [int(p.major), int(p.minor)],
                        # CUDA builds answer gcnArchName with the device's name
                        "gcn_arch": getattr(p, "gcnArchName", None)
                        if getattr(version, "hip", None)
                        else None,
                    }
                )
    except Exception as exc:
        out["device_error"] = type(exc).__name__ + ": " + str(exc)
    out["gpus"] = gpus
    return out


def _say(data: dict[str, Any]) -> None:
    sys.stdout.write(TAG + json.dumps(data) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> None:
    """Print the reports `argv` asks for (see the module docstring)."""
    import_torch = "--import-torch" in argv
    if "--static" in argv or not import_torch:
        _say(static_report(files="--no-files" not in argv))
    if import_torch:
        _say({"imported": import_report(devices="--no-devices" not in argv)})


if __name__ == "__main__":
    main(sys.argv[1:])
