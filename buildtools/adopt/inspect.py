"""What an existing extension's repository is: how it builds, what it compiles, its tests.

Read from the files alone (setup.py, pyproject.toml, CMakeLists.txt and the sources); no
process runs and nothing is imported, so it is safe on any checkout. Every file is read
through `files.read_within` (a symbolic link leading out of the repository is refused, not
followed), and every pattern is matched line by line or against one string, or the file is
parsed with `ast`: time linear in the input, whatever it holds.
"""

from __future__ import annotations

__all__ = ["Inspection", "inspect_project"]

import ast
import keyword
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, UnsafeArtefactError
from ..files import describe_os_error, read_within
from .archflags import ArchFlag
from .archscan import scan_cmake, scan_pyproject, scan_script, scan_setup_py
from .probes import host_probes
from .smokedeps import smoke_requirements

_SKIP_DIRS = {".git", ".tox", ".nox", "build", "dist", "node_modules", "third_party", "venv"}
_MAX_FILES = 5000
_ENV_READ = re.compile(
    r"""os\.(?:environ\.get|getenv)\(\s*["']([A-Z_][A-Z0-9_]*)["']|os\.environ\[\s*["']([A-Z_][A-Z0-9_]*)["']\s*\]"""
)
_LIMITED_API = re.compile(r"""py_limited_api["']?[ \t]*[=:][ \t]*["']?(cp3\d+|True)""")
# [ \t], not \s: `^\s*` in multiline mode runs over every blank line below each line start
_LIMITED_API_OFF = re.compile(r"^[ \t]*py_limited_api[ \t]*=[ \t]*False\b", re.MULTILINE)
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
# setup.py fetching something while it builds (flash-attn's and causal-conv1d's
# CachedWheelsCommand downloads a prebuilt wheel from their GitHub releases instead of
# compiling, unless their FORCE_BUILD variable says otherwise)
_DOWNLOAD = re.compile(
    r"\b(?:urlretrieve|urlopen|requests\.get|httpx\.get|urllib3\.request)\s*\("
    r"|\b(?:wget|curl)\b\s+-"
)
# FORCE_BUILD = os.getenv("X_FORCE_BUILD", "FALSE") == "TRUE": (name, the value that builds)
# (the name is checked for FORCE_BUILD apart: `[A-Z0-9_]*FORCE_BUILD[A-Z0-9_]*` backtracks)
_FORCE_BUILD = re.compile(
    r"""os\.(?:environ\.get|getenv)\(\s*["']([A-Z_][A-Z0-9_]*)["']"""
    r"""(?:\s*,\s*["'][^"'\n]*["'])?\s*\)\s*==\s*["']([A-Za-z0-9_]+)["']"""
)
# variables every torch build reads anyway: no need to list them in build_env
_WELL_KNOWN_ENV = {
    "CUDA_HOME",
    "ROCM_HOME",
    "MAX_JOBS",
    "TORCH_CUDA_ARCH_LIST",
    "PYTORCH_ROCM_ARCH",
    "BUILDTOOLS_PY_LIMITED_API",
    "BUILDTOOLS_TORCH_TARGET_VERSION",
    "CC",
    "CXX",
    "CFLAGS",
    "CXXFLAGS",
    "LDFLAGS",
    "PATH",
    "HOME",
}


