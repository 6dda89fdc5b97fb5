"""Static checks of a built wheel against the torch it targets (CPU only, no import).

`check_wheel` opens the wheel, reads every ELF in it with `buildtools.wheel.elf`, and compares
what it finds with the target torch installation(s) and with what the job promised:

==================  ======================================================================
code                what it catches
==================  ======================================================================
bundled-torch-lib   a torch/c10/CUDA/ROCm runtime library grafted into the wheel
undefined-symbol    a dynamic symbol neither torch, the allowed system libraries,
                    libpython nor the wheel itself provides (fails at import)
no-device-code      a CUDA/ROCm cell without device code, or without a promised arch
cpu-links-cuda      a CPU cell whose extension needs libcudart/libc10_cuda/libtorch_cuda
abi-mismatch        std::string symbols in the other C++ ABI than the target torch's
metadata-pin        Requires-Dist torch missing or not the expected spec
local-version       the version lacks the expected local label
platform-tag        a tag weaker than promised, or symbol versions beyond the tag
build-record        the wheel's buildtools.json missing or invalid
==================  ======================================================================
"""

from __future__ import annotations

__all__ = [
    "CHECK_CODES",
    "Expectation",
    "TorchTarget",
    "check_binaries",
    "check_wheel",
    "expected_archs",
    "has_errors",
    "is_grafted",
    "load_torch_target",
]

import ast
import fnmatch
import functools
import importlib.resources
import json
import re
import shutil
import tempfile
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from ..errors import ToolchainError
from ..model import Accelerator, BuildJob, Finding, Severity
from ..runner import Runner
from .elf import ELF_MAGIC, ElfInfo, demangle, inspect_elf, strip_graft_hash
from .meta import (
    PlatformTag,
    WheelName,
    platform_tag_satisfies,
    read_build_record,
    read_metadata,
    torch_requirements,
    validate_build_record,
)
from .repair import scan_torch_libs

CHECK_CODES = (
    "bundled-torch-lib",
    "undefined-symbol",
    "no-device-code",
    "cpu-links-cuda",
    "abi-mismatch",
    "metadata-pin",
    "local-version",
    "platform-tag",
    "build-record",
)

# Runtime libraries that must come from torch's own installation, never from a copy in
# the wheel (research/torch-abi.md §6: the "multiple backend fallbacks" abort, a second
# CUDA runtime). Matched only against grafted libraries (in *.libs/ or hash-renamed):
# a package's own libtorchfoo.so is not a graft.
TORCH_RUNTIME_PATTERNS = (
    "libtorch*.so*",
    "libc10*.so*",
    "libshm.so*",
    "libcaffe2_nvrtc.so*",
    "libcuda.so*",
    "libcudart.so*",
    "libcublas*.so*",
    "libcudnn*.so*",
    "libcufft*.so*",
    "libcufile*.so*",
    "libcupti*.so*",
    "libcurand*.so*",
    "libcusolver*.so*",
    "libcusparse*.so*",
    "libnccl*.so*",
    "libnvJitLink*.so*",
    "libnvrtc*.so*",
    "libnvshmem*.so*",
    "libnvToolsExt*.so*",
    "libamdhip64*.so*",
    "libMIOpen*.so*",
    "libhipblas*.so*",
    "libhipfft*.so*",
    "libhiprand*.so*",
    "libhipsparse*.so*",
    "libhipsolver*.so*",
    "libhsa-runtime64*.so*",
    "librccl*.so*",
    "librocblas*.so*",
    "librocrand*.so*",
    "libroctx64*.so*",
)

# What a CPU cell must not need: a CUDA/ROCm build of torch or the device runtime.
DEVICE_LIB_PATTERNS = (
    "libcudart.so*",
    "libcuda.so*",
    "libc10_cuda.so",
    "libtorch_cuda*.so",
    "libc10_hip.so",
    "libtorch_hip.so",
    "libamdhip64.so*",
)

_LIBPYTHON_PREFIXES = ("Py", "_Py")
_MAX_SYMBOLS_PER_FILE = 50
_ARCH_RE = re.compile(r"^(?P<major>\d+)\.(?P<minor>\d+)(?P<suffix>[af]?)(?P<ptx>\+PTX)?$", re.I)


