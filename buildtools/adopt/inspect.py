"""What an existing extension's repository is: how it builds, what it compiles, its tests.

Read from the files alone (setup.py, pyproject.toml, CMakeLists.txt and the sources); no
process runs and nothing is imported, so it is safe on any checkout.
"""

from __future__ import annotations

__all__ = ["Inspection", "inspect_project"]

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..files import describe_os_error, read_regular
from .probes import host_probes

_SKIP_DIRS = {".git", ".tox", ".nox", "build", "dist", "node_modules", "third_party", "venv"}
_MAX_FILES = 5000
_ENV_READ = re.compile(
    r"""os\.(?:environ\.get|getenv)\(\s*["']([A-Z_][A-Z0-9_]*)["']|os\.environ\[\s*["']([A-Z_][A-Z0-9_]*)["']\s*\]"""
)
_LIMITED_API = re.compile(r"""py_limited_api["']?\s*[=:]\s*["']?(cp3\d+|True)""")
# setup(..., name="x", ...): the call's own keyword, not an Extension's name
_LIMITED_API_OFF = re.compile(r"^\s*py_limited_api\s*=\s*False\b", re.MULTILINE)
_SETUP_NAME = re.compile(
    r"""\bsetup\s*\((?:[^()]|\([^()]*\))*?\bname\s*=\s*["']([A-Za-z0-9_.\-]+)["']""", re.DOTALL
)
# setup.py fetching something while it builds (flash-attn's and causal-conv1d's
# CachedWheelsCommand downloads a prebuilt wheel from their GitHub releases instead of
# compiling, unless their FORCE_BUILD variable says otherwise)
_DOWNLOAD = re.compile(
    r"\b(?:urlretrieve|urlopen|requests\.get|httpx\.get|urllib3\.request)\s*\("
    r"|\b(?:wget|curl)\b\s+-"
)
# FORCE_BUILD = os.getenv("X_FORCE_BUILD", "FALSE") == "TRUE": (name, the value that builds)
_FORCE_BUILD = re.compile(
    r"""os\.(?:environ\.get|getenv)\(\s*["']([A-Z_][A-Z0-9_]*FORCE_BUILD[A-Z0-9_]*)["']"""
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
    module: str | None  # the top-level package or module to import

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


def _read(path: Path) -> str:
    """A source's text; empty when it is missing, unreadable, not a regular file (a FIFO
    would block, /dev/zero never end) or larger than SOURCE_BYTES."""
    try:
        return read_regular(path, max_bytes=SOURCE_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _read_build_file(path: Path) -> str:
    """A build file's text (empty when there is none); ConfigError when it is there but
    cannot be read as one: init would otherwise describe another repository than this."""
    try:
        return read_regular(path, max_bytes=SOURCE_BYTES).decode("utf-8", errors="replace")
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


# Two keys of pyproject.toml, read without a TOML parser (tomllib is Python >= 3.11 only)
_BUILD_BACKEND = re.compile(r"""^\s*build-backend\s*=\s*["']([\w.:]+)["']""", re.MULTILINE)
_PROJECT_NAME = re.compile(
    r"""^\[project\][^\[]*?^\s*name\s*=\s*["']([A-Za-z0-9_.\-]+)["']""", re.MULTILINE | re.DOTALL
)


def _backend(pyproject: str) -> str:
    m = _BUILD_BACKEND.search(pyproject)
    return m[1].split(".", 1)[0].replace("_", "-") if m else "setuptools"


def _cuda_gate(setup: str, probes: tuple[str, ...]) -> str | None:
    if re.search(r"torch\.cuda\.is_available\(\)", setup):
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


def _module(root: Path, name: str | None, files: list[Path]) -> str | None:
    for base in (root, root / "src"):
        packages = sorted(
            p.parent.name
            for p in base.glob("*/__init__.py")
            if p.parent.name not in ("tests", "test", "docs", "examples", "benchmarks")
        )
        if packages:
            wanted = (name or "").replace("-", "_").lower()
            return next((p for p in packages if p.lower() == wanted), packages[0])
    return name.replace("-", "_") if name else None


def inspect_project(root: Path) -> Inspection:
    """Read `root`'s build files and sources; raises nothing for an odd repository."""
    root = root.resolve()
    files = _files(root)
    rel = [f.relative_to(root).as_posix() for f in files]
    setup = _read_build_file(root / "setup.py")
    pyproject_text = _read_build_file(root / "pyproject.toml")
    found = _PROJECT_NAME.search(pyproject_text) or _SETUP_NAME.search(setup)
    name = found[1] if found else None
    # comments say what a build could do, not what it does
    build_text = re.sub(
        r"#[^\n]*", "", "\n".join([setup, pyproject_text, _read_build_file(root / "setup.cfg")])
    )
    # the tag (cp39) wins over a bare `py_limited_api=True` on the Extension
    values = [m[1] for m in _LIMITED_API.finditer(build_text)]
    limited = next((v for v in values if v != "True"), values[0] if values else None)
    if _LIMITED_API_OFF.search(build_text) and "True" not in values:
        limited = None  # PyTorch's template: `py_limited_api = False` switches it all off
    sources = [r for r in rel if r.endswith((".cu", ".cpp", ".cc", ".cxx", ".h", ".cuh"))]
    stable = any("torch/csrc/stable" in _read(root / r) for r in sources[:400])
    env_vars = sorted(
        {a or b for a, b in _ENV_READ.findall(setup)} - _WELL_KNOWN_ENV - {"FORCE_CUDA"}
    )
    tests = next((d for d in ("tests", "test") if (root / d).is_dir()), None)
    probes = host_probes(re.sub(r"#[^\n]*", "", setup))
    names = tuple(p.name for p in probes)
    return Inspection(
        root=root,
        name=name,
        build_files=tuple(
            f for f in ("setup.py", "pyproject.toml", "CMakeLists.txt") if (root / f).is_file()
        ),
        backend=_backend(pyproject_text),
        uses_cmake=(root / "CMakeLists.txt").is_file() or "cmake" in pyproject_text.lower(),
        cuda_sources=tuple(r for r in rel if r.endswith(".cu")),
        cpp_sources=tuple(r for r in rel if r.endswith((".cpp", ".cc", ".cxx"))),
        limited_api=limited,
        stable_abi=stable,
        cuda_gate=_cuda_gate(setup, names),
        host_probes=names,
        probes_hidden=all(p.hidden for p in probes),
        env_vars=tuple(env_vars),
        downloads=bool(_DOWNLOAD.search(build_text)),
        force_build=next(((m[1], m[2]) for m in _FORCE_BUILD.finditer(build_text)), None),
        tests_dir=tests,
        module=_module(root, name, files),
    )