@dataclass(frozen=True, kw_only=True)
class Inspection:
    """An extension repository as its files describe it."""

    root: Path
    name: str | None
    build_files: tuple[str, ...]  # setup.py, pyproject.toml, CMakeLists.txt present
    backend: str  # the PEP 517 backend, "setuptools" when only setup.py
    uses_cmake: bool
    cuda_sources: tuple[str, ...]  # .cu files, relative to root
    cpp_sources: tuple[str, ...]  # .cpp/.cc/.cxx files
    limited_api: str | None  # "cp39" when the build sets py_limited_api itself ("True": unset)
    stable_abi: bool  # includes torch/csrc/stable
    cuda_gate: str | None  # how setup.py decides to build CUDA, in words
    # how setup.py probes the build machine for CUDA/ROCm ('runs nvcc', 'reads CUDA_HOME')
    host_probes: tuple[str, ...] = ()
    probes_hidden: bool = True  # buildtools hides every one of them from a CPU cell's build
    env_vars: tuple[str, ...]  # environment variables the build files read
    downloads: bool = False  # setup.py fetches something over the network while it builds
    force_build: tuple[str, str] | None = None  # (variable, value) that makes it compile
    tests_dir: str | None
    module: str | None  # the top-level package or module to import (a dotted identifier)
    # what the tests import at top level beside pytest and torch (distribution names)
    smoke_requires: tuple[str, ...] = ()
    # arch flags the project sets itself (setup.py, CMake, scripts), each with its place
    arch_flags: tuple[ArchFlag, ...] = ()
    notes: tuple[str, ...] = ()  # what init left out and why, one line each

    @property
    def has_cuda(self) -> bool:
        return bool(self.cuda_sources)

    @property
    def abi(self) -> str:
        if self.stable_abi:
            return "stable"
        return "abi3" if self.limited_api else "per-python"

    def describe(self) -> str:
        """One line: the build style."""
        parts = [self.backend + (" + CMake" if self.uses_cmake else "")]
        if self.cuda_sources:
            parts.append(f"{len(self.cuda_sources)} .cu file(s)")
        if self.cpp_sources:
            parts.append(f"{len(self.cpp_sources)} C++ file(s)")
        if self.limited_api:
            parts.append(f"py_limited_api ({self.limited_api})")
        if self.stable_abi:
            parts.append("LibTorch stable ABI")
        return ", ".join(parts)


SOURCE_BYTES = 16 << 20  # a source or build file read whole (generated sources run to MBs)


def read_source(root: Path, rel: str) -> str:
    """A source's text; empty when it is missing, unreadable, not a regular file (a FIFO
    would block, /dev/zero never end), larger than SOURCE_BYTES or behind a symbolic link
    leading out of `root`."""
    try:
        return read_within(root, rel, max_bytes=SOURCE_BYTES).decode("utf-8", errors="replace")
    except (OSError, UnsafeArtefactError):
        return ""


def read_build_file(root: Path, rel: str) -> str:
    """A build file's text (empty when there is none); ConfigError when it is there but
    cannot be read as one, UnsafeArtefactError when it is a link out of the repository:
    init would otherwise describe another repository than this."""
    try:
        return read_within(root, rel, max_bytes=SOURCE_BYTES).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise ConfigError(f"{describe_os_error(exc)} (init reads the build files)") from None