# --- inputs ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TorchTarget:
    """One installed torch a wheel must work with."""

    version: str
    site_packages: Path
    cuda_version: str | None = None
    hip_version: str | None = None
    cxx11_abi: bool = True

    @property
    def label(self) -> str:
        return f"torch {self.version}"


@dataclass(frozen=True, kw_only=True)
class Expectation:
    """What the job promised about the wheel it built."""

    accelerator: str = "cpu"
    arch_list: str | None = None  # TORCH_CUDA_ARCH_LIST / PYTORCH_ROCM_ARCH
    platform_tag: str | None = None
    weaker_platform_tag: Literal["error", "warning"] = "error"
    local_version: str | None = None  # e.g. "pt211cu130"
    requires_dist_torch: str | None = None  # e.g. "torch==2.11.*"
    build_record: bool = True

    @classmethod
    def from_job(
        cls, job: BuildJob, *, weaker_platform_tag: Literal["error", "warning"] = "error"
    ) -> Expectation:
        """What `job` promised (accelerator, archs, tag, local label, torch pin)."""
        return cls(
            accelerator=job.accelerator,
            arch_list=job.toolkit.arch_list if job.toolkit else None,
            platform_tag=job.platform_tag,
            weaker_platform_tag=weaker_platform_tag,
            local_version=job.local_version or None,
            requires_dist_torch=job.requires_dist or None,
        )


def expected_archs(arch_list: str, kind: Literal["cuda", "rocm"]) -> frozenset[str]:
    """'7.5;8.0;12.0+PTX' → {sm_75, sm_80, sm_120, compute_120}; 'gfx90a;gfx942' for ROCm."""
    tokens = [t for t in re.split(r"[;,\s]+", arch_list.strip()) if t]
    out: set[str] = set()
    for token in tokens:
        if kind == "rocm":
            base = token.split(":", 1)[0].lower()
            if not re.fullmatch(r"gfx[0-9a-f]+", base):
                raise ValueError(f"{token!r} in {arch_list!r} is not a ROCm arch like 'gfx90a'")
            out.add(base)
            continue
        m = _ARCH_RE.match(token)
        if m is None:
            raise ValueError(
                f"{token!r} in {arch_list!r} is not a CUDA arch; expected e.g. '8.0', "
                "'9.0a' or '12.0+PTX'"
            )
        arch = f"{m['major']}{m['minor']}{m['suffix'].lower()}"
        out.add(f"sm_{arch}")
        if m["ptx"]:
            out.add(f"compute_{arch}")
    return frozenset(out)


def _literal_assignments(source: str) -> dict[str, object]:
    values: dict[str, object] = {}
    for node in ast.parse(source).body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and value is not None:
            try:
                values[target.id] = ast.literal_eval(value)
            except ValueError:
                continue
    return values


def _c10_cxx11(libc10: Path) -> bool:
    exported = inspect_elf(libc10).exported
    ctors = [s for s in exported if s.startswith("_ZN3c105ErrorC")]
    if ctors:
        return any("__cxx11" in s for s in ctors)
    return any("__cxx11" in s for s in exported)


def load_torch_target(site_packages: Path, *, runner: Runner | None = None) -> TorchTarget:
    """Describe the torch installed in `site_packages` without importing it.

    Reads torch/version.py (`__version__`, `cuda`, `hip`) and takes the C++ ABI from
    libc10.so's c10::Error constructor. With a `runner`, a torch whose version.py cannot
    be read is asked directly (`python -c 'import torch'` in that environment).
    """
    site_packages = site_packages.resolve()
    version_py = site_packages / "torch" / "version.py"
    values: dict[str, object] = {}
    if version_py.is_file():
        values = _literal_assignments(version_py.read_text(errors="replace"))
    if not isinstance(values.get("__version__"), str) and runner is not None:
        values = _ask_torch(site_packages, runner)
    version = values.get("__version__")
    if not isinstance(version, str):
        raise ToolchainError(
            f"{site_packages}: no readable torch/version.py; install the target torch there "
            "(pip install torch==X.Y.Z --target or into the job's venv)"
        )
    libc10 = site_packages / "torch" / "lib" / "libc10.so"
    if not libc10.is_file():
        raise ToolchainError(f"{libc10}: missing; the torch installation is incomplete")
    cuda = values.get("cuda")
    hip = values.get("hip")
    return TorchTarget(
        version=version,
        site_packages=site_packages,
        cuda_version=cuda if isinstance(cuda, str) else None,
        hip_version=hip if isinstance(hip, str) else None,
        cxx11_abi=_c10_cxx11(libc10),
    )


