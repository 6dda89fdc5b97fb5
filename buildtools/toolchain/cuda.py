"""The CUDA compiler of a toolchain: a system toolkit whose nvcc matches torch, or NVIDIA's
PyPI wheels pinned to the versions the installed torch itself requires.

The wheels need two fixes to build extensions: every compiler part must be torch's CUDA
major.minor (an unpinned nvidia-nvvm is newer than ptxas: "Unsupported .version"), and each
libX.so.N they ship needs a libX.so for `-lX` to link.
"""

from __future__ import annotations

__all__ = [
    "CUDA_TOOLKIT_EXTRAS",
    "CudaToolkit",
    "check_compiler_dists",
    "cuda_toolkit_requirements",
    "install_cuda_wheels",
    "link_dir",
    "link_unversioned_libs",
    "locate_cuda_wheels",
    "parse_nvcc_version",
    "system_cuda",
]

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.markers import UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement

from ..context import RunContext
from ..errors import ToolchainError
from ..model import Accelerator, BuildJob
from ..probe.hostenv import EnvSnapshot
from ..torchinstall import TorchInstall
from .indexprobe import job_index
from .venv import child_env, install
from .verify import dist_versions, probe_venv

# Components of NVIDIA's `cuda-toolkit` metapackage that make a complete nvcc: the driver,
# its CRT headers, CCCL (thrust/cub), the runtime and NVVM (pinned: an unpinned nvidia-nvvm
# is newer than ptxas and fails with "Unsupported .version").
CUDA_TOOLKIT_EXTRAS = ("nvcc", "crt", "cccl", "cudart", "nvvm")
# Distributions whose major.minor must equal torch's CUDA (compiler parts; libraries such
# as cublas have their own version numbers).
_COMPILER_DISTS = re.compile(r"^nvidia-(cuda-(nvcc|crt|cccl|runtime)|nvvm)(-cu\d+)?$")
_NVCC_RELEASE = re.compile(r"release (\d+\.\d+)")


@dataclass(frozen=True, kw_only=True)
class CudaToolkit:
    """Where nvcc and the CUDA headers and libraries of a toolchain live."""

    source: str  # "system" or "pypi"
    home: Path
    version: str  # nvcc's release, "13.0"
    include_dirs: tuple[Path, ...] = ()
    lib_dirs: tuple[Path, ...] = ()  # where libcudart.so.N etc. are (no .so link for -l)

    def to_json(self) -> dict[str, Any]:
        """As the toolchain's marker records it (`from_json` reads it back)."""
        return {
            "source": self.source,
            "home": str(self.home),
            "version": self.version,
            "include_dirs": [str(p) for p in self.include_dirs],
            "lib_dirs": [str(p) for p in self.lib_dirs],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CudaToolkit:
        return cls(
            source=data["source"],
            home=Path(data["home"]),
            version=data["version"],
            include_dirs=tuple(Path(p) for p in data["include_dirs"]),
            lib_dirs=tuple(Path(p) for p in data["lib_dirs"]),
        )


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


def link_dir(root: Path) -> Path:
    """Where a toolchain's libX.so links for the wheels' libX.so.N are (its LIBRARY_PATH)."""
    return root / "buildtools" / "lib"


def link_unversioned_libs(lib_dirs: Sequence[Path], link_dir: Path) -> None:
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


def system_cuda(home: Path, accel: Accelerator, *, ctx: RunContext) -> CudaToolkit | None:
    """The system toolkit at `home` when its nvcc is torch's CUDA major.minor, else None."""
    runner, log, env = ctx.processes, ctx.stream, ctx.env
    nvcc = home / "bin" / "nvcc"
    if not nvcc.is_file():
        log.write(f"[toolchain] ignoring CUDA_HOME={home}: it has no bin/nvcc\n")
        return None
    result = runner.run([str(nvcc), "--version"], env=child_env(env), log=log, capture=True)
    version = parse_nvcc_version(result.output) if result.ok else None
    if version is None or version != accel.version:
        log.write(
            f"[toolchain] ignoring CUDA_HOME={home}: nvcc is CUDA {version or '?'}, the cell "
            f"needs {accel.version}; using NVIDIA's PyPI wheels instead\n"
        )
        return None
    return CudaToolkit(source="system", home=home, version=version)


def check_compiler_dists(snapshot: EnvSnapshot, cuda_version: str) -> None:
    """Every installed compiler wheel must be torch's CUDA major.minor (see CUDA_TOOLKIT_EXTRAS)."""
    wrong = [
        f"{name}=={version}"
        for name, version in sorted(dist_versions(snapshot).items())
        if _COMPILER_DISTS.match(name) and _major_minor(version) != cuda_version
    ]
    if wrong:
        raise ToolchainError(
            f"CUDA compiler wheels of another CUDA version are installed: {', '.join(wrong)}; "
            f"torch needs CUDA {cuda_version} (ptxas fails on PTX from a newer NVVM): pin them "
            f"to =={cuda_version}.*"
        )


def install_cuda_wheels(
    job: BuildJob,
    torch: TorchInstall,
    root: Path,
    *,
    cache_dir: Path,
    ctx: RunContext,
    with_torch: bool = True,
) -> CudaToolkit:
    """Install NVIDIA's compiler wheels for `torch`'s CUDA into the venv at `root`, check
    them (versions, nvcc runs and matches) and link their libraries for `-l`."""
    runner, log, env = ctx.processes, ctx.stream, ctx.env
    cuda_version = torch.cuda or ""
    python = root / "bin" / "python"
    if job.toolkit is not None and job.toolkit.pip_packages:
        requirements = job.toolkit.pip_packages
    else:
        requirements = cuda_toolkit_requirements(torch.requires, cuda_version=cuda_version)
    log.write(f"[toolchain] CUDA {cuda_version} compiler from PyPI: {' '.join(requirements)}\n")
    with_req = [job.torch_requirement] if with_torch else []
    index = job_index(job, python, ctx=ctx)
    install(
        python,
        [*with_req, *requirements],
        cache_dir=cache_dir,
        extra_index=index,
        ctx=ctx,
    )
    after = probe_venv(python, ctx=ctx)
    if after is None or after.site_packages is None:
        raise ToolchainError(f"{python} stopped working after installing {' '.join(requirements)}")
    check_compiler_dists(after, cuda_version)
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
        env=child_env(env),
        log=log,
        capture=True,
    )
    found = parse_nvcc_version(nvcc.output) if nvcc.ok else None
    if found != _major_minor(cuda_version):
        raise ToolchainError(
            f"{toolkit.home / 'bin' / 'nvcc'} reports CUDA {found or '(does not run)'}, torch "
            f"needs {cuda_version}; pin the toolkit wheels to =={cuda_version}.*"
        )
    link_unversioned_libs(toolkit.lib_dirs, link_dir(root))
    return toolkit
