"""The compatibility knowledge base: facts about torch, CUDA and ROCm, read from buildtools/data."""

from __future__ import annotations

__all__ = [
    "DATA_DIR",
    "Aarch64Release",
    "CudaRelease",
    "ImageRule",
    "Knowledge",
    "NeverBundle",
    "RocmRelease",
    "TorchRelease",
    "load_knowledge",
]

import fnmatch
import functools
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from ..model import DEFAULT_PLATFORM, PLATFORMS, Accelerator, Cell
from .load import DATA_DIR, load_data
from .rows import (
    Aarch64Release,
    CudaRelease,
    ImageRule,
    NeverBundle,
    RocmRelease,
    Row,
    TorchRelease,
)

# `abi:` modes that need a feature of torch: the release field that says so, and the feature
_ABI_FEATURES = {
    "abi3": ("py_limited_api", "py_limited_api support in cpp_extension"),
    "stable": ("stable_abi", "LibTorch stable ABI with TORCH_TARGET_VERSION"),
}


def _span(versions: Sequence[str]) -> str:
    """'3.8–3.12' when the minors are consecutive, else a comma list."""
    minors = [int(v.split(".")[1]) for v in versions]
    consecutive = minors == list(range(minors[0], minors[0] + len(minors)))
    if len(versions) > 2 and consecutive:
        return f"{versions[0]}–{versions[-1]}"
    return ", ".join(versions)


