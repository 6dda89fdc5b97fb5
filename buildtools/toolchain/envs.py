"""Per-job build environments: a cached venv with the cell's exact Python, torch and toolkit.

A toolchain is created once under the cache directory and reused while its key (Python
full version, torch requirement and index, accelerator, toolkit, schema) is unchanged. The
marker file holding the key is written last and atomically, so an environment whose
creation was interrupted, or whose key differs, is never used: it is removed and rebuilt.

After installing, the environment is verified against the cell (torch version, CUDA/HIP
version, C++ ABI). CUDA cells get their compiler from a system `CUDA_HOME` whose `nvcc`
matches torch's CUDA major.minor, or else from NVIDIA's PyPI wheels pinned to the versions
the installed torch itself requires, with the fixes those wheels need to build extensions.
"""

from __future__ import annotations

__all__ = [
    "BUILD_REQUIREMENTS",
    "SCHEMA_VERSION",
    "CudaToolkit",
    "EnvProbe",
    "Toolchain",
    "ToolchainIdentity",
    "check_torch",
    "cuda_toolkit_requirements",
    "find_python",
    "locate_cuda_wheels",
    "parse_nvcc_version",
    "prepare_toolchain",
    "toolchain_identity",
    "toolchain_key",
]

import contextlib
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from shlex import join as shlex_join
from typing import IO, Any

from packaging.markers import UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from ..ecosystem import load_ecosystem
from ..errors import ToolchainError, ToolMissingError
from ..locks import file_lock
from ..model import Accelerator, BuildJob
from ..runner import Runner
from .installer import (
    read_pip_config,
    select_installer,
    uv_cache_dir,
    uv_install_argv,
    uv_options,
    uv_venv_argv,
)
from .pythons import find_python

SCHEMA_VERSION = 1
BUILD_REQUIREMENTS: tuple[str, ...] = ("setuptools", "wheel", "ninja", "build")
MARKER = "buildtools-toolchain.json"
# Components of NVIDIA's `cuda-toolkit` metapackage that make a complete nvcc: the driver,
# its CRT headers, CCCL (thrust/cub), the runtime and NVVM (pinned: an unpinned nvidia-nvvm
# is newer than ptxas and fails with "Unsupported .version").
CUDA_TOOLKIT_EXTRAS = ("nvcc", "crt", "cccl", "cudart", "nvvm")
# Distributions whose major.minor must equal torch's CUDA (compiler parts; libraries such
# as cublas have their own version numbers).
_COMPILER_DISTS = re.compile(r"^nvidia-(cuda-(nvcc|crt|cccl|runtime)|nvvm)(-cu\d+)?$")
_NVCC_RELEASE = re.compile(r"release (\d+\.\d+)")
_PROBE_TAG = "BUILDTOOLS_PROBE "
_PROBE = f"""
import importlib.metadata as md, json, os, platform, sys, sysconfig
info = {{
    "python_version": platform.python_version(),
    "implementation": sys.implementation.name,
    "site_packages": sysconfig.get_paths()["purelib"],
    "prefix": sys.prefix,
    "dists": {{}},
}}
for dist in md.distributions():
    name = (dist.metadata["Name"] or "").lower().replace("_", "-")
    if name.startswith(("nvidia-", "cuda-", "torch")):
        info["dists"][name] = dist.version
if "--torch" in sys.argv and "--no-import" in sys.argv:
    # a reused environment: read what the import would say from torch's files (~50 ms
    # instead of ~2 s); the C++ ABI comes from the marker written when it was created
    try:
        import ast, importlib.util
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.origin:
            raise ImportError("No module named 'torch'")
        values = {{}}
        with open(os.path.join(os.path.dirname(spec.origin), "version.py"), encoding="utf-8") as fh:
            for node in ast.parse(fh.read()).body:
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    target, value = node.targets[0], node.value
                elif isinstance(node, ast.AnnAssign) and node.value is not None:
                    target, value = node.target, node.value
                else:
                    continue
                if isinstance(target, ast.Name):
                    try:
                        values[target.id] = ast.literal_eval(value)
                    except ValueError:
                        pass
        info["torch"] = {{
            "version": values["__version__"],
            "cuda": values.get("cuda"),
            "hip": values.get("hip"),
            "cxx11_abi": None,
            "requires": md.requires("torch") or [],
            "file": os.path.abspath(spec.origin),
        }}
    except Exception as exc:
        info["torch_error"] = f"{{type(exc).__name__}}: {{exc}}"
elif "--torch" in sys.argv:
    try:
        import torch
        info["torch"] = {{
            "version": torch.__version__,
            "cuda": torch.version.cuda,
            "hip": torch.version.hip,
            "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
            "requires": md.requires("torch") or [],
            "file": os.path.abspath(torch.__file__),
        }}
    except Exception as exc:
        info["torch_error"] = f"{{type(exc).__name__}}: {{exc}}"
print({_PROBE_TAG!r} + json.dumps(info))
"""


@dataclass(frozen=True, kw_only=True)
class Toolchain:
    """A verified build environment for one job."""

    key: str  # hash of the env key
    root: Path  # the venv
    python: Path  # root/bin/python
    python_version: str  # "3.12.1"
    torch_version: str  # "2.11.0+cu130" as torch.__version__
    cuda_version: str | None  # torch.version.cuda
    hip_version: str | None
    cxx11_abi: bool
    site_packages: Path
    cuda_home: Path | None
    # Variables to add for the build. PATH is a prefix to put before the build's PATH; every
    # other value is complete (LIBRARY_PATH and CPATH already end with the value they had in
    # the `env` given to prepare_toolchain) and replaces the variable.
    build_env: tuple[tuple[str, str], ...]
    reused: bool  # True when the cached env was reused