def _ask_torch(site_packages: Path, runner: Runner) -> dict[str, object]:
    # <env>/lib/pythonX.Y/site-packages → <env>/bin/python
    python = site_packages.parents[2] / "bin" / "python"
    code = (
        "import json, torch; print(json.dumps({'__version__': torch.__version__, "
        "'cuda': torch.version.cuda, 'hip': torch.version.hip}))"
    )
    result = runner.run([str(python), "-c", code], capture=True)
    for line in reversed(result.output.splitlines()):
        if line.startswith("{"):
            data = json.loads(line)
            if isinstance(data, dict):
                return data
    return {}


# --- target facts (cached per installation) ---------------------------------------------


@functools.lru_cache(maxsize=16)
def _exports_cached(key: tuple[tuple[str, int, int], ...]) -> frozenset[str]:
    out: set[str] = set()
    for path, _mtime, _size in key:
        out |= inspect_elf(Path(path)).exported
    return frozenset(out)


@dataclass(frozen=True, kw_only=True)
class _TargetFacts:
    target: TorchTarget
    sonames: frozenset[str]
    exports: frozenset[str]


def _facts(target: TorchTarget) -> _TargetFacts:
    libs = scan_torch_libs(target.site_packages)
    key = tuple((str(f), (st := f.stat()).st_mtime_ns, st.st_size) for f in libs.files)
    return _TargetFacts(
        target=target, sonames=frozenset(libs.sonames), exports=_exports_cached(key)
    )


@dataclass(frozen=True, kw_only=True)
class _Policy:
    name: str
    symbol_versions: Mapping[str, frozenset[str]]


@functools.lru_cache(maxsize=1)
def _policy_json() -> tuple[dict[str, object], ...]:
    out: list[dict[str, object]] = []
    base = importlib.resources.files("auditwheel") / "policy"
    for name in ("manylinux-policy.json", "musllinux-policy.json"):
        entry = base / name
        if entry.is_file():
            out += json.loads(entry.read_text())
    return tuple(out)


def _policy(tag: str) -> _Policy | None:
    """auditwheel's policy for one platform tag (None for 'linux_*' or unknown tags)."""
    try:
        parsed = PlatformTag.parse(tag)
    except ValueError:
        return None
    if parsed.family == "linux" or parsed.libc is None:
        return None
    name = f"{parsed.family}_{parsed.libc[0]}_{parsed.libc[1]}"
    for policy in _policy_json():
        if policy.get("name") == name:
            versions = policy.get("symbol_versions")
            by_arch = versions.get(parsed.arch, {}) if isinstance(versions, dict) else {}
            return _Policy(
                name=name,
                symbol_versions={k: frozenset(v) for k, v in dict(by_arch).items()},
            )
    return None


@functools.lru_cache(maxsize=1)
def _system_version_prefixes() -> frozenset[str]:
    """Version-node prefixes of the system libraries auditwheel allows (GLIBC, GLIBCXX…)."""
    out: set[str] = set()
    for policy in _policy_json():
        versions = policy.get("symbol_versions")
        if isinstance(versions, dict):
            for by_arch in versions.values():
                out |= set(dict(by_arch))
    return frozenset(out or {"GLIBC", "GLIBCXX", "CXXABI", "GCC", "LIBATOMIC", "ZLIB"})


# --- the wheel ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _WheelElf:
    arcname: str
    info: ElfInfo
    grafted: bool  # in a top-level *.libs/ dir, or renamed with auditwheel's hash

    @property
    def basename(self) -> str:
        return PurePosixPath(self.arcname).name


def _is_so_name(name: str) -> bool:
    base = PurePosixPath(name).name
    return base.endswith(".so") or ".so." in base


