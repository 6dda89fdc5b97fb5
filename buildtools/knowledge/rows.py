"""The rows of the knowledge data files: one validated model per kind of fact."""

from __future__ import annotations

__all__ = [
    "Aarch64Release",
    "CudaRelease",
    "ImageRule",
    "NeverBundle",
    "RocmRelease",
    "Row",
    "TorchRelease",
]

import re
from typing import Annotated, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from ..model import PLATFORMS

PyVersion = Annotated[str, StringConstraints(pattern=r"^3\.\d+$")]
# cuXYZ accelerator names carry a one-digit CUDA minor (model.Accelerator.parse).
CudaVersion = Annotated[str, StringConstraints(pattern=r"^\d+\.\d$")]
RocmVersion = Annotated[str, StringConstraints(pattern=r"^\d+\.\d+(\.\d+)?$")]
PlatformBase = Literal["manylinux2014", "manylinux_2_28"]


class Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(min_length=1)
    confirmed: bool = True
    note: str | None = None


class Aarch64Release(Row):
    """What a torch release offers on linux_aarch64."""

    python: tuple[PyVersion, ...] | None = None  # None: same as linux_x86_64
    free_threaded: tuple[PyVersion, ...] | None = None  # None: same as linux_x86_64
    cuda: tuple[CudaVersion, ...] = ()  # CUDA variants built (download.pytorch.org)
    pypi_cuda: CudaVersion | None = None  # CUDA of the PyPI aarch64 wheel; None: CPU-only
    platform_tag: PlatformBase
    cxx11_abi: bool

    @model_validator(mode="after")
    def _consistent(self) -> Aarch64Release:
        if self.pypi_cuda is not None and self.pypi_cuda not in self.cuda:
            raise ValueError(f"pypi_cuda: {self.pypi_cuda} is not one of cuda {list(self.cuda)}")
        return self


class TorchRelease(Row):
    """Facts about one torch minor release (linux_x86_64 unless a field says otherwise)."""

    minor: Annotated[str, StringConstraints(pattern=r"^\d+\.\d+$")]
    patches: tuple[str, ...] = Field(min_length=1)
    python: tuple[PyVersion, ...] = Field(min_length=1)
    # free-threaded CPython x.y (cpXYt wheels), per patch where a patch differs
    free_threaded: tuple[PyVersion, ...] = ()
    free_threaded_patches: dict[str, tuple[PyVersion, ...]] = Field(default_factory=dict)
    cuda: tuple[CudaVersion, ...]
    rocm: tuple[RocmVersion, ...]
    pypi_cuda: CudaVersion | None
    pypi_cuda_toolkit: str | None = None
    platform_tag: PlatformBase
    # the tag the index's x86_64 files carry where it differs from the one extensions target
    index_platform_tag: Literal["manylinux1"] | None = None
    cxx11_abi: bool
    cxx11_abi_variants: tuple[str, ...] = ()
    cxx_std: Literal["c++17", "c++20"]
    stable_abi: bool
    py_limited_api: bool
    cuda_archs: tuple[str, ...] = Field(min_length=1)
    cuda_arch_names: tuple[tuple[str, str], ...] = ()
    cuda_arch_native: bool = False
    aarch64: Aarch64Release

    @model_validator(mode="after")
    def _consistent(self) -> TorchRelease:
        try:
            versions = [Version(p) for p in self.patches]
        except InvalidVersion as exc:
            raise ValueError(f"patches: {exc}") from None
        if any(f"{v.major}.{v.minor}" != self.minor for v in versions):
            raise ValueError(f"patches: every patch must be a {self.minor}.x release")
        if versions != sorted(set(versions)):
            raise ValueError("patches: must be sorted and unique")
        if self.pypi_cuda is not None and self.pypi_cuda not in self.cuda:
            raise ValueError(f"pypi_cuda: {self.pypi_cuda} is not one of cuda {list(self.cuda)}")
        for patch in self.free_threaded_patches:
            if patch not in self.patches:
                raise ValueError(f"free_threaded_patches: {patch} is not one of patches")
        if self.pypi_cuda_toolkit is not None and not (
            self.pypi_cuda and self.pypi_cuda_toolkit.startswith(self.pypi_cuda + ".")
        ):
            raise ValueError(
                f"pypi_cuda_toolkit: {self.pypi_cuda_toolkit} is not CUDA {self.pypi_cuda}"
            )
        built = {f"cu{c.replace('.', '')}" for c in self.cuda} | {f"rocm{r}" for r in self.rocm}
        for name in self.cxx11_abi_variants:
            if name not in built:
                raise ValueError(
                    f"cxx11_abi_variants: {name} is not a variant built for {self.minor}"
                )
        return self

    def free_threaded_of(
        self, patch: str | None = None, *, aarch64: bool = False
    ) -> tuple[str, ...]:
        """The free-threaded Pythons with wheels for `patch` (the minor's when None)."""
        if aarch64 and self.aarch64.free_threaded is not None:
            return self.aarch64.free_threaded
        if patch is not None and patch in self.free_threaded_patches:
            return self.free_threaded_patches[patch]
        return self.free_threaded


