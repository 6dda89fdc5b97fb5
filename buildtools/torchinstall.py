"""Which torch an interpreter imports: the one record of an installed torch, `TorchInstall`.

Every stage that asks "which torch is installed here" gets this record from
`buildtools.probe` (the toolchain's verification, `torch: current`, doctor, smoke, the wheel
checks), and the planner takes one for `torch: current` without importing the probe. It
sits beside `model` rather than in it only to keep each module to one concept.
"""

from __future__ import annotations

__all__ = [
    "GpuInfo",
    "TorchBuild",
    "TorchInstall",
    "accelerator_of",
    "torch_build_kind",
]

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

from .model import DEFAULT_PLATFORM

TorchBuild = Literal["release", "prerelease", "nightly", "source", "vendor"]
_ACCEL_LABEL_RE = re.compile(r"^(?:cpu|cu\d{3,4}|rocm\d+(?:\.\d+)*|xpu)$")
_GIT_LABEL_RE = re.compile(r"^git([0-9a-f]{7,40})$")


def accelerator_of(cuda: str | None, hip: str | None) -> str:
    """torch.version.cuda/hip → the accelerator name: '13.0' → 'cu130', '7.2.x' → 'rocm7.2'."""
    if cuda:
        major, _, rest = cuda.partition(".")
        return f"cu{major}{rest.split('.')[0] or '0'}"
    if hip:
        parts = re.split(r"[.-]", hip)
        return f"rocm{parts[0]}.{parts[1] if len(parts) > 1 else '0'}"
    return "cpu"


def torch_build_kind(
    version: str, *, direct_url: Mapping[str, Any] | None = None, has_record: bool = True
) -> TorchBuild:
    """How this torch came to be: a release/pre-release/nightly wheel, a source or vendor build.

    A source build is an install from a local directory (`direct_url.json` with `dir_info`),
    an installation without RECORD (`setup.py develop`), or a version like
    '2.13.0a0+git1a2b3c4'. A vendor build (NVIDIA NGC's '2.8.0a0+5228986c39.nv25.06')
    carries a local label that is not an accelerator. Nightlies are '.devYYYYMMDD'.
    """
    if direct_url is not None and "dir_info" in direct_url:
        return "source"
    if not has_record:
        return "source"
    try:
        v = Version(version)
    except InvalidVersion:
        return "source"
    local = v.local or ""
    first = local.split(".")[0]
    if _GIT_LABEL_RE.match(first):
        return "source"
    if local and not _ACCEL_LABEL_RE.match(local):
        return "vendor"
    if v.is_devrelease:
        return "nightly"
    if v.is_prerelease:
        return "prerelease"
    return "release"