def _extract_elves(wheel: Path, into: Path) -> list[_WheelElf]:
    out: list[_WheelElf] = []
    with zipfile.ZipFile(wheel) as zf:
        for member in sorted(zf.infolist(), key=lambda i: i.filename):
            if member.is_dir() or not _is_so_name(member.filename):
                continue
            with zf.open(member) as fh:
                if fh.read(4) != ELF_MAGIC:
                    continue
            dest = into / member.filename
            dest.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(member) as fh, dest.open("wb") as out_fh:
                shutil.copyfileobj(fh, out_fh, 1 << 20)
            out.append(
                _WheelElf(
                    arcname=member.filename,
                    info=inspect_elf(dest),
                    grafted=is_grafted(member.filename),
                )
            )
    return out


def is_grafted(arcname: str) -> bool:
    """True for a library auditwheel grafted: in a top-level `*.libs/`, or hash-renamed."""
    parts = PurePosixPath(arcname).parts
    base = parts[-1]
    return (len(parts) > 1 and parts[0].endswith(".libs")) or strip_graft_hash(base) != base


def check_binaries(
    binaries: Sequence[tuple[str, ElfInfo]], *, targets: Sequence[TorchTarget]
) -> list[Finding]:
    """bundled-torch-lib, undefined-symbol and abi-mismatch findings for a set of ELF files.

    `binaries` are (path relative to the install root, ELF facts): the shared objects of
    one wheel or of one installed distribution (what `doctor` checks). Platform-tag
    promises are not judged here.
    """
    elves = [_WheelElf(arcname=a, info=i, grafted=is_grafted(a)) for a, i in binaries]
    facts = [_facts(t) for t in targets]
    findings = _check_bundled(elves, facts)
    findings += _check_symbols(elves, facts, None, "")
    findings += _check_abi(elves, targets)
    return findings


def _finding(
    code: str,
    message: str,
    *,
    path: str | None,
    severity: Severity = Severity.ERROR,
    details: Iterable[str] = (),
) -> Finding:
    return Finding(code=code, severity=severity, message=message, path=path, details=tuple(details))


def _consequence(lib: str) -> str:
    if lib.startswith(("libc10", "libtorch", "libshm")):
        return (
            'a second libtorch in one process aborts at import ("Tried to register multiple '
            'backend fallbacks for the same dispatch key")'
        )
    if lib.startswith(("libcu", "libnv", "libnccl", "libamdhip", "libhip", "libroc", "libMIOpen")):
        return (
            "a second CUDA/ROCm runtime in one process does not share handles or streams with "
            "torch's (cudaErrorInvalidResourceHandle)"
        )
    return "two copies of one runtime end up in one process, and the wheel grows for nothing"


def _check_bundled(elves: Sequence[_WheelElf], facts: Sequence[_TargetFacts]) -> list[Finding]:
    findings: list[Finding] = []
    for elf in elves:
        names = {strip_graft_hash(elf.basename)}
        if elf.info.soname:
            names.add(strip_graft_hash(elf.info.soname))
        owners = [f.target.label for f in facts if names & f.sonames]
        pattern = next(
            (p for p in TORCH_RUNTIME_PATTERNS for n in names if fnmatch.fnmatchcase(n, p)),
            None,
        )
        if not owners and not (elf.grafted and pattern):
            continue
        lib = sorted(names)[0]
        provider = ", ".join(owners) if owners else "the target torch's runtime"
        findings.append(
            _finding(
                "bundled-torch-lib",
                f"The wheel bundles {lib} (as {elf.arcname}), which {provider} already "
                f"provides: {_consequence(lib)}. Repair with the torch libraries excluded "
                f"(buildtools derives the excludes from the target torch), or add --exclude "
                f"'{lib}'.",
                path=elf.arcname,
                details=(f"library: {lib}", f"provided by: {provider}"),
            )
        )
    return findings


def _version_prefix(version: str) -> tuple[str, str]:
    prefix, _, rest = version.partition("_")
    return prefix, rest