@dataclass(frozen=True, kw_only=True)
class EnvProbe:
    """What an interpreter reports about itself and, when asked, its torch."""

    python_version: str
    implementation: str
    site_packages: Path
    dists: Mapping[str, str] = field(default_factory=dict)
    torch_version: str | None = None
    cuda_version: str | None = None
    hip_version: str | None = None
    cxx11_abi: bool | None = None
    torch_requires: tuple[str, ...] = ()
    torch_error: str | None = None
    torch_file: Path | None = None  # torch/__init__.py as imported

    @property
    def torch_dir(self) -> Path | None:
        return self.torch_file.parent if self.torch_file is not None else None

    @classmethod
    def parse(cls, output: str) -> EnvProbe:
        """Read the probe's tagged JSON line out of `output` (warnings may surround it)."""
        for line in reversed(output.splitlines()):
            if line.startswith(_PROBE_TAG):
                data: dict[str, Any] = json.loads(line[len(_PROBE_TAG) :])
                break
        else:
            raise ValueError("no probe result in the output")
        torch: dict[str, Any] = data.get("torch") or {}
        return cls(
            python_version=data["python_version"],
            implementation=data["implementation"],
            site_packages=Path(data["site_packages"]),
            dists=dict(data.get("dists", {})),
            torch_version=torch.get("version"),
            cuda_version=torch.get("cuda"),
            hip_version=torch.get("hip"),
            cxx11_abi=torch.get("cxx11_abi"),
            torch_requires=tuple(torch.get("requires", ())),
            torch_error=data.get("torch_error"),
            torch_file=Path(torch["file"]) if torch.get("file") else None,
        )


@dataclass(frozen=True, kw_only=True)
class CudaToolkit:
    """Where nvcc and the CUDA headers and libraries of a toolchain live."""

    source: str  # "system" or "pypi"
    home: Path
    version: str  # nvcc's release, "13.0"
    include_dirs: tuple[Path, ...] = ()
    lib_dirs: tuple[Path, ...] = ()  # where libcudart.so.N etc. are (no .so link for -l)


# --------------------------------------------------------------------------- pure helpers


def parse_nvcc_version(output: str) -> str | None:
    """'… Cuda compilation tools, release 13.0, V13.0.88' → '13.0'."""
    m = _NVCC_RELEASE.search(output)
    return m[1] if m else None


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def cuda_toolkit_requirements(
    torch_requires: Sequence[str], *, cuda_version: str
) -> tuple[str, ...]:
    """The NVIDIA wheels that give a complete nvcc, pinned to what torch itself requires.

    torch >= 2.9 (CUDA 13) requires `cuda-toolkit[…]==13.0.2`: the same pin with the compiler
    extras. Older CUDA 12/11 builds require `nvidia-cuda-runtime-cu12==12.8.90` etc.: the
    compiler wheels of that major.minor.
    """
    for line in torch_requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None:
            try:
                if not req.marker.evaluate({"extra": ""}):
                    continue
            except UndefinedEnvironmentName:
                continue
        name = req.name.lower().replace("_", "-")
        if name == "cuda-toolkit":
            return (f"cuda-toolkit[{','.join(CUDA_TOOLKIT_EXTRAS)}]{req.specifier}",)
        m = re.fullmatch(r"nvidia-cuda-runtime-cu(\d+)", name)
        if m:
            suffix = f"cu{m[1]}"
            mm = _major_minor(cuda_version)
            reqs = [
                f"nvidia-cuda-nvcc-{suffix}=={mm}.*",
                f"nvidia-cuda-runtime-{suffix}{req.specifier}",
            ]
            if int(m[1]) >= 12:
                reqs.append(f"nvidia-cuda-cccl-{suffix}=={mm}.*")
            return tuple(reqs)
    raise ToolchainError(
        f"torch (CUDA {cuda_version}) declares no CUDA toolkit or runtime dependency "
        "(neither cuda-toolkit nor nvidia-cuda-runtime-cuXX in its Requires-Dist), so the "
        "matching NVIDIA compiler wheels cannot be derived; give a CUDA "
        f"{cuda_version} toolkit with CUDA_HOME"
    )


def toolchain_key(
    job: BuildJob,
    *,
    python_version: str,
    system_cuda: CudaToolkit | None,
    with_toolkit: bool = True,
) -> tuple[str, dict[str, Any]]:
    """(hash, fields): everything that decides the content of a job's environment."""
    toolkit = job.toolkit
    fields: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "python": python_version,
        "torch_requirement": job.torch_requirement,
        "torch_index": job.torch_index,
        "accelerator": job.accelerator.name,
        "platform": job.platform,
        "toolkit": None
        if toolkit is None
        else {
            "kind": toolkit.kind,
            "version": toolkit.version,
            "pip_packages": list(toolkit.pip_packages),
        },
        # A system toolkit means no NVIDIA compiler wheels in the env: a different env.
        "cuda": None
        if system_cuda is None
        else {"source": "system", "home": str(system_cuda.home), "version": system_cuda.version},
        "build_requirements": list(BUILD_REQUIREMENTS) if with_toolkit else [],
        "with_toolkit": with_toolkit,
    }
    if job.torch_source == "current":  # only then: existing keys keep their hash
        fields["current_python"] = job.current_python
    blob = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16], fields


def _index_hint(accelerator: Accelerator) -> str:
    return f"{load_ecosystem().pytorch_index}/{accelerator.name}"


def _torch_build(probe: EnvProbe) -> str:
    if probe.cuda_version:
        return f"CUDA {probe.cuda_version}"
    if probe.hip_version:
        return f"ROCm/HIP {probe.hip_version}"
    return "CPU only"