class CudaRelease(Row):
    """One CUDA version: the default arch list per platform and the pinned PyPI toolkit."""

    version: CudaVersion
    arch_list: dict[str, str]
    toolkit: tuple[str, ...] = Field(min_length=1)
    pip_complete: bool  # False: the pip wheels lack the nvcc driver; a system CUDA_HOME is needed

    @model_validator(mode="after")
    def _consistent(self) -> CudaRelease:
        if set(self.arch_list) != set(PLATFORMS):
            raise ValueError(f"arch_list: keys must be exactly {list(PLATFORMS)}")
        for platform, archs in self.arch_list.items():
            if not all(archs.split(";")):
                raise ValueError(f"arch_list: {platform}: empty entry in {archs!r}")
        for text in self.toolkit:
            try:
                req = Requirement(text)
            except InvalidRequirement as exc:
                raise ValueError(f"toolkit: {exc}") from None
            if str(req.specifier) != f"=={self.version}.*":
                raise ValueError(f"toolkit: {text!r} must be pinned '=={self.version}.*'")
        return self


class RocmRelease(Row):
    """One ROCm version and its default PYTORCH_ROCM_ARCH."""

    version: RocmVersion
    arch_list: str = Field(pattern=r"^gfx[0-9a-f]+(;gfx[0-9a-f]+)*$")


class ImageRule(Row):
    """Which builder image builds a torch range × accelerator kind × platform."""

    torch: str
    platform: Literal["linux_x86_64", "linux_aarch64"]
    kinds: tuple[Literal["cpu", "cuda", "rocm"], ...] = Field(min_length=1)
    cxx11_abi: bool | None = None
    image: str = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> ImageRule:
        try:
            SpecifierSet(self.torch)
        except InvalidSpecifier as exc:
            raise ValueError(f"torch: {exc}") from None
        if set(re.findall(r"{(\w*)}", self.image)) - {"version"}:
            raise ValueError(f"image: only {{version}} may be substituted in {self.image!r}")
        return self


class NeverBundle(Row):
    """A library (fnmatch pattern on the SONAME) that a wheel must never bundle, and why."""

    pattern: str = Field(min_length=1)
    # who provides it: torch (any build, or only its CUDA/ROCm builds), the GPU runtime, the driver
    group: Literal["torch", "torch-cuda", "torch-rocm", "cuda", "rocm", "driver"]
    reason: str = Field(min_length=1)

    @property
    def torch_own(self) -> bool:
        """Part of torch itself: an extension that needs it links torch."""
        return self.group in ("torch", "torch-cuda", "torch-rocm")

    @property
    def device(self) -> bool:
        """Only a CUDA/ROCm torch or a GPU machine has it: a CPU build must not need it."""
        return self.group != "torch"