def _files(root: Path) -> list[Path]:
    out: list[Path] = []
    stack = [root]
    while stack and len(out) < _MAX_FILES:
        here = stack.pop()
        try:
            entries = sorted(here.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.is_symlink():
                continue
            if entry.is_dir():
                if entry.name not in _SKIP_DIRS and not entry.name.startswith("."):
                    stack.append(entry)
            elif entry.is_file():
                out.append(entry)
    return out


# Two keys of pyproject.toml, read line by line without a TOML parser (tomllib is Python
# >= 3.11 only): its build backend and [project] name
_BUILD_BACKEND = re.compile(r"""[ \t]*build-backend[ \t]*=[ \t]*["']([\w.:]+)["']""")
_KEY_NAME = re.compile(r"""[ \t]*name[ \t]*=[ \t]*["']([A-Za-z0-9_.\-]+)["']""")


def _backend(pyproject: str) -> str:
    for line in pyproject.splitlines():
        m = _BUILD_BACKEND.match(line)
        if m:
            return m[1].split(".", 1)[0].replace("_", "-")
    return "setuptools"


def _project_name(pyproject: str) -> str | None:
    table = None
    for line in pyproject.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            table = stripped.split("#", 1)[0].strip()
            continue
        if table == "[project]":
            m = _KEY_NAME.match(line)
            if m:
                return m[1]
    return None


def _setup_facts(setup: str) -> tuple[str | None, tuple[str, ...]]:
    """setup.py read with `ast`: setup(name=…) and the top-level names of its extensions."""
    try:
        tree = ast.parse(setup)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None, ()
    name = None
    modules: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        given = {k.arg: k.value for k in node.keywords if k.arg}
        first = node.args[0] if node.args else given.get("name")
        value = first.value if isinstance(first, ast.Constant) else None
        named = given.get("name")
        if func == "setup" and isinstance(named, ast.Constant) and isinstance(named.value, str):
            name = named.value if _NAME.fullmatch(named.value) else name
        elif func.endswith("Extension") and isinstance(value, str):
            modules.append(value.split(".", 1)[0])
    return name, tuple(dict.fromkeys(modules))


def _cuda_gate(setup: str, probes: tuple[str, ...]) -> str | None:
    if "torch.cuda.is_available()" in setup:
        return "torch.cuda.is_available() at build time"
    if probes:
        return f"probing the build machine ({', '.join(probes)})"
    if "FORCE_CUDA" in setup:
        return "the FORCE_CUDA variable"
    if "CUDA_HOME" in setup:
        return "CUDA_HOME"
    if "CUDAExtension" in setup:
        return "always (CUDAExtension)"
    return None


def is_module_name(name: str) -> bool:
    """A dotted name `import` takes: identifiers, none a keyword (never code to paste)."""
    return all(p.isidentifier() and not keyword.iskeyword(p) for p in name.split("."))


_NOT_PACKAGES = ("tests", "test", "docs", "examples", "benchmarks")


def _packages(base: Path) -> tuple[list[str], list[str]]:
    """(the top-level packages of `base` whose names `import` takes, the names it does not)."""
    names = sorted(p.parent.name for p in base.glob("*/__init__.py"))
    names = [n for n in names if n not in _NOT_PACKAGES]
    return [n for n in names if is_module_name(n)], [n for n in names if not is_module_name(n)]


def _module(root: Path, name: str | None) -> tuple[str | None, list[str]]:
    """The package to import, and notes on the names left out (not identifiers: a directory
    named `x;import os` never becomes code in project.smoke)."""
    notes = []
    for base in (root, root / "src"):
        packages, odd = _packages(base)
        notes += [
            f"package directory {p!r} is not a Python identifier: left out of project.smoke"
            for p in odd
        ]
        if packages:
            wanted = (name or "").replace("-", "_").lower()
            return next((p for p in packages if p.lower() == wanted), packages[0]), notes
    guess = name.replace("-", "_") if name else None
    return (guess if guess and is_module_name(guess) else None), notes


_VENDORED = {"third_party", "third-party", "thirdparty", "3rdparty", "external", "extern"} | {
    "vendor",
    "submodules",
}


def _arch_flags(
    root: Path, rel: list[str], setup: str, pyproject: str, cmake: bool
) -> list[ArchFlag]:
    """Every place that fixes the archs: setup.py, pyproject.toml, CMake files (part of the
    build when it is a CMake one), build scripts (never part of it)."""
    flags = scan_setup_py(setup) + scan_pyproject(pyproject)
    for path in rel:
        parts = path.split("/")
        if any(p.lower() in _VENDORED for p in parts[:-1]):
            continue
        if parts[-1] == "CMakeLists.txt" or path.endswith(".cmake"):
            flags += scan_cmake(read_source(root, path), path, in_build=cmake)
        elif path.endswith(".sh"):
            flags += scan_script(read_source(root, path), path)
    return flags


_CMAKE_IN_SETUP = re.compile(r"""["']cmake["']|\bcmake_args\b|\bCMake(?:Extension|Build)\b""")


def _runs_cmake(setup: str, pyproject: str) -> bool:
    """Whether the build runs CMake (a CMake backend, or a setup.py that calls it), so that its
    CMake files' arch settings are what gets compiled; a CMakeLists.txt beside a plain
    setuptools build (torch-scatter's, for C++ users) is not."""
    backend = _backend(pyproject)
    code = re.sub(r"#[^\n]*", "", setup)
    return "scikit" in backend or "cmake" in backend or bool(_CMAKE_IN_SETUP.search(code))


def inspect_project(root: Path) -> Inspection:
    """Read `root`'s build files and sources; raises nothing for an odd repository, but
    refuses a build file that is a link out of it (UnsafeArtefactError)."""
    root = root.resolve()
    files = _files(root)
    rel = [f.relative_to(root).as_posix() for f in files]
    setup = read_build_file(root, "setup.py")
    pyproject_text = read_build_file(root, "pyproject.toml")
    setup_name, extensions = _setup_facts(setup)
    name = _project_name(pyproject_text) or setup_name
    # comments say what a build could do, not what it does
    build_text = re.sub(
        r"#[^\n]*", "", "\n".join([setup, pyproject_text, read_build_file(root, "setup.cfg")])
    )
    # the tag (cp39) wins over a bare `py_limited_api=True` on the Extension
    values = [m[1] for m in _LIMITED_API.finditer(build_text)]
    limited = next((v for v in values if v != "True"), values[0] if values else None)
    if _LIMITED_API_OFF.search(build_text) and "True" not in values:
        limited = None  # PyTorch's template: `py_limited_api = False` switches it all off
    sources = [r for r in rel if r.endswith((".cu", ".cpp", ".cc", ".cxx", ".h", ".cuh"))]
    stable = any("torch/csrc/stable" in read_source(root, r) for r in sources[:400])
    env_vars = sorted(
        {a or b for a, b in _ENV_READ.findall(setup)} - _WELL_KNOWN_ENV - {"FORCE_CUDA"}
    )
    tests = next((d for d in ("tests", "test") if (root / d).is_dir()), None)
    probes = host_probes(re.sub(r"#[^\n]*", "", setup))
    names = tuple(p.name for p in probes)
    module, notes = _module(root, name)
    uses_cmake = (root / "CMakeLists.txt").is_file() or "cmake" in pyproject_text.lower()
    requires: tuple[str, ...] = ()
    if tests is not None:
        own = {*_packages(root)[0], *_packages(root / "src")[0], *extensions}
        own |= {*(module or "").split(".")[:1]}
        own |= {r.removesuffix(".py") for r in rel if "/" not in r and r.endswith(".py")}
        test_files = [r for r in rel if r.startswith(f"{tests}/") and r.endswith(".py")]
        requires, more = smoke_requirements(
            test_files, read=lambda r: read_source(root, r), own=own
        )
        notes += more
    return Inspection(
        root=root,
        name=name,
        build_files=tuple(
            f for f in ("setup.py", "pyproject.toml", "CMakeLists.txt") if (root / f).is_file()
        ),
        backend=_backend(pyproject_text),
        uses_cmake=uses_cmake,
        cuda_sources=tuple(r for r in rel if r.endswith(".cu")),
        cpp_sources=tuple(r for r in rel if r.endswith((".cpp", ".cc", ".cxx"))),
        limited_api=limited,
        stable_abi=stable,
        cuda_gate=_cuda_gate(setup, names),
        host_probes=names,
        probes_hidden=all(p.hidden for p in probes),
        env_vars=tuple(env_vars),
        downloads=bool(_DOWNLOAD.search(build_text)),
        force_build=next(
            ((m[1], m[2]) for m in _FORCE_BUILD.finditer(build_text) if "FORCE_BUILD" in m[1]),
            None,
        ),
        tests_dir=tests,
        module=module,
        smoke_requires=requires,
        arch_flags=tuple(
            _arch_flags(root, rel, setup, pyproject_text, _runs_cmake(setup, pyproject_text))
        ),
        notes=tuple(notes),
    )
