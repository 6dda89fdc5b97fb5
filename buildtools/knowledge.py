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
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from buildtools.errors import KnowledgeError
from buildtools.model import DEFAULT_PLATFORM, PLATFORMS, Accelerator, Cell

DATA_DIR = Path(__file__).parent / "data"

PyVersion = Annotated[str, StringConstraints(pattern=r"^3\.\d+$")]
# cuXYZ accelerator names carry a one-digit CUDA minor (model.Accelerator.parse).
CudaVersion = Annotated[str, StringConstraints(pattern=r"^\d+\.\d$")]
RocmVersion = Annotated[str, StringConstraints(pattern=r"^\d+\.\d+(\.\d+)?$")]
PlatformBase = Literal["manylinux2014", "manylinux_2_28"]


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str = Field(min_length=1)
    confirmed: bool = True
    note: str | None = None


class Aarch64Release(_Row):
    """What a torch release offers on linux_aarch64."""

    python: tuple[PyVersion, ...] | None = None  # None: same as linux_x86_64
    cuda: tuple[CudaVersion, ...] = ()  # CUDA variants built (download.pytorch.org)
    pypi_cuda: CudaVersion | None = None  # CUDA of the PyPI aarch64 wheel; None: CPU-only
    platform_tag: PlatformBase
    cxx11_abi: bool

    @model_validator(mode="after")
    def _consistent(self) -> Aarch64Release:
        if self.pypi_cuda is not None and self.pypi_cuda not in self.cuda:
            raise ValueError(f"pypi_cuda: {self.pypi_cuda} is not one of cuda {list(self.cuda)}")
        return self


class TorchRelease(_Row):
    """Facts about one torch minor release (linux_x86_64 unless a field says otherwise)."""

    minor: Annotated[str, StringConstraints(pattern=r"^\d+\.\d+$")]
    patches: tuple[str, ...] = Field(min_length=1)
    python: tuple[PyVersion, ...] = Field(min_length=1)
    cuda: tuple[CudaVersion, ...]
    rocm: tuple[RocmVersion, ...]
    pypi_cuda: CudaVersion | None
    pypi_cuda_toolkit: str | None = None
    platform_tag: PlatformBase
    cxx11_abi: bool
    cxx11_abi_variants: tuple[str, ...] = ()
    cxx_std: Literal["c++17", "c++20"]
    stable_abi: bool
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


class CudaRelease(_Row):
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


class RocmRelease(_Row):
    """One ROCm version and its default PYTORCH_ROCM_ARCH."""

    version: RocmVersion
    arch_list: str = Field(pattern=r"^gfx[0-9a-f]+(;gfx[0-9a-f]+)*$")


class ImageRule(_Row):
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


class NeverBundle(_Row):
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