@dataclass(frozen=True, kw_only=True)
class GpuInfo:
    """A GPU torch sees: CUDA compute capability, or the ROCm gfx arch."""

    index: int
    name: str
    capability: tuple[int, int] | None = None
    gcn_arch: str | None = None  # "gfx90a:sramecc+:xnack-"

    @property
    def arch(self) -> str:
        """'sm_90' for CUDA, 'gfx90a' for ROCm."""
        if self.gcn_arch and self.gcn_arch.startswith("gfx"):
            return self.gcn_arch.split(":", 1)[0]
        if self.capability is None:
            return "unknown"
        return f"sm_{self.capability[0]}{self.capability[1]}"

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "capability": list(self.capability) if self.capability else None,
            "gcn_arch": self.gcn_arch,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, index: int = 0) -> GpuInfo:
        cap = data.get("capability")
        return cls(
            index=int(data.get("index", index)),
            name=str(data.get("name", "")),
            capability=(int(cap[0]), int(cap[1])) if cap else None,
            gcn_arch=_opt_str(data.get("gcn_arch")),
        )


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _opt_bool(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


def _opt_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True, kw_only=True)
class TorchInstall:
    """Which torch an interpreter imports, as that interpreter reports it (`buildtools.probe`).

    Read from torch's files (torch/version.py and its distribution's metadata; no import),
    and, where `imported` is True, completed by `import torch` itself: only then are the C++
    ABI, the arch list and the GPUs known. The one record of an installed torch for every
    stage that asks: the toolchain's verification, `torch: current`, doctor, smoke and the
    wheel checks (whose `TorchTarget` is built from it).
    """

    version: str  # torch.__version__, "2.11.0+cu130"
    package_dir: Path  # the torch package: <site-packages>/torch
    cuda: str | None = None  # torch.version.cuda, "13.0"
    hip: str | None = None  # torch.version.hip
    cxx11_abi: bool | None = None  # None: not imported (libc10 or a record may say)
    git_version: str | None = None
    debug: bool | None = None
    requires: tuple[str, ...] = ()  # the Requires-Dist of its distribution
    dist_version: str | None = None  # its distribution's version (None: no dist-info)
    has_record: bool = True
    direct_url: Mapping[str, Any] | None = None
    installer: str | None = None
    imported: bool | None = None  # None: the import was not tried
    import_error: str | None = None
    arch_list: tuple[str, ...] = ()  # torch.cuda.get_arch_list() where torch answered
    gpus: tuple[GpuInfo, ...] = ()
    # what torch said when asked for devices (None: not asked): torch.cuda.is_available(),
    # torch.cuda.device_count(), the CUDA version the driver supports ("13.0", from
    # cudaDriverGetVersion; None where torch has no CUDA or no driver answered), and the
    # error torch raised while asking
    device_available: bool | None = None
    device_count: int | None = None
    driver_cuda: str | None = None
    device_error: str | None = None
    # the interpreter that reported it; None where torch was read from a directory alone
    python: Path | None = None
    python_version: str | None = None  # "3.11.7"
    platform: str = DEFAULT_PLATFORM

    @property
    def site_packages(self) -> Path:
        """The directory holding the torch package."""
        return self.package_dir.parent

    @property
    def accelerator(self) -> str:
        return accelerator_of(self.cuda, self.hip)

    @property
    def public_version(self) -> str:
        try:
            return Version(self.version).public
        except InvalidVersion:
            return self.version

    @property
    def build(self) -> TorchBuild:
        return torch_build_kind(
            self.version, direct_url=self.direct_url, has_record=self.has_record
        )

    @property
    def git_short(self) -> str | None:
        if self.git_version and re.fullmatch(r"[0-9a-f]{7,40}", self.git_version):
            return self.git_version[:7]
        return None

    @property
    def python_xy(self) -> str:
        return ".".join((self.python_version or "").split(".")[:2])

    def to_json(self) -> dict[str, Any]:
        """Every field, JSON-serialisable (`from_json` reads it back)."""
        return {
            "version": self.version,
            "package_dir": str(self.package_dir),
            "cuda": self.cuda,
            "hip": self.hip,
            "cxx11_abi": self.cxx11_abi,
            "git_version": self.git_version,
            "debug": self.debug,
            "requires": list(self.requires),
            "dist_version": self.dist_version,
            "has_record": self.has_record,
            "direct_url": dict(self.direct_url) if self.direct_url is not None else None,
            "installer": self.installer,
            "imported": self.imported,
            "import_error": self.import_error,
            "arch_list": list(self.arch_list),
            "gpus": [g.to_json() for g in self.gpus],
            "device_available": self.device_available,
            "device_count": self.device_count,
            "driver_cuda": self.driver_cuda,
            "device_error": self.device_error,
            "python": str(self.python) if self.python is not None else None,
            "python_version": self.python_version,
            "platform": self.platform,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TorchInstall:
        """The record `to_json` wrote; what is missing or of the wrong type is unknown."""
        direct_url = data.get("direct_url")
        python = data.get("python")
        return cls(
            version=str(data["version"]),
            package_dir=Path(data["package_dir"]),
            cuda=_opt_str(data.get("cuda")),
            hip=_opt_str(data.get("hip")),
            cxx11_abi=_opt_bool(data.get("cxx11_abi")),
            git_version=_opt_str(data.get("git_version")),
            debug=_opt_bool(data.get("debug")),
            requires=tuple(str(r) for r in data.get("requires") or ()),
            dist_version=_opt_str(data.get("dist_version")),
            has_record=data.get("has_record") is not False,
            direct_url=direct_url if isinstance(direct_url, Mapping) else None,
            installer=_opt_str(data.get("installer")),
            imported=_opt_bool(data.get("imported")),
            import_error=_opt_str(data.get("import_error")),
            arch_list=tuple(str(a) for a in data.get("arch_list") or ()),
            gpus=tuple(GpuInfo.from_json(g, index=i) for i, g in enumerate(data.get("gpus") or ())),
            device_available=_opt_bool(data.get("device_available")),
            device_count=_opt_int(data.get("device_count")),
            driver_cuda=_opt_str(data.get("driver_cuda")),
            device_error=_opt_str(data.get("device_error")),
            python=Path(python) if isinstance(python, str) and python else None,
            python_version=_opt_str(data.get("python_version")),
            platform=_opt_str(data.get("platform")) or DEFAULT_PLATFORM,
        )


def window_build_ok(kind: str) -> bool:
    """Whether a wheel of accelerator `kind` may be proven on another build of a torch
    release it claims (not the one it was built against): a CPU wheel uses only the CPU
    libraries every build of a release carries (libtorch_cpu, libc10), so a CUDA or ROCm
    build of the release proves its ABI window as well; a device wheel needs its own build.
    The build that proved each release is recorded."""
    return kind == "cpu"