def check_torch(job: BuildJob, probe: EnvProbe, *, env_root: Path) -> None:
    """Raise ToolchainError unless the installed torch is the one the cell needs."""
    cells = ", ".join(job.cell_ids) or job.id
    accel = job.accelerator
    source = f"the index {job.torch_index}" if job.torch_index else "pip's configured indexes"
    if probe.torch_version is None:
        raise ToolchainError(
            f"{cells}: torch does not import in {env_root}: {probe.torch_error or 'not installed'}"
        )
    installed = f"torch {probe.torch_version} ({_torch_build(probe)})"
    requirement = Requirement(job.torch_requirement)
    try:
        satisfied = requirement.specifier.contains(Version(probe.torch_version), prereleases=True)
    except InvalidVersion:
        satisfied = False
    if not satisfied:
        raise ToolchainError(
            f"{cells}: pip installed {installed} from {source}, but the cells need "
            f"{job.torch_requirement}; check the requirement and the torch index"
        )
    wrong: str | None = None
    if accel.kind == "cpu" and (probe.cuda_version or probe.hip_version):
        wrong = "a CPU-only torch"
    elif accel.kind == "cuda" and probe.cuda_version != accel.version:
        wrong = f"torch built for CUDA {accel.version}"
    elif accel.kind == "rocm" and not (
        probe.hip_version and _major_minor(probe.hip_version) == _major_minor(accel.version or "")
    ):
        wrong = f"torch built for ROCm {accel.version}"
    if wrong is not None:
        raise ToolchainError(
            f"{cells}: pip installed {installed} from {source}, but accelerator "
            f"'{accel.name}' needs {wrong}; set the torch index of these cells to "
            f"{_index_hint(accel)} (`pip install "
            f"'{job.torch_requirement}' --extra-index-url {_index_hint(accel)}` resolves the "
            f"+{accel.name} build)"
        )
    if probe.cxx11_abi is not None and probe.cxx11_abi != job.cxx11_abi:
        raise ToolchainError(
            f"{cells}: {installed} uses _GLIBCXX_USE_CXX11_ABI={int(probe.cxx11_abi)} but the "
            f"job promises {int(job.cxx11_abi)}; the torch index serves a different build than "
            "the compatibility data expects (fix the index, or the data if torch changed)"
        )


def locate_cuda_wheels(site_packages: Path, *, cuda_version: str) -> CudaToolkit | None:
    """The toolkit NVIDIA's wheels installed under site-packages/nvidia, if it has nvcc.

    CUDA 13 wheels share one tree (nvidia/cu13/{bin,include,lib}); CUDA 12 wheels use one
    directory per component (nvidia/cuda_nvcc, nvidia/cuda_runtime, …).
    """
    nvidia = site_packages / "nvidia"
    major = cuda_version.split(".", maxsplit=1)[0]
    homes = [nvidia / f"cu{major}", nvidia / "cuda_nvcc"]
    home = next((h for h in homes if (h / "bin" / "nvcc").is_file()), None)
    if home is None:
        return None
    parts = sorted(p for p in nvidia.iterdir() if p.is_dir()) if nvidia.is_dir() else []
    include_dirs = [home / "include"] + [
        p / "include" for p in parts if p != home and (p / "include").is_dir()
    ]
    lib_dirs = [p / "lib" for p in [home, *parts] if (p / "lib").is_dir()]
    return CudaToolkit(
        source="pypi",
        home=home,
        version=_major_minor(cuda_version),
        include_dirs=tuple(dict.fromkeys(include_dirs)),
        lib_dirs=tuple(dict.fromkeys(lib_dirs)),
    )


def _link_unversioned_libs(lib_dirs: Sequence[Path], link_dir: Path) -> None:
    """Give every libX.so.N of the wheels a libX.so in link_dir, so `-lX` links.

    NVIDIA's wheels ship libcudart.so.13 but no libcudart.so: `-lcudart` fails without this.
    """
    link_dir.mkdir(parents=True, exist_ok=True)
    for lib_dir in lib_dirs:
        for lib in sorted(lib_dir.glob("lib*.so.*")):
            unversioned = link_dir / (lib.name.split(".so.")[0] + ".so")
            if (lib_dir / unversioned.name).exists() or unversioned.is_symlink():
                continue
            unversioned.symlink_to(lib)


def _prepend(value: Sequence[Path | str], previous: str | None) -> str:
    parts = [str(v) for v in value]
    if previous:
        parts.append(previous)
    return os.pathsep.join(parts)


def _build_env(
    root: Path, env: Mapping[str, str], cuda: CudaToolkit | None, rocm_home: Path | None
) -> tuple[tuple[str, str], ...]:
    bin_dirs: list[Path] = [root / "bin"]
    out: dict[str, str] = {"VIRTUAL_ENV": str(root)}
    if cuda is not None:
        bin_dirs.insert(0, cuda.home / "bin")
        out["CUDA_HOME"] = str(cuda.home)
        if cuda.source == "pypi":
            out["LIBRARY_PATH"] = _prepend([_link_dir(root)], env.get("LIBRARY_PATH"))
            out["CPATH"] = _prepend(cuda.include_dirs, env.get("CPATH"))
    if rocm_home is not None:
        bin_dirs.insert(0, rocm_home / "bin")
        out["ROCM_HOME"] = str(rocm_home)
    out["PATH"] = _prepend(bin_dirs, None)
    return tuple(sorted(out.items()))


def _link_dir(root: Path) -> Path:
    return root / "buildtools" / "lib"


# ------------------------------------------------------------------------------ executing