def _accelerator(accelerator: Accelerator | str) -> Accelerator:
    return accelerator if isinstance(accelerator, Accelerator) else Accelerator.parse(accelerator)


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
    ) -> None:
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

    def torch_versions(self) -> tuple[str, ...]:
        """Every known patch release, sorted by version."""
        return tuple(sorted((p for r in self.torch.values() for p in r.patches), key=Version))

    def cxx11_abi(
        self, torch_version: str, accelerator: Accelerator | str, platform: str = DEFAULT_PLATFORM
    ) -> bool:
        """Whether that torch variant uses _GLIBCXX_USE_CXX11_ABI=1 (the 2.6 split included)."""
        release = self.torch_release(torch_version)
        if platform == "linux_aarch64":
            return release.aarch64.cxx11_abi
        return release.cxx11_abi or _accelerator(accelerator).name in release.cxx11_abi_variants

    def wheel_platform_tag(
        self, torch_version: str, accelerator: Accelerator | str, platform: str = DEFAULT_PLATFORM
    ) -> str:
        """The platform tag an extension for that variant promises: manylinux_2_28_x86_64, ..."""
        release = self.torch_release(torch_version)
        arch = platform.removeprefix("linux_")
        if platform == "linux_aarch64":
            return f"{release.aarch64.platform_tag}_{arch}"
        if _accelerator(accelerator).name in release.cxx11_abi_variants:
            return f"manylinux_2_28_{arch}"
        return f"{release.platform_tag}_{arch}"

    # -- CUDA / ROCm -----------------------------------------------------------------------
    def cuda(self, version: str) -> CudaRelease:
        """The CUDA release '13.0' (or 'cu130'); LookupError when unknown."""
        if version.startswith("cu"):
            version = _accelerator(version).version or version
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
            accel = _accelerator(cell.accelerator)
        except ValueError as exc:
            return str(exc)
        aarch64 = cell.platform == "linux_aarch64"
        if accel.kind == "rocm" and aarch64:
            return "torch has no ROCm builds for linux_aarch64 (ROCm wheels are x86_64 only)"
        if cell.python.endswith("t"):
            return f"free-threaded Python ({cell.python}) is not modelled; use CPython x.y"
        pythons = (release.aarch64.python if aarch64 else None) or release.python
        if cell.python not in pythons:
            there = aarch64 and release.aarch64.python is not None
            return (
                f"torch {label} has no Python {cell.python} wheels"
                + (" for linux_aarch64" if there else "")
                + f" (it supports {_span(pythons)}{' there' if there else ''})"
            )
        if accel.kind == "cuda":
            return self._cuda_unavailable(label, release, accel.version or "", aarch64)
        if accel.kind == "rocm" and accel.version not in release.rocm:
            built = ", ".join(release.rocm)
            return f"torch {label} was not built for ROCm {accel.version} (built: {built})"
        return None

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
    def default_arch_list(
        self, torch_version: str, accelerator: Accelerator | str, platform: str
    ) -> str:
        """TORCH_CUDA_ARCH_LIST (filtered to what that torch accepts) or PYTORCH_ROCM_ARCH."""
        accel = _accelerator(accelerator)
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
        self, torch_version: str, accelerator: Accelerator | str, platform: str = DEFAULT_PLATFORM
    ) -> str:
        """The manylinux builder image for that torch × accelerator × platform."""
        release = self.torch_release(torch_version)
        accel = _accelerator(accelerator)
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

    def toolkit_requirements(
        self, torch_version: str, accelerator: Accelerator | str
    ) -> tuple[str, ...]:
        """Pinned pip requirements for the CUDA toolkit (empty for cpu and ROCm)."""
        accel = _accelerator(accelerator)
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
        rows: list[tuple[str, _Row]] = [(f"torch {r.minor}", r) for r in self.torch.values()]
        rows += [(f"torch {r.minor} linux_aarch64", r.aarch64) for r in self.torch.values()]
        rows += [(f"CUDA {c.version}", c) for c in self.cuda_releases.values()]
        rows += [(f"ROCm {r.version}", r) for r in self.rocm_releases.values()]
        rows += [(f"image {i.image}", i) for i in self.images]
        rows += [(f"never_bundle {n.pattern}", n) for n in self.never_bundle_rules]
        return tuple(
            f"{name}: {row.note or 'unconfirmed'}" for name, row in rows if not row.confirmed
        )


# -- loading ---------------------------------------------------------------------------------
# file name → (top-level key, validator of its rows)
_FILES: dict[str, tuple[str, TypeAdapter[Any]]] = {
    "torch.yaml": ("releases", TypeAdapter(tuple[TorchRelease, ...])),
    "cuda.yaml": ("releases", TypeAdapter(tuple[CudaRelease, ...])),
    "rocm.yaml": ("releases", TypeAdapter(tuple[RocmRelease, ...])),
    "images.yaml": ("images", TypeAdapter(tuple[ImageRule, ...])),
    "never_bundle.yaml": ("patterns", TypeAdapter(tuple[NeverBundle, ...])),
}
_ROW_KEYS = ("minor", "version", "pattern", "image")


def _where(raw: Any, loc: Sequence[int | str]) -> tuple[int | None, str]:
    """(line, 'releases[3] (minor 2.3): cxx11_abi') for an error location inside a data file."""
    line: int | None = None
    tokens: list[str] = []
    node = raw
    for step in loc:
        if isinstance(node, CommentedSeq) and isinstance(step, int) and step < len(node):
            line = node.lc.item(step)[0] + 1
            node = node[step]
            key = next((k for k in _ROW_KEYS if isinstance(node, Mapping) and k in node), None)
            label = f"[{step}]" + (f" ({key} {node[key]})" if key and not tokens[1:] else "")
            tokens[-1:] = [(tokens[-1] if tokens else "") + label]
            continue
        if isinstance(node, CommentedMap) and step in node:
            line = node.lc.key(step)[0] + 1
            node = node[step]
        else:
            node = None
        tokens.append(str(step))
    row, fields = (tokens[0], tokens[1:]) if tokens else ("", [])
    return line, row + (": " + ".".join(fields) if fields else "")