class Knowledge:
    """The validated knowledge base; every fact carries its source in the data files."""

    def __init__(
        self,
        *,
        torch: Iterable[TorchRelease],
        cuda: Iterable[CudaRelease],
        rocm: Iterable[RocmRelease],
        images: Iterable[ImageRule],
        never_bundle: Iterable[NeverBundle],
        data_dir: Path = DATA_DIR,
    ) -> None:
        self.data_dir = data_dir  # where the rows were read (a maintainer's copy, or the package's)
        ordered = sorted(torch, key=lambda r: Version(r.minor))
        self.torch: Mapping[str, TorchRelease] = MappingProxyType({r.minor: r for r in ordered})
        self.cuda_releases: Mapping[str, CudaRelease] = MappingProxyType(
            {c.version: c for c in cuda}
        )
        self.rocm_releases: Mapping[str, RocmRelease] = MappingProxyType(
            {r.version: r for r in rocm}
        )
        self.images: tuple[ImageRule, ...] = tuple(images)
        self.never_bundle_rules: tuple[NeverBundle, ...] = tuple(never_bundle)
        self.never_bundle: tuple[str, ...] = tuple(r.pattern for r in self.never_bundle_rules)

    # -- torch -----------------------------------------------------------------------------
    def torch_release(self, version: str) -> TorchRelease:
        """The release for '2.11', '2.11.0' or '2.11.0+cu130' (any patch of a known minor)."""
        try:
            parsed = Version(version)
        except InvalidVersion:
            raise ValueError(f"{version!r} is not a torch version") from None
        minor = f"{parsed.major}.{parsed.minor}"
        if minor not in self.torch:
            known = list(self.torch)
            raise LookupError(
                f"torch {version} is not in the knowledge base; known: {known[0]} … {known[-1]}"
            )
        return self.torch[minor]

    def abi_unavailable_reason(self, abi: str, torch_version: str) -> str | None:
        """Why `abi: abi3|stable` cannot build against `torch_version` (None: it can).

        Read from each release's `py_limited_api` / `stable_abi`; a torch newer than the
        knowledge base (`torch: current`) has what the first release that had it has.
        """
        feature = _ABI_FEATURES.get(abi)
        if feature is None:
            return None
        field, what = feature
        first = next((r.minor for r in self.torch.values() if getattr(r, field)), None)
        parsed = Version(torch_version)
        try:
            supported = bool(getattr(self.torch_release(torch_version), field))
        except LookupError:
            minor = Version(f"{parsed.major}.{parsed.minor}")
            supported = first is not None and minor >= Version(first)
        if supported:
            return None
        if first is None:
            return f"abi: {abi} needs {what}, which no known torch release has"
        if parsed >= Version(first):
            return f"abi: {abi} needs {what}, which torch {torch_version} lacks"
        return f"abi: {abi} needs torch >= {first} ({what}); torch {torch_version} is older"

    def torch_versions(self) -> tuple[str, ...]:
        """Every known patch release, sorted by version."""
        return tuple(sorted((p for r in self.torch.values() for p in r.patches), key=Version))

    def cxx11_abi(
        self, torch_version: str, accelerator: Accelerator, platform: str = DEFAULT_PLATFORM
    ) -> bool:
        """Whether that torch variant uses _GLIBCXX_USE_CXX11_ABI=1 (the 2.6 split included)."""
        release = self.torch_release(torch_version)
        if platform == "linux_aarch64":
            return release.aarch64.cxx11_abi
        return release.cxx11_abi or accelerator.name in release.cxx11_abi_variants

    def wheel_platform_tag(
        self, torch_version: str, accelerator: Accelerator, platform: str = DEFAULT_PLATFORM
    ) -> str:
        """The platform tag an extension for that variant promises: manylinux_2_28_x86_64, ..."""
        release = self.torch_release(torch_version)
        arch = platform.removeprefix("linux_")
        if platform == "linux_aarch64":
            return f"{release.aarch64.platform_tag}_{arch}"
        if accelerator.name in release.cxx11_abi_variants:
            return f"manylinux_2_28_{arch}"
        return f"{release.platform_tag}_{arch}"

    # -- CUDA / ROCm -----------------------------------------------------------------------
    def cuda(self, version: str) -> CudaRelease:
        """The CUDA release '13.0' (or 'cu130'); LookupError when unknown."""
        if version.startswith("cu"):
            version = Accelerator.parse(version).version or version
        if version not in self.cuda_releases:
            known = ", ".join(self.cuda_releases)
            raise LookupError(f"CUDA {version} is not in the knowledge base; known: {known}")
        return self.cuda_releases[version]

    def rocm(self, version: str) -> RocmRelease:
        """The ROCm release '6.4' (or 'rocm6.4'); LookupError when unknown."""
        version = version.removeprefix("rocm")
        if version not in self.rocm_releases:
            known = ", ".join(self.rocm_releases)
            raise LookupError(f"ROCm {version} is not in the knowledge base; known: {known}")
        return self.rocm_releases[version]

    # -- cells -----------------------------------------------------------------------------
    def cell_unavailable_reason(self, cell: Cell) -> str | None:
        """None if torch publishes a wheel for this cell; else a sentence saying why not."""
        label = cell.torch
        try:
            release = self.torch_release(cell.torch)
        except (LookupError, ValueError) as exc:
            return str(exc)
        version = Version(cell.torch)
        if len(version.release) > 2 and version.public not in release.patches:
            return (
                f"torch {version.public} is not a known release; known {release.minor} "
                f"releases: {', '.join(release.patches)}"
            )
        if cell.platform not in PLATFORMS:
            return f"platform {cell.platform!r} is not supported; allowed: {', '.join(PLATFORMS)}"
        try:
            accel = Accelerator.parse(cell.accelerator)
        except ValueError as exc:
            return str(exc)
        aarch64 = cell.platform == "linux_aarch64"
        if accel.kind == "rocm" and aarch64:
            return "torch has no ROCm builds for linux_aarch64 (ROCm wheels are x86_64 only)"
        reason = self._python_unavailable(label, release, cell.python, version, aarch64)
        if reason:
            return reason
        if accel.kind == "cuda":
            return self._cuda_unavailable(label, release, accel.version or "", aarch64)
        if accel.kind == "rocm" and accel.version not in release.rocm:
            built = ", ".join(release.rocm)
            return f"torch {label} was not built for ROCm {accel.version} (built: {built})"
        return None

    @staticmethod
    def _python_unavailable(
        label: str, release: TorchRelease, python: str, version: Version, aarch64: bool
    ) -> str | None:
        """Why torch has no wheel for `python` ('3.12', or free-threaded '3.14t'), or None."""
        if python.endswith("t"):
            patch = version.public if len(version.release) > 2 else None
            free = release.free_threaded_of(patch, aarch64=aarch64)
            if python.removesuffix("t") in free:
                return None
            has = ", ".join(f"{p}t" for p in free) or "none"
            where = " for linux_aarch64" if aarch64 else ""
            return (
                f"torch {label} has no free-threaded Python {python} wheels{where} "
                f"(free-threaded: {has})"
            )
        pythons = (release.aarch64.python if aarch64 else None) or release.python
        if python in pythons:
            return None
        there = aarch64 and release.aarch64.python is not None
        return (
            f"torch {label} has no Python {python} wheels"
            + (" for linux_aarch64" if there else "")
            + f" (it supports {_span(pythons)}{' there' if there else ''})"
        )

    def _cuda_unavailable(
        self, label: str, release: TorchRelease, cuda: str, aarch64: bool
    ) -> str | None:
        if not aarch64:
            if cuda in release.cuda:
                return None
            return f"torch {label} was not built for CUDA {cuda} (built: {', '.join(release.cuda)})"
        built = release.aarch64.cuda
        if cuda in built:
            return None  # download.pytorch.org has it even where PyPI's aarch64 wheel is CPU-only
        first_index = next((r.minor for r in self.torch.values() if r.aarch64.cuda), "?")
        first_pypi = next((r.minor for r in self.torch.values() if r.aarch64.pypi_cuda), "?")
        if not built:
            return (
                f"torch {label} has no CUDA builds for linux_aarch64 (aarch64 CUDA wheels start "
                f"with torch {first_index} on download.pytorch.org and {first_pypi} on PyPI)"
            )
        pypi = release.aarch64.pypi_cuda
        where = (
            f"PyPI's aarch64 wheel is CUDA {pypi}"
            if pypi
            else "on download.pytorch.org only; PyPI's aarch64 wheel is CPU-only "
            f"before torch {first_pypi}"
        )
        return (
            f"torch {label} was not built for CUDA {cuda} on linux_aarch64 "
            f"(built there: {', '.join(built)}; {where})"
        )

    # -- toolchain -------------------------------------------------------------------------
    def default_arch_list(self, torch_version: str, accelerator: Accelerator, platform: str) -> str:
        """TORCH_CUDA_ARCH_LIST (filtered to what that torch accepts) or PYTORCH_ROCM_ARCH."""
        accel = accelerator
        if accel.kind == "rocm":
            return self.rocm(accel.version or "").arch_list
        if accel.kind != "cuda":
            raise ValueError(f"{accel.name} has no device arch list (only CUDA and ROCm do)")
        if platform not in PLATFORMS:
            raise ValueError(
                f"platform {platform!r} is not supported; allowed: {', '.join(PLATFORMS)}"
            )
        release = self.torch_release(torch_version)
        entries = self.cuda(accel.version or "").arch_list[platform].split(";")
        accepted = set(release.cuda_archs)
        kept = [e for e in entries if e.removesuffix("+PTX") in accepted]
        if not kept:
            raise ValueError(f"torch {torch_version} accepts none of CUDA {accel.version}'s archs")
        # Keep forward compatibility: if the +PTX entry was dropped, the newest kept arch gets it.
        if any(e.endswith("+PTX") for e in entries) and not any(e.endswith("+PTX") for e in kept):
            kept[-1] += "+PTX"
        return ";".join(kept)

    def unaccepted_archs(self, torch_version: str, arch_list: str) -> tuple[str, ...]:
        """Entries of a TORCH_CUDA_ARCH_LIST this torch's cpp_extension rejects ('' for ';;')."""
        release = self.torch_release(torch_version)
        if not arch_list:
            return ()
        if arch_list == "native":
            return () if release.cuda_arch_native else ("native",)
        # Same order of operations as cpp_extension._get_cuda_arch_flags.
        expanded = arch_list.replace(" ", ";")
        for name, archs in release.cuda_arch_names:
            expanded = expanded.replace(name, archs)
        valid = set(release.cuda_archs) | {a + "+PTX" for a in release.cuda_archs}
        rejected: list[str] = []
        for entry in expanded.split(";"):
            if entry not in valid and entry not in rejected:
                rejected.append(entry)
        return tuple(rejected)

    def builder_image(
        self, torch_version: str, accelerator: Accelerator, platform: str = DEFAULT_PLATFORM
    ) -> str:
        """The manylinux builder image for that torch × accelerator × platform."""
        release = self.torch_release(torch_version)
        accel = accelerator
        abi = self.cxx11_abi(torch_version, accel, platform)
        for rule in self.images:
            if (
                rule.platform == platform
                and accel.kind in rule.kinds
                and (rule.cxx11_abi is None or rule.cxx11_abi == abi)
                and Version(release.minor) in SpecifierSet(rule.torch)
            ):
                return rule.image.format(version=accel.version or "")
        raise LookupError(
            f"no builder image is known for torch {torch_version} {accel.name} on {platform}"
        )

    def toolkit_requirements(self, torch_version: str, accelerator: Accelerator) -> tuple[str, ...]:
        """Pinned pip requirements for the CUDA toolkit (empty for cpu and ROCm)."""
        accel = accelerator
        if accel.kind != "cuda":
            return ()
        release = self.torch_release(torch_version)
        cuda = self.cuda(accel.version or "")
        exact = release.pypi_cuda_toolkit if accel.version == release.pypi_cuda else None
        if exact is None:
            return cuda.toolkit
        # torch's own wheel pins cuda-toolkit exactly; a looser pin would fight it.
        return tuple(
            f"{r.split('==')[0]}=={exact}" if Requirement(r).name == "cuda-toolkit" else r
            for r in cuda.toolkit
        )

    def never_bundle_rule(self, soname: str) -> NeverBundle | None:
        """The first rule whose pattern matches `soname` (the data lists narrow rows first)."""
        for rule in self.never_bundle_rules:
            if fnmatch.fnmatchcase(soname, rule.pattern):
                return rule
        return None

    def never_bundle_reason(self, soname: str) -> str | None:
        """Why a library must not be bundled, or None when no rule matches its SONAME."""
        rule = self.never_bundle_rule(soname)
        return rule.reason if rule is not None else None

    def unconfirmed(self) -> tuple[str, ...]:
        """One line per fact marked confirmed: false, with its note."""
        rows: list[tuple[str, Row]] = [(f"torch {r.minor}", r) for r in self.torch.values()]
        rows += [(f"torch {r.minor} linux_aarch64", r.aarch64) for r in self.torch.values()]
        rows += [(f"CUDA {c.version}", c) for c in self.cuda_releases.values()]
        rows += [(f"ROCm {r.version}", r) for r in self.rocm_releases.values()]
        rows += [(f"image {i.image}", i) for i in self.images]
        rows += [(f"never_bundle {n.pattern}", n) for n in self.never_bundle_rules]
        return tuple(
            f"{name}: {row.note or 'unconfirmed'}" for name, row in rows if not row.confirmed
        )


def _load(data_dir: Path) -> Knowledge:
    rows = load_data(data_dir)
    return Knowledge(
        torch=rows.torch,
        cuda=rows.cuda,
        rocm=rows.rocm,
        images=rows.images,
        never_bundle=rows.never_bundle,
        data_dir=data_dir,
    )


@functools.cache
def _load_default() -> Knowledge:
    return _load(DATA_DIR)


def load_knowledge(data_dir: Path | None = None) -> Knowledge:
    """Load and validate the knowledge base (cached for the packaged data directory)."""
    return _load_default() if data_dir is None else _load(data_dir)