def _check_symbols(
    elves: Sequence[_WheelElf],
    facts: Sequence[_TargetFacts],
    wheel_tag_policy: _Policy | None,
    wheel_tag: str,
) -> list[Finding]:
    findings: list[Finding] = []
    in_wheel: set[str] = set()
    for elf in elves:
        in_wheel |= elf.info.exported
    system = _system_version_prefixes()
    for elf in elves:
        if elf.grafted:
            continue
        missing: dict[str, list[str]] = {}
        too_new: dict[str, set[str]] = {}
        for sym in elf.info.undefined:
            if sym.version is not None:
                prefix, ver = _version_prefix(sym.version)
                if prefix in system:
                    if (
                        wheel_tag_policy is not None
                        and ver not in wheel_tag_policy.symbol_versions.get(prefix, frozenset())
                    ):
                        too_new.setdefault(sym.version, set()).add(sym.name)
                    continue
            if sym.name.startswith(_LIBPYTHON_PREFIXES) or sym.name in in_wheel:
                continue
            lacking = [f.target.label for f in facts if sym.name not in f.exports]
            if lacking:
                missing[sym.name] = lacking
        for i, (name, lacking) in enumerate(
            sorted(missing.items(), key=lambda kv: demangle(kv[0]))
        ):
            if i == _MAX_SYMBOLS_PER_FILE:
                rest = len(missing) - _MAX_SYMBOLS_PER_FILE
                findings.append(
                    _finding(
                        "undefined-symbol",
                        f"{elf.arcname} has {rest} more undefined symbols not listed here; "
                        "it was most likely built against another torch version.",
                        path=elf.arcname,
                    )
                )
                break
            pretty = demangle(name)
            lacking_txt = ", ".join(lacking)
            findings.append(
                _finding(
                    "undefined-symbol",
                    f"{elf.arcname} needs {pretty}, which {lacking_txt} does not export: importing "
                    "it there fails with 'undefined symbol'. Build against the torch this wheel "
                    "targets, or avoid this API (it is not in that torch version).",
                    path=elf.arcname,
                    details=(f"mangled: {name}", f"missing from: {lacking_txt}"),
                )
            )
        if too_new and wheel_tag_policy is not None:
            versions = sorted(too_new)
            findings.append(
                _finding(
                    "platform-tag",
                    f"{elf.arcname} needs {', '.join(versions)}, newer than {wheel_tag} allows: "
                    "it installs on systems where it cannot load. Build in the "
                    f"{wheel_tag} image, or repair/retag to the tag auditwheel reports.",
                    path=elf.arcname,
                    details=tuple(
                        f"{v}: {', '.join(sorted(demangle(s) for s in too_new[v])[:5])}"
                        for v in versions
                    ),
                )
            )
    return findings


def _check_device_code(
    elves: Sequence[_WheelElf], expect: Expectation, wheel_name: str
) -> list[Finding]:
    try:
        acc = Accelerator.parse(expect.accelerator)
    except ValueError as exc:
        return [_finding("no-device-code", f"Expectation: {exc}", path=wheel_name)]
    own = [e for e in elves if not e.grafted]
    if acc.kind == "cpu":
        findings: list[Finding] = []
        for elf in own:
            linked = sorted(
                n
                for n in elf.info.needed
                if any(fnmatch.fnmatchcase(n, p) for p in DEVICE_LIB_PATTERNS)
            )
            if linked or elf.info.has_device_code:
                what = ", ".join(linked) if linked else "GPU device code"
                findings.append(
                    _finding(
                        "cpu-links-cuda",
                        f"{elf.arcname} of a CPU cell needs {what}: it cannot load with a CPU "
                        "torch. Build the CPU cell against the CPU torch wheel "
                        "(--index-url https://download.pytorch.org/whl/cpu) without FORCE_CUDA.",
                        path=elf.arcname,
                        details=tuple(linked),
                    )
                )
        return findings
    kind: Literal["cuda", "rocm"] = "cuda" if acc.kind == "cuda" else "rocm"
    codes = [e.info.cuda if kind == "cuda" else e.info.hip for e in own]
    present = [c for c in codes if c is not None]
    label = "CUDA" if kind == "cuda" else "ROCm/HIP"
    if not present:
        env = (
            "FORCE_CUDA=1 and TORCH_CUDA_ARCH_LIST"
            if kind == "cuda"
            else "FORCE_CUDA=1 and PYTORCH_ROCM_ARCH"
        )
        return [
            _finding(
                "no-device-code",
                f"No .so in this {expect.accelerator} wheel contains {label} device code: it "
                "was built CPU-only (setup.py probably gated the CUDAExtension on "
                "torch.cuda.is_available(), which is False on a build node without a GPU). "
                f"Decide on torch.version.{'cuda' if kind == 'cuda' else 'hip'} instead and set "
                f"{env}.",
                path=wheel_name,
                details=tuple(e.arcname for e in own),
            )
        ]
    found: set[str] = set()
    for code in present:
        found |= code.archs
    if not expect.arch_list:
        return []
    try:
        wanted = expected_archs(expect.arch_list, kind)
    except ValueError as exc:
        return [_finding("no-device-code", f"Expectation: {exc}", path=wheel_name)]
    missing = sorted(wanted - found)
    if not missing:
        return []
    complete = all(c.complete for c in present)
    var = "TORCH_CUDA_ARCH_LIST" if kind == "cuda" else "PYTORCH_ROCM_ARCH"
    message = (
        f"The wheel's {label} device code lacks {', '.join(missing)} promised by "
        f"{var}={expect.arch_list!r} (found: {', '.join(sorted(found)) or 'none'}): GPUs of "
        f"those archs fail with 'no kernel image is available'. Set {var} in the build "
        "environment (buildtools sets it from data for the cell)."
    )
    return [
        _finding(
            "no-device-code",
            message
            if complete
            else message + " Some device code could not be read "
            "(compressed), so this may be a false alarm.",
            path=wheel_name,
            severity=Severity.ERROR if complete else Severity.WARNING,
            details=(f"missing: {' '.join(missing)}", f"found: {' '.join(sorted(found))}"),
        )
    ]