def _child_env(env: Mapping[str, str]) -> dict[str, str]:
    # variables that would leak another environment into the venv's interpreter
    dropped = load_ecosystem().dropped_env
    out = {k: v for k, v in env.items() if k not in dropped}
    out["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    out["PIP_NO_INPUT"] = "1"
    return out


def _probe(
    python: Path,
    *,
    runner: Runner,
    log: IO[str],
    env: Mapping[str, str],
    torch: bool,
    no_import: bool = False,
) -> EnvProbe | None:
    """What `python` reports; with `torch`, its torch: imported, or with `no_import` read
    from torch's files (version.py, metadata; no C++ ABI)."""
    argv = [str(python), "-I", "-c", _PROBE] + (["--torch"] if torch else [])
    if torch and no_import:
        argv.append("--no-import")
    result = runner.run(argv, env=_child_env(env), log=log, capture=True, timeout=300)
    if not result.ok:
        log.write(f"[toolchain] {python} does not run (exit {result.returncode})\n")
        return None
    try:
        return EnvProbe.parse(result.output)
    except (ValueError, KeyError) as exc:
        log.write(f"[toolchain] unreadable probe output from {python}: {exc}\n")
        return None


def _system_cuda(
    home: Path, accel: Accelerator, *, runner: Runner, log: IO[str], env: Mapping[str, str]
) -> CudaToolkit | None:
    """The system toolkit at `home` when its nvcc is torch's CUDA major.minor, else None."""
    nvcc = home / "bin" / "nvcc"
    if not nvcc.is_file():
        log.write(f"[toolchain] ignoring CUDA_HOME={home}: it has no bin/nvcc\n")
        return None
    result = runner.run([str(nvcc), "--version"], env=_child_env(env), log=log, capture=True)
    version = parse_nvcc_version(result.output) if result.ok else None
    if version is None or version != accel.version:
        log.write(
            f"[toolchain] ignoring CUDA_HOME={home}: nvcc is CUDA {version or '?'}, the cell "
            f"needs {accel.version}; using NVIDIA's PyPI wheels instead\n"
        )
        return None
    return CudaToolkit(source="system", home=home, version=version)


def _find_rocm(env: Mapping[str, str], site_packages: Path) -> Path | None:
    for var in ("ROCM_HOME", "ROCM_PATH"):
        if env.get(var):
            return Path(env[var])
    # torch >= 2.13 finds TheRock's pip-installed SDK itself.
    if any((site_packages / name).is_dir() for name in ("_rocm_sdk_devel", "_rocm_sdk_core")):
        return None
    default = Path("/opt/rocm")
    if (default / "bin" / "hipcc").is_file():
        return default
    raise ToolMissingError(
        "ROCm toolkit: not found (no ROCM_HOME/ROCM_PATH, no /opt/rocm/bin/hipcc, no "
        "rocm-sdk-devel in the environment); install ROCm (https://rocm.docs.amd.com) and set "
        "ROCM_HOME, or build ROCm cells with the docker backend"
    )


def _read_marker(root: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((root / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_marker(root: Path, data: Mapping[str, Any]) -> None:
    """Write the marker atomically: it is the proof the env is complete, so it comes last."""
    tmp = root / f".{MARKER}.tmp"
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(root / MARKER)


_PROBE_INDEX = (
    "import sys, urllib.request\n"
    "try:\n"
    "    urllib.request.urlopen(sys.argv[1], timeout=10).close()\n"
    "except Exception as exc:\n"
    "    print(f'unreachable: {exc}')\n"
    "    sys.exit(1)\n"
)


def _index_reachable(
    index: str, python: Path, *, runner: Runner, log: IO[str], env: Mapping[str, str]
) -> bool:
    """One quick request instead of pip's retries per package against a dead index.

    An unreachable torch index is skipped with a note: pip then uses its configured
    indexes, and the installed torch is verified against the cell either way.
    """
    url = index.rstrip("/") + "/torch/"
    result = runner.run([str(python), "-c", _PROBE_INDEX, url], env=_child_env(env), capture=True)
    if result.ok:
        return True
    log.write(
        f"[toolchain] the torch index {index} is unreachable ({result.output.strip()}); "
        "using pip's configured indexes instead — the installed torch is still verified "
        "against the cell\n"
    )
    return False


def _pip(
    python: Path,
    requirements: Sequence[str],
    job: BuildJob,
    *,
    runner: Runner,
    log: IO[str],
    env: Mapping[str, str],
) -> None:
    """Install into the environment of `python`: uv (shared package cache) or pip.

    A failed uv install is retried with pip, so uv can only make an install faster.
    """
    index = (
        job.torch_index
        if job.torch_index
        and _index_reachable(job.torch_index, python, runner=runner, log=log, env=env)
        else None
    )
    installer = select_installer(env)
    if installer.uv is not None:
        root = python.parent.parent
        # pip's configuration files (not `pip config list`: that costs ~0.5 s of pip start-up)
        config = read_pip_config(env, prefix=python.parent.parent)
        options, extra_env = uv_options(config, env)
        uv_env = _child_env(env)
        uv_env.update(extra_env)
        uv_env["UV_CACHE_DIR"] = str(uv_cache_dir(root.parent.parent, env))
        uv_env.pop("UV_SYSTEM_PYTHON", None)
        argv = uv_install_argv(
            installer.uv, python, requirements, options=options, extra_index=index
        )
        if runner.run(argv, env=uv_env, log=log).ok:
            return
        log.write("[toolchain] uv could not install; trying pip (see uv's reason above)\n")
    argv = [str(python), "-m", "pip", "install"]
    if index:
        argv += ["--extra-index-url", index]
    argv += list(requirements)
    result = runner.run(argv, env=_child_env(env), log=log)
    if not result.ok:
        raise ToolchainError(
            f"pip could not install {' '.join(requirements)} (exit {result.returncode}); "
            "see the log above for pip's reason"
        )


def _make_venv(
    base_python: Path, root: Path, *, runner: Runner, log: IO[str], env: Mapping[str, str]
) -> None:
    """`uv venv --seed` (milliseconds) when uv is there, else (or when it fails) `python -m venv`."""
    installer = select_installer(env)
    log.write(f"[toolchain] installer: {installer.name} ({installer.reason})\n")
    if installer.uv is not None:
        uv_env = _child_env(env)
        uv_env["UV_CACHE_DIR"] = str(uv_cache_dir(root.parent.parent, env))
        made = runner.run(uv_venv_argv(installer.uv, base_python, root), env=uv_env, log=log)
        if made.ok and (root / "bin" / "python").exists():
            return
        log.write("[toolchain] `uv venv` failed; creating the venv with python -m venv\n")
        _remove_env(root, log, "a failed uv venv")
    created = runner.run([str(base_python), "-m", "venv", str(root)], env=_child_env(env), log=log)
    if not created.ok or not (root / "bin" / "python").exists():
        raise ToolchainError(f"`{base_python} -m venv {root}` failed (exit {created.returncode})")


def _cuda_from_marker(data: Mapping[str, Any]) -> CudaToolkit | None:
    cuda = data.get("cuda")
    if not cuda:
        return None
    return CudaToolkit(
        source=cuda["source"],
        home=Path(cuda["home"]),
        version=cuda["version"],
        include_dirs=tuple(Path(p) for p in cuda["include_dirs"]),
        lib_dirs=tuple(Path(p) for p in cuda["lib_dirs"]),
    )


def _cuda_to_marker(cuda: CudaToolkit | None) -> dict[str, Any] | None:
    if cuda is None:
        return None
    return {
        "source": cuda.source,
        "home": str(cuda.home),
        "version": cuda.version,
        "include_dirs": [str(p) for p in cuda.include_dirs],
        "lib_dirs": [str(p) for p in cuda.lib_dirs],
    }


def _check_compiler_dists(probe: EnvProbe, cuda_version: str) -> None:
    """Every installed compiler wheel must be torch's CUDA major.minor (see CUDA_TOOLKIT_EXTRAS)."""
    wrong = [
        f"{name}=={version}"
        for name, version in sorted(probe.dists.items())
        if _COMPILER_DISTS.match(name) and _major_minor(version) != cuda_version
    ]
    if wrong:
        raise ToolchainError(
            f"CUDA compiler wheels of another CUDA version are installed: {', '.join(wrong)}; "
            f"torch needs CUDA {cuda_version} (ptxas fails on PTX from a newer NVVM): pin them "
            f"to =={cuda_version}.*"
        )


def _install_cuda_wheels(
    job: BuildJob,
    probe: EnvProbe,
    root: Path,
    *,
    runner: Runner,
    log: IO[str],
    env: Mapping[str, str],
    with_torch: bool = True,
) -> CudaToolkit:
    cuda_version = probe.cuda_version or ""
    python = root / "bin" / "python"
    if job.toolkit is not None and job.toolkit.pip_packages:
        requirements = job.toolkit.pip_packages
    else:
        requirements = cuda_toolkit_requirements(probe.torch_requires, cuda_version=cuda_version)
    log.write(f"[toolchain] CUDA {cuda_version} compiler from PyPI: {' '.join(requirements)}\n")
    torch = [job.torch_requirement] if with_torch else []
    _pip(python, [*torch, *requirements], job, runner=runner, log=log, env=env)
    after = _probe(python, runner=runner, log=log, env=env, torch=False)
    if after is None:
        raise ToolchainError(f"{python} stopped working after installing {' '.join(requirements)}")
    _check_compiler_dists(after, cuda_version)
    toolkit = locate_cuda_wheels(after.site_packages, cuda_version=cuda_version)
    if toolkit is None:
        raise ToolchainError(
            f"the NVIDIA wheels for CUDA {cuda_version} ({' '.join(requirements)}) contain no "
            f"nvcc under {after.site_packages / 'nvidia'} (before CUDA 13, "
            "nvidia-cuda-nvcc-cuXX ships only ptxas and libnvvm); give a system CUDA "
            f"{cuda_version} toolkit with CUDA_HOME, or build this cell with the docker backend"
        )
    nvcc = runner.run(
        [str(toolkit.home / "bin" / "nvcc"), "--version"],
        env=_child_env(env),
        log=log,
        capture=True,
    )
    found = parse_nvcc_version(nvcc.output) if nvcc.ok else None
    if found != _major_minor(cuda_version):
        raise ToolchainError(
            f"{toolkit.home / 'bin' / 'nvcc'} reports CUDA {found or '(does not run)'}, torch "
            f"needs {cuda_version}; pin the toolkit wheels to =={cuda_version}.*"
        )
    _link_unversioned_libs(toolkit.lib_dirs, _link_dir(root))
    return toolkit


def _env_name(job: BuildJob, python_version: str, key: str) -> str:
    torch = re.sub(r"[^A-Za-z0-9.]+", "", job.torch) or "torch"
    current = "-current" if job.torch_source == "current" else ""
    return f"py{python_version}-torch{torch}{current}-{job.accelerator.name}-{key[:12]}"


def _remove_env(root: Path, log: IO[str], why: str) -> None:
    if root.is_symlink():
        log.write(f"[toolchain] removing {root}: {why}\n")
        root.unlink()
    elif root.exists():
        log.write(f"[toolchain] removing {root}: {why}\n")
        shutil.rmtree(root)


@dataclass(frozen=True, kw_only=True)
class ToolchainIdentity:
    """What decides a job's environment, known before (and without) creating it."""

    key: str
    fields: Mapping[str, Any]
    base_python: Path
    python_version: str  # the base interpreter's full version, "3.11.7"
    system_cuda: CudaToolkit | None


def toolchain_identity(
    job: BuildJob,
    python: str,
    *,
    runner: Runner,
    log: IO[str],
    env: Mapping[str, str],
    cuda_home: Path | None = None,
    with_toolkit: bool = True,
) -> ToolchainIdentity:
    """The key of the environment `prepare_toolchain` would use, from the job and the base
    interpreter alone (one quick probe of it; nothing is installed).

    Not for `torch: current` jobs, whose environment depends on the running torch.
    """
    accel = job.accelerator
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    base_python = find_python(python, env=env, home=home)
    base = _probe(base_python, runner=runner, log=log, env=env, torch=False)
    if base is None:
        raise ToolMissingError(f"Python {python}: {base_python} does not run; reinstall it")
    if base.implementation != "cpython":
        raise ToolMissingError(
            f"Python {python}: {base_python} is {base.implementation}, not CPython; install "
            f"CPython with: pyenv install {python}  (or: uv python install {python})"
        )
    system_cuda: CudaToolkit | None = None
    if accel.kind == "cuda" and with_toolkit:
        given = cuda_home or (Path(env["CUDA_HOME"]) if env.get("CUDA_HOME") else None)
        if given is not None:
            system_cuda = _system_cuda(given, accel, runner=runner, log=log, env=env)
    key, fields = toolchain_key(
        job, python_version=base.python_version, system_cuda=system_cuda, with_toolkit=with_toolkit
    )
    return ToolchainIdentity(
        key=key,
        fields=fields,
        base_python=base_python,
        python_version=base.python_version,
        system_cuda=system_cuda,
    )


def prepare_toolchain(
    job: BuildJob,
    python: str,
    *,
    cache_dir: Path,
    runner: Runner,
    log: IO[str],
    env: Mapping[str, str],
    cuda_home: Path | None = None,
    with_toolkit: bool = True,
) -> Toolchain:
    """Create (or reuse) and verify the environment that builds `job` with Python `python`.

    `env` is the environment pip and the build run with; a system CUDA toolkit is taken
    from `cuda_home` or env["CUDA_HOME"] when its nvcc matches the cell's CUDA version.
    `with_toolkit=False` gives an environment with torch only (no compiler), e.g. to check
    a wheel against another torch. Raises ToolMissingError (no such Python, no ROCm) or
    ToolchainError (pip failed, or the installed torch/toolkit does not match the cell; the
    message says what to change).
    """
    if job.torch_source == "current":
        return _prepare_current(
            job,
            cache_dir=cache_dir,
            runner=runner,
            log=log,
            env=env,
            cuda_home=cuda_home,
            with_toolkit=with_toolkit,
        )
    ident = toolchain_identity(
        job,
        python,
        runner=runner,
        log=log,
        env=env,
        cuda_home=cuda_home,
        with_toolkit=with_toolkit,
    )
    key, fields, base_python, system_cuda = (
        ident.key,
        ident.fields,
        ident.base_python,
        ident.system_cuda,
    )
    envs = cache_dir / "toolchains"
    root = envs / _env_name(job, ident.python_version, key)

    with file_lock(envs / ".locks" / f"{root.name}.lock"):
        marker = _read_marker(root)
        if marker is not None and marker.get("key") == key and marker.get("fields") == fields:
            reused = _reuse(key, root, marker, runner=runner, log=log, env=env)
            if reused is not None:
                return reused
            why = "it no longer runs, or its torch or toolkit changed since it was created"
        elif marker is not None:
            why = "its key does not match the job (a stale environment)"
        else:
            why = "it has no marker (an interrupted creation)"
        _remove_env(root, log, why)
        return _create(
            job,
            key=key,
            fields=fields,
            root=root,
            base_python=base_python,
            toolkit=system_cuda,
            with_toolkit=with_toolkit,
            runner=runner,
            log=log,
            env=env,
        )


def _reuse(
    key: str,
    root: Path,
    marker: Mapping[str, Any],
    *,
    runner: Runner,
    log: IO[str],
    env: Mapping[str, str],
) -> Toolchain | None:
    """The cached env as a Toolchain, or None when it is no longer what its marker says.

    torch is imported when the environment is created (that proves it imports); a reuse
    reads torch's version files instead, and the C++ ABI from the marker, when it has it.
    """
    abi_known = isinstance(marker.get("cxx11_abi"), bool)
    probe = _probe(
        root / "bin" / "python", runner=runner, log=log, env=env, torch=True, no_import=abi_known
    )
    cuda = _cuda_from_marker(marker)
    if probe is None or probe.torch_version != marker.get("torch_version"):
        return None
    if not abi_known and isinstance(probe.cxx11_abi, bool):
        # a marker from before the ABI was recorded: record it, the next reuse is quicker
        marker = {**marker, "cxx11_abi": probe.cxx11_abi}
        _write_marker(root, marker)
    if marker.get("torch_dir") and str(probe.torch_dir) != marker["torch_dir"]:
        return None
    if cuda is not None and not (cuda.home / "bin" / "nvcc").is_file():
        return None
    log.write(
        f"[toolchain] reusing {root} (torch {probe.torch_version}, created in "
        f"{marker.get('create_seconds', 0):.0f} s)\n"
    )
    site = Path(marker["torch_site"]) if marker.get("torch_site") else None
    return _toolchain(
        key=key,
        root=root,
        probe=probe,
        cuda=cuda,
        marker=marker,
        env=env,
        reused=True,
        site_packages=site,
    )


def _create(
    job: BuildJob,
    *,
    key: str,
    fields: Mapping[str, Any],
    root: Path,
    base_python: Path,
    toolkit: CudaToolkit | None,
    with_toolkit: bool,
    runner: Runner,
    log: IO[str],
    env: Mapping[str, str],
) -> Toolchain:
    """Create the venv, install torch (+ toolkit), verify, then write the marker last."""
    accel = job.accelerator
    venv_python = root / "bin" / "python"
    started = time.monotonic()
    log.write(f"[toolchain] creating {root} for {', '.join(job.cell_ids) or job.id}\n")
    root.parent.mkdir(parents=True, exist_ok=True)
    _make_venv(base_python, root, runner=runner, log=log, env=env)
    requirements = [job.torch_requirement, *(BUILD_REQUIREMENTS if with_toolkit else ())]
    _pip(venv_python, requirements, job, runner=runner, log=log, env=env)
    probe = _verified_probe(
        venv_python,
        base_python,
        record_path=_imported_record(root, env),
        runner=runner,
        log=log,
        env=env,
    )
    if probe is None:
        raise ToolchainError(f"{venv_python} does not run after installing torch")
    check_torch(job, probe, env_root=root)

    cuda = toolkit
    rocm_home: Path | None = None
    if with_toolkit and accel.kind == "cuda" and cuda is None:
        cuda = _install_cuda_wheels(job, probe, root, runner=runner, log=log, env=env)
    elif with_toolkit and accel.kind == "rocm":
        rocm_home = _find_rocm(env, probe.site_packages)
    seconds = time.monotonic() - started
    marker = {
        "schema": SCHEMA_VERSION,
        "key": key,
        "fields": fields,
        "base_python": str(base_python),
        "torch_version": probe.torch_version,
        "cxx11_abi": probe.cxx11_abi,
        "cuda": _cuda_to_marker(cuda),
        "rocm_home": str(rocm_home) if rocm_home else None,
        "create_seconds": round(seconds, 1),
    }
    _write_marker(root, marker)
    log.write(f"[toolchain] created {root} in {seconds:.0f} s\n")
    return _toolchain(
        key=key, root=root, probe=probe, cuda=cuda, marker=marker, env=env, reused=False
    )


VERIFIED = "buildtools-imported.json"  # torch installs known to import on this machine


def _imported_record(root: Path, env: Mapping[str, str]) -> Path:
    """Where the imports are recorded: with uv's package cache (restored with it, e.g. in
    CI), else beside the environments."""
    if select_installer(env).uv is not None:
        return uv_cache_dir(root.parent.parent, env) / VERIFIED
    return root.parent / VERIFIED


def _verified_key(base_python: Path, probe: EnvProbe) -> str:
    """The same interpreter and the same torch/NVIDIA/CUDA distributions: the same import."""
    blob = json.dumps(
        [str(base_python), probe.python_version, probe.torch_version, sorted(probe.dists.items())]
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _verified_probe(
    python: Path,
    base_python: Path,
    *,
    record_path: Path,
    runner: Runner,
    log: IO[str],
    env: Mapping[str, str],
) -> EnvProbe | None:
    """The new environment's torch, imported once per identical install on this machine.

    A second environment with the same torch (files linked from uv's cache) is read from
    torch's version files instead (~0.3 s instead of ~3 s: the first import compiles every
    module); what the import reported the first time (the C++ ABI) is taken from the record.
    """
    try:
        records = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        records = {}
    records = records if isinstance(records, dict) else {}
    quick = _probe(python, runner=runner, log=log, env=env, torch=True, no_import=True)
    if quick is not None and quick.torch_version is not None:
        known = records.get(_verified_key(base_python, quick))
        if isinstance(known, dict) and isinstance(known.get("cxx11_abi"), bool):
            log.write(
                f"[toolchain] torch {quick.torch_version}: the same install already imported "
                f"here ({known.get('env')}); not imported again\n"
            )
            return replace(quick, cxx11_abi=known["cxx11_abi"])
    probe = _probe(python, runner=runner, log=log, env=env, torch=True)
    if probe is not None and probe.torch_version is not None and probe.cxx11_abi is not None:
        records[_verified_key(base_python, probe)] = {
            "cxx11_abi": probe.cxx11_abi,
            "env": python.parents[1].name,
        }
        with contextlib.suppress(OSError):
            record_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = record_path.with_name(f"{VERIFIED}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(records, indent=1, sort_keys=True), encoding="utf-8")
            tmp.replace(record_path)
    return probe


def _toolchain(
    *,
    key: str,
    root: Path,
    probe: EnvProbe,
    cuda: CudaToolkit | None,
    marker: Mapping[str, Any],
    env: Mapping[str, str],
    reused: bool,
    site_packages: Path | None = None,
) -> Toolchain:
    rocm_home = Path(marker["rocm_home"]) if marker.get("rocm_home") else None
    return Toolchain(
        key=key,
        root=root,
        python=root / "bin" / "python",
        python_version=probe.python_version,
        torch_version=probe.torch_version or "",
        cuda_version=probe.cuda_version,
        hip_version=probe.hip_version,
        cxx11_abi=bool(probe.cxx11_abi if probe.cxx11_abi is not None else marker.get("cxx11_abi")),
        site_packages=site_packages or probe.site_packages,
        cuda_home=cuda.home if cuda else None,
        build_env=_build_env(root, env, cuda, rocm_home),
        reused=reused,
    )


# --------------------------------------------------------------------------- torch: current

CURRENT_PTH = "buildtools-current-torch.pth"


def _prepare_current(
    job: BuildJob,
    *,
    cache_dir: Path,
    runner: Runner,
    log: IO[str],
    env: Mapping[str, str],
    cuda_home: Path | None,
    with_toolkit: bool,
) -> Toolchain:
    """A venv that imports the running environment's torch, which is never installed or changed.

    From a base interpreter (system, conda) the venv is created with
    `--system-site-packages`. A venv interpreter cannot pass its own site-packages on that
    way (a venv of a venv sees the *base* interpreter's), so there, and for a torch in the
    user site, a `.pth` file in the new venv lists the running environment's site
    directories (with `site.addsitedir`, so their own .pth files count). Either way the
    venv's own site-packages comes first (the build tools pip adds there) and the torch it
    imports is verified to be the running one.
    """
    from ..probe.hostenv import probe_environment, site_dirs_for_pth

    cells = ", ".join(job.cell_ids) or job.id
    if not job.current_python:
        raise ToolchainError(f"{cells}: a torch: current job without the interpreter to use")
    base_python = Path(job.current_python)
    snap = probe_environment(base_python, runner=runner, env=_child_env(env), log=log)
    torch = snap.torch
    if torch is None or torch.imported is False:
        why = torch.import_error if torch is not None else "no torch is installed"
        raise ToolchainError(f"{cells}: torch does not import in {base_python}: {why}")
    if torch.version != job.torch:
        raise ToolchainError(
            f"{cells}: {base_python} now has torch {torch.version}, but the plan was made for "
            f"torch {job.torch}; plan again (the cell id names the torch it was planned for)"
        )
    if snap.implementation != "cpython":
        raise ToolMissingError(f"{base_python} is {snap.implementation}, not CPython")
    accel = job.accelerator
    system_cuda: CudaToolkit | None = None
    if accel.kind == "cuda" and with_toolkit:
        given = cuda_home or (Path(env["CUDA_HOME"]) if env.get("CUDA_HOME") else None)
        if given is not None:
            system_cuda = _system_cuda(given, accel, runner=runner, log=log, env=env)
    key, fields = toolchain_key(
        job, python_version=snap.python_version, system_cuda=system_cuda, with_toolkit=with_toolkit
    )
    envs = cache_dir / "toolchains"
    root = envs / _env_name(job, snap.python_version, key)
    with file_lock(envs / ".locks" / f"{root.name}.lock"):
        marker = _read_marker(root)
        if marker is not None and marker.get("key") == key and marker.get("fields") == fields:
            if marker.get("torch_dir") == str(torch.package_dir):
                reused = _reuse(key, root, marker, runner=runner, log=log, env=env)
                if reused is not None:
                    return reused
            why = "the running environment's torch moved or changed since it was created"
        elif marker is not None:
            why = "its key does not match the job (a stale environment)"
        else:
            why = "it has no marker (an interrupted creation)"
        _remove_env(root, log, why)

        started = time.monotonic()
        log.write(
            f"[toolchain] creating {root} for {cells}: a venv that imports torch "
            f"{torch.version} from {torch.site} (nothing is installed into that environment)\n"
        )
        root.parent.mkdir(parents=True, exist_ok=True)
        argv = [str(base_python), "-m", "venv"]
        if not snap.in_venv:
            argv.append("--system-site-packages")
        if any(d.key == "pip" for d in snap.dists):
            # no seeded pip/setuptools of its own: they would shadow the running
            # environment's (Python 3.11 seeds setuptools 65)
            argv.append("--without-pip")
        created = runner.run([*argv, str(root)], env=_child_env(env), log=log)
        venv_python = root / "bin" / "python"
        if not created.ok or not venv_python.exists():
            raise ToolchainError(
                f"`{shlex_join([*argv, str(root)])}` failed (exit {created.returncode})"
            )
        own_site = root / "lib" / f"python{snap.python_xy}" / "site-packages"
        own_site.mkdir(parents=True, exist_ok=True)
        # addsitedir, not plain path lines: the .pth files of those directories (editable
        # installs, distutils-precedence) must be processed too, as they are there
        (own_site / CURRENT_PTH).write_text(
            "".join(f"import site; site.addsitedir({str(d)!r})\n" for d in site_dirs_for_pth(snap)),
            encoding="utf-8",
        )
        if with_toolkit:
            # already satisfied by the running environment in the usual case: pip only adds
            # what is missing, into the venv's own site-packages
            _pip(venv_python, BUILD_REQUIREMENTS, job, runner=runner, log=log, env=env)
        probe = _probe(venv_python, runner=runner, log=log, env=env, torch=True)
        if probe is None:
            raise ToolchainError(f"{venv_python} does not run")
        check_torch(job, probe, env_root=root)
        _check_same_torch(probe, torch.package_dir, own_site, cells)

        cuda = system_cuda
        rocm_home: Path | None = None
        if with_toolkit and accel.kind == "cuda" and cuda is None:
            cuda = locate_cuda_wheels(torch.site, cuda_version=probe.cuda_version or "")
            if cuda is not None:
                log.write(f"[toolchain] CUDA compiler of the running environment: {cuda.home}\n")
                _link_unversioned_libs(cuda.lib_dirs, _link_dir(root))
            else:
                cuda = _install_cuda_wheels(
                    job, probe, root, runner=runner, log=log, env=env, with_torch=False
                )
                after = _probe(venv_python, runner=runner, log=log, env=env, torch=True)
                if after is None:
                    raise ToolchainError(f"{venv_python} stopped working after the CUDA wheels")
                _check_same_torch(after, torch.package_dir, own_site, cells)
        elif with_toolkit and accel.kind == "rocm":
            rocm_home = _find_rocm(env, torch.site)
        seconds = time.monotonic() - started
        marker = {
            "schema": SCHEMA_VERSION,
            "key": key,
            "fields": fields,
            "base_python": str(base_python),
            "torch_version": probe.torch_version,
            "cxx11_abi": probe.cxx11_abi,
            "torch_dir": str(torch.package_dir),
            "torch_site": str(torch.site),
            "cuda": _cuda_to_marker(cuda),
            "rocm_home": str(rocm_home) if rocm_home else None,
            "create_seconds": round(seconds, 1),
        }
        _write_marker(root, marker)
        log.write(f"[toolchain] created {root} in {seconds:.0f} s\n")
        return _toolchain(
            key=key,
            root=root,
            probe=probe,
            cuda=cuda,
            marker=marker,
            env=env,
            reused=False,
            site_packages=torch.site,
        )


def _check_same_torch(probe: EnvProbe, torch_dir: Path, own_site: Path, cells: str) -> None:
    """The venv must import the running environment's torch, and hold no torch of its own."""
    if (own_site / "torch").exists():
        raise ToolchainError(
            f"{cells}: a torch was installed into {own_site}, which a torch: current build must "
            "never do; remove that environment and check what pulled torch in"
        )
    if probe.torch_dir is None or probe.torch_dir.resolve() != torch_dir.resolve():
        raise ToolchainError(
            f"{cells}: the build environment imports torch from {probe.torch_dir}, not the "
            f"running environment's {torch_dir}; is torch reached through PYTHONPATH? "
            "Install it into the environment instead"
        )