def _problem(path: Path, raw: Any, loc: Sequence[int | str], msg: str) -> str:
    msg = msg.removeprefix("Value error, ")
    # Row validators prefix their message with the field they are about; point at that field.
    field, _, rest = msg.partition(": ")
    if rest and re.fullmatch(r"\w+", field):
        loc, msg = (*loc, field), rest
    line, where = _where(raw, loc)
    return f"{path}:{line or 1}: {where}: {msg}"


def _read(path: Path) -> tuple[Any, Any]:
    """(round-trip tree with line numbers, plain Python data) of one YAML file."""
    try:
        text = path.read_text(encoding="utf-8")
        return YAML(typ="rt").load(text), YAML(typ="safe").load(text)
    except OSError as exc:
        raise KnowledgeError(f"{path}: cannot read knowledge data: {exc.strerror}") from None
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise KnowledgeError(f"{path}{line}: not valid YAML: {exc}") from None


def _cross_check(files: Mapping[str, Any], raws: Mapping[str, Any], data_dir: Path) -> list[str]:
    """Facts across rows and files: torch rows name known CUDA/ROCm; no shadowed never_bundle."""
    problems: list[str] = []
    cuda = {c.version for c in files["cuda.yaml"]}
    rocm = {r.version for r in files["rocm.yaml"]}
    minors: set[str] = set()
    for i, rel in enumerate(files["torch.yaml"]):
        missing_cuda = "no row in cuda.yaml for CUDA"
        checks = [
            ("minor", [rel.minor] if rel.minor in minors else [], "duplicate release"),
            ("cuda", [c for c in rel.cuda if c not in cuda], missing_cuda),
            ("aarch64", [c for c in rel.aarch64.cuda if c not in cuda], missing_cuda),
            ("rocm", [r for r in rel.rocm if r not in rocm], "no row in rocm.yaml for ROCm"),
        ]
        minors.add(rel.minor)
        for field, bad, what in checks:
            if bad:
                line, where = _where(raws["torch.yaml"], ("releases", i, field))
                problems.append(
                    f"{data_dir / 'torch.yaml'}:{line}: {where}: {what} {', '.join(bad)}"
                )
    # never_bundle_rule takes the first match: 'libtorch_cuda*.so*' must precede 'libtorch*.so*'
    rules = files["never_bundle.yaml"]
    for i, rule in enumerate(rules):
        broader = [r.pattern for r in rules[:i] if fnmatch.fnmatchcase(rule.pattern, r.pattern)]
        if broader:
            line, where = _where(raws["never_bundle.yaml"], ("patterns", i, "pattern"))
            problems.append(
                f"{data_dir / 'never_bundle.yaml'}:{line}: {where}: shadowed by the earlier "
                f"{broader[0]!r}; list the narrower pattern first"
            )
    return problems


def _load(data_dir: Path) -> Knowledge:
    rows: dict[str, Any] = {}
    raws: dict[str, Any] = {}
    problems: list[str] = []
    for name, (key, adapter) in _FILES.items():
        path = data_dir / name
        raw, plain = _read(path)
        raws[name] = raw
        if not isinstance(plain, dict) or list(plain) != [key] or not plain[key]:
            problems.append(f"{path}:1: expected one top-level key {key!r} with a list of rows")
            continue
        try:
            rows[name] = adapter.validate_python(plain[key])
        except ValidationError as exc:
            problems += [_problem(path, raw, (key, *e["loc"]), e["msg"]) for e in exc.errors()]
    if not problems:
        problems = _cross_check(rows, raws, data_dir)
    if problems:
        raise KnowledgeError(
            "invalid knowledge data (a bug in torch-buildtools' data files):\n  "
            + "\n  ".join(problems)
        )
    return Knowledge(
        torch=rows["torch.yaml"],
        cuda=rows["cuda.yaml"],
        rocm=rows["rocm.yaml"],
        images=rows["images.yaml"],
        never_bundle=rows["never_bundle.yaml"],
    )


@functools.cache
def _load_default() -> Knowledge:
    return _load(DATA_DIR)


def load_knowledge(data_dir: Path | None = None) -> Knowledge:
    """Load and validate the knowledge base (cached for the packaged data directory)."""
    return _load_default() if data_dir is None else _load(data_dir)