def _check_abi(elves: Sequence[_WheelElf], targets: Sequence[TorchTarget]) -> list[Finding]:
    findings: list[Finding] = []
    for elf in elves:
        abi = elf.info.cxx_abi
        if elf.grafted or abi is None:
            continue
        for target in targets:
            want = "cxx11" if target.cxx11_abi else "pre-cxx11"
            if abi == want:
                continue
            flag = 1 if target.cxx11_abi else 0
            if abi == "mixed":
                findings.append(
                    _finding(
                        "abi-mismatch",
                        f"{elf.arcname} mixes cxx11 and pre-cxx11 std::string symbols; "
                        f"{target.label} uses the {want} ABI. Build every source with "
                        f"-D_GLIBCXX_USE_CXX11_ABI={flag}.",
                        path=elf.arcname,
                        severity=Severity.WARNING,
                    )
                )
                continue
            findings.append(
                _finding(
                    "abi-mismatch",
                    f"{elf.arcname} uses the {abi} std::string ABI but {target.label} is built "
                    f"with the {want} ABI: every call passing a std::string fails with "
                    f"'undefined symbol'. Build with -D_GLIBCXX_USE_CXX11_ABI={flag} (what "
                    "torch.utils.cpp_extension does when building against that torch).",
                    path=elf.arcname,
                )
            )
    return findings


def _check_metadata(wheel: Path, expect: Expectation) -> list[Finding]:
    findings: list[Finding] = []
    name = wheel.name
    meta = read_metadata(wheel)
    pins = torch_requirements(wheel)
    if not pins:
        want = f" ({expect.requires_dist_torch})" if expect.requires_dist_torch else ""
        findings.append(
            _finding(
                "metadata-pin",
                f"{name} has no Requires-Dist on torch{want}: pip may pair it with any torch, "
                "and a mismatched torch fails at import. Relabel it with buildtools' relabel step or add "
                "the pin to the project's dependencies.",
                path=name,
            )
        )
    elif expect.requires_dist_torch:
        try:
            want_req = Requirement(expect.requires_dist_torch)
        except InvalidRequirement as exc:
            return [_finding("metadata-pin", f"Expectation: {exc}", path=name)]
        if not any(_same_requirement(p, want_req) for p in pins):
            findings.append(
                _finding(
                    "metadata-pin",
                    f"{name} requires {' and '.join(pins)}, not {expect.requires_dist_torch} "
                    "as the job promised: pip may pair it with a torch it was not built for. "
                    "Relabel it with the job's torch requirement.",
                    path=name,
                    details=tuple(pins),
                )
            )
    wname = WheelName.parse(name)
    meta_versions = meta.get("version", [])
    try:
        file_version = Version(wname.version.replace("_", "-"))
    except InvalidVersion:
        file_version = None
    if meta_versions and file_version is not None and Version(meta_versions[0]) != file_version:
        findings.append(
            _finding(
                "local-version",
                f"{name}: the file name says version {file_version} but METADATA says "
                f"{meta_versions[0]}; installers reject such a wheel. Rebuild or relabel it.",
                path=name,
            )
        )
    if expect.local_version:
        want_local = Version(f"0+{expect.local_version}").local
        have_local = file_version.local if file_version else None
        if have_local != want_local:
            findings.append(
                _finding(
                    "local-version",
                    f"{name} has version {file_version}, without the local label "
                    f"+{want_local} the job promised: users cannot tell which torch/accelerator "
                    "it is for, and find-links pages cannot tell it from the other cells. "
                    "Relabel it with buildtools' relabel step.",
                    path=name,
                )
            )
    return findings


def _same_requirement(value: str, want: Requirement) -> bool:
    try:
        have = Requirement(value)
    except InvalidRequirement:
        return False
    return (
        have.specifier == want.specifier
        and have.extras == want.extras
        and str(have.marker or "") == str(want.marker or "")
    )


def _strictest(tag_set: str) -> str:
    """Of a dotted tag set, the tag with the lowest libc floor (what the set claims)."""
    tags = tag_set.split(".")

    def key(tag: str) -> tuple[int, int]:
        try:
            libc = PlatformTag.parse(tag).libc
        except ValueError:
            return (999, 999)
        return libc if libc is not None else (999, 999)

    return min(tags, key=key)


def _check_platform(wheel: Path, expect: Expectation) -> list[Finding]:
    if not expect.platform_tag:
        return []
    tag = WheelName.parse(wheel.name).platform
    if platform_tag_satisfies(tag, expect.platform_tag):
        return []
    severity = Severity.ERROR if expect.weaker_platform_tag == "error" else Severity.WARNING
    return [
        _finding(
            "platform-tag",
            f"{wheel.name} is tagged {tag}, weaker than the promised {expect.platform_tag}: "
            "users on older glibc cannot install it. Build it in a "
            f"{expect.platform_tag} builder image "
            "(`buildtools build --backend docker`); the build host's glibc decides the best tag.",
            path=wheel.name,
            severity=severity,
            details=(f"tagged: {tag}", f"promised: {expect.platform_tag}"),
        )
    ]


def _check_build_record(wheel: Path, expect: Expectation) -> list[Finding]:
    if not expect.build_record:
        return []
    name = wheel.name
    try:
        record = read_build_record(wheel)
    except ValueError as exc:
        return [
            _finding(
                "build-record",
                f"{name}: the build record is unreadable ({exc}); relabel the wheel to rewrite it.",
                path=name,
            )
        ]
    if record is None:
        return [
            _finding(
                "build-record",
                f"{name} has no build record (<dist-info>/buildtools.json): doctor and the "
                "index cannot tell what it was built for. Relabel it with buildtools' relabel step.",
                path=name,
            )
        ]
    problems = validate_build_record(record)
    acc = record.get("accelerator")
    if isinstance(acc, str) and acc != expect.accelerator:
        problems.append(f"accelerator: {acc!r}, but the cell is {expect.accelerator!r}")
    if not problems:
        return []
    return [
        _finding(
            "build-record",
            f"{name}: the build record is invalid ({'; '.join(problems)}); rebuild or relabel "
            "the wheel.",
            path=name,
            details=tuple(problems),
        )
    ]


def check_wheel(
    wheel: Path, *, targets: Sequence[TorchTarget], expect: Expectation
) -> list[Finding]:
    """Every finding about `wheel` against each target torch and the job's promises."""
    facts = [_facts(t) for t in targets]
    findings: list[Finding] = []
    tag = WheelName.parse(wheel.name).platform
    strictest = _strictest(tag)
    with tempfile.TemporaryDirectory(prefix="buildtools-check-") as tmp:
        elves = _extract_elves(wheel, Path(tmp))
        findings += _check_bundled(elves, facts)
        findings += _check_symbols(elves, facts, _policy(strictest), strictest)
        findings += _check_device_code(elves, expect, wheel.name)
        findings += _check_abi(elves, targets)
    findings += _check_metadata(wheel, expect)
    findings += _check_platform(wheel, expect)
    findings += _check_build_record(wheel, expect)
    return findings


def has_errors(findings: Iterable[Finding]) -> bool:
    """True when any finding is an error."""
    return any(f.severity is Severity.ERROR for f in findings)
