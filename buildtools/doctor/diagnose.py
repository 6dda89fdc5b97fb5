"""`buildtools doctor`: why an extension fails to import beside this torch, and what to run.

The inspected environment is described by its own interpreter (`buildtools.probe.hostenv`,
through the Runner); everything after that is static and reads files only:

1. torch: version, CUDA/HIP, C++ ABI, how it was built (release/nightly wheel, source or
   vendor build), git revision, whether `import torch` works, the GPUs it sees;
2. every installed distribution that carries a torch extension: ours through the build
   record in its dist-info, any other because one of its shared objects (from RECORD,
   or the source tree of an editable install) NEEDs libtorch*/libc10*;
3. per package: what it was built for (build record, an exact `Requires-Dist: torch==`,
   the local version label, or unknown), then the same checks `buildtools check` runs on
   wheels (`checks.check_binaries`: undefined symbols, grafted torch libraries, C++ ABI)
   against the installed torch, plus torch libraries it needs that this torch lacks,
   device code for the visible GPUs, and a built-for/installed mismatch;
4. a verdict (healthy / broken / unknown) with the fix as commands to run: the matching
   wheel from the project's find-links index, or a build from source against this torch.

The static checks cannot prove compatibility (struct layouts and inline code may still
differ), which is why a package whose symbols all resolve but whose target torch is
unknown is `unknown`, not `healthy`.
"""

from __future__ import annotations

__all__ = [
    "DOCTOR_SCHEMA",
    "BuiltFor",
    "DoctorReport",
    "Fix",
    "IndexSettings",
    "PackageReport",
    "ProjectRef",
    "built_for",
    "device_code_runs",
    "diagnose",
    "page_url",
    "parse_local_label",
]

import contextlib
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..errors import ExitCode, ToolchainError
from ..knowledge import load_knowledge
from ..model import Finding, Severity
from ..probe.hostenv import BUILD_WORDS, DistInfo, EnvSnapshot, GpuInfo, TorchInfo
from ..wheel.checks import (
    TorchTarget,
    check_binaries,
    is_grafted,
    load_torch_target,
)
from ..wheel.elf import DeviceCode, ElfInfo, inspect_elf, is_elf, strip_graft_hash
from ..wheel.repair import scan_torch_libs
from .matching import (
    BuiltFor,
    Fix,
    IndexSettings,
    ProjectRef,
    built_for,
    fix_for,
    page_url,
    parse_local_label,
)

DOCTOR_SCHEMA = "torch-buildtools/doctor/v1"
Verdict = Literal["healthy", "broken", "unknown"]

_SKIP_DIRS = {
    ".git",
    ".nox",
    ".tox",
    ".venv",
    "venv",
    "node_modules",
    "__pycache__",
    "wheelhouse",
    "dist",
    "build",
}
_MAX_SOURCE_FILES = 20000
_ARCH_RE = re.compile(r"^(?P<kind>sm|compute|lto)_(?P<digits>\d{2,3})(?P<suffix>[af]?)$")

# --- results -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PackageReport:
    """One installed distribution that carries a torch extension."""

    name: str
    version: str
    location: Path
    ours: bool
    built_for: BuiltFor
    shared_objects: tuple[str, ...]
    findings: tuple[Finding, ...]
    verdict: Verdict
    reason: str
    fix: Fix | None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "location": str(self.location),
            "ours": self.ours,
            "built_for": self.built_for.to_json(),
            "shared_objects": list(self.shared_objects),
            "verdict": self.verdict,
            "reason": self.reason,
            "findings": [_finding_json(f) for f in self.findings],
            "fix": self.fix.to_json() if self.fix else None,
        }


@dataclass(frozen=True, kw_only=True)
class DoctorReport:
    """What `buildtools doctor` found in one environment."""

    snapshot: EnvSnapshot
    torch_cxx11_abi: bool | None
    torch_findings: tuple[Finding, ...]
    packages: tuple[PackageReport, ...]
    notes: tuple[str, ...] = ()

    @property
    def broken(self) -> bool:
        return any(p.verdict == "broken" for p in self.packages) or any(
            f.severity is Severity.ERROR for f in self.torch_findings
        )

    @property
    def exit_code(self) -> int:
        return int(ExitCode.DOCTOR_BROKEN) if self.broken else int(ExitCode.OK)

    def counts(self) -> dict[str, int]:
        out = {"healthy": 0, "broken": 0, "unknown": 0}
        for p in self.packages:
            out[p.verdict] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        snap = self.snapshot
        torch = snap.torch
        return {
            "schema": DOCTOR_SCHEMA,
            "python": {
                "executable": str(snap.python),
                "version": snap.python_version,
                "implementation": snap.implementation,
                "prefix": str(snap.prefix) if snap.prefix else None,
                "platform": snap.platform,
            },
            "torch": None if torch is None else _torch_json(torch, self.torch_cxx11_abi),
            "torch_findings": [_finding_json(f) for f in self.torch_findings],
            "packages": [p.to_json() for p in self.packages],
            "summary": self.counts(),
            "broken": self.broken,
            "notes": list(self.notes),
        }

    def render(self, out: TextIO) -> None:
        """The report for a person, fixes included."""
        snap = self.snapshot
        out.write(f"Python {snap.python_version} at {snap.python}\n")
        torch = snap.torch
        if torch is None:
            out.write("torch: not installed in this environment\n")
        else:
            out.write(_torch_line(torch, self.torch_cxx11_abi) + "\n")
            if torch.imported:
                gpus = ", ".join(f"{g.index}: {g.name} ({g.arch})" for g in torch.gpus)
                out.write(f"  GPUs: {gpus or 'none visible to torch'}\n")
        for f in self.torch_findings:
            out.write(f"  {f.severity.value:<7} {f.code}: {f.message}\n")
        for note in self.notes:
            out.write(f"note: {note}\n")
        if not self.packages:
            out.write("\nno installed package carries a torch extension\n")
        for pkg in self.packages:
            out.write("\n")
            mark = {"healthy": "healthy", "broken": "BROKEN", "unknown": "unknown"}[pkg.verdict]
            out.write(f"{pkg.name} {pkg.version}: {mark}: {pkg.reason}\n")
            out.write(f"  built for: {pkg.built_for.describe()}\n")
            for f in pkg.findings:
                out.write(f"  {f.severity.value:<7} {f.code}: {f.message}\n")
            if pkg.fix is not None:
                out.write(f"  fix: {pkg.fix.summary}:\n")
                for command in pkg.fix.commands:
                    out.write(f"    {command}\n")
        counts = self.counts()
        out.write(
            f"\n{len(self.packages)} extension package(s): {counts['healthy']} healthy, "
            f"{counts['broken']} broken, {counts['unknown']} unknown"
            + ("; torch itself has a problem" if self._torch_broken else "")
            + "\n"
        )

    @property
    def _torch_broken(self) -> bool:
        return any(f.severity is Severity.ERROR for f in self.torch_findings)


def _finding_json(f: Finding) -> dict[str, Any]:
    return {
        "code": f.code,
        "severity": f.severity.value,
        "message": f.message,
        "path": f.path,
        "details": list(f.details),
    }


def _torch_json(torch: TorchInfo, cxx11_abi: bool | None) -> dict[str, Any]:
    return {
        "version": torch.version,
        "cuda": torch.cuda,
        "hip": torch.hip,
        "accelerator": torch.accelerator,
        "cxx11_abi": cxx11_abi,
        "build": torch.build,
        "git_version": torch.git_version,
        "location": str(torch.site),
        "imported": torch.imported,
        "import_error": torch.import_error,
        "gpus": [
            {"index": g.index, "name": g.name, "arch": g.arch, "capability": g.capability}
            for g in torch.gpus
        ],
        "arch_list": list(torch.arch_list),
    }


def _torch_line(torch: TorchInfo, cxx11_abi: bool | None) -> str:
    device = (
        f"CUDA {torch.cuda}" if torch.cuda else f"ROCm/HIP {torch.hip}" if torch.hip else "CPU only"
    )
    abi = {True: "cxx11", False: "pre-cxx11", None: "?"}[cxx11_abi]
    git = f", git {torch.git_version[:12]}" if torch.git_version else ""
    return (
        f"torch {torch.version}: {device}, C++ ABI {abi}, {BUILD_WORDS[torch.build]}{git} "
        f"(in {torch.site})"
    )


# --- device code ---------------------------------------------------------------------------


def _arch_tuple(digits: str) -> tuple[int, int]:
    return int(digits[:-1]), int(digits[-1])


def device_code_runs(code: DeviceCode, gpu: GpuInfo) -> Literal["native", "ptx", "no"]:
    """Whether device code runs on `gpu`: a matching cubin, only via PTX JIT, or not at all.

    A cubin sm_XY runs on the same major with minor >= Y; sm_XYa only on exactly X.Y;
    sm_XYf on its family (same major, minor >= Y). PTX compute_XY is JIT-compiled for any
    GPU of capability >= X.Y. HIP code objects match their gfx target exactly.
    """
    if code.kind == "hip":
        return "native" if gpu.gcn_arch and gpu.arch in code.archs else "no"
    if gpu.capability is None:
        return "no"
    have = gpu.capability
    result: Literal["native", "ptx", "no"] = "no"
    for arch in code.archs:
        m = _ARCH_RE.match(arch)
        if m is None or m["kind"] == "lto":
            continue
        want = _arch_tuple(m["digits"])
        suffix = m["suffix"]
        if suffix == "a":
            fits = want == have
        else:  # plain and family-specific: same major (cubin) or older (PTX)
            fits = want[0] == have[0] and want[1] <= have[1]
            if m["kind"] == "compute" and not suffix:
                fits = want <= have
        if not fits:
            continue
        if m["kind"] == "sm":
            return "native"
        result = "ptx"
    return result


# --- the diagnosis -------------------------------------------------------------------------


def _finding(
    code: str,
    message: str,
    *,
    path: str | None = None,
    severity: Severity = Severity.ERROR,
    details: Iterable[str] = (),
) -> Finding:
    return Finding(code=code, severity=severity, message=message, path=path, details=tuple(details))


def _source_shared_objects(root: Path) -> list[Path]:
    """The .so files of an editable install's source tree (skipping VCS, envs and dists)."""
    found: list[Path] = []
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS and not d.endswith(".egg-info")]
        for name in filenames:
            seen += 1
            if name.endswith(".so") or ".so." in name:
                found.append(Path(dirpath) / name)
        if seen > _MAX_SOURCE_FILES:
            break
    return sorted(found)


def _binaries(dist: DistInfo) -> list[tuple[str, ElfInfo]]:
    paths: list[tuple[Path, Path]] = [(p, dist.location) for p in dist.shared_objects]
    src = dist.source_dir
    if dist.editable and src is not None and src.is_dir():
        paths += [(p, src) for p in _source_shared_objects(src)]
    out: list[tuple[str, ElfInfo]] = []
    seen: set[Path] = set()
    for path, root in paths:
        if path in seen or not is_elf(path):
            continue
        seen.add(path)
        try:
            info = inspect_elf(path)
        except (ValueError, OSError):
            continue
        try:
            rel = path.relative_to(root).as_posix()
        except ValueError:
            rel = str(path)
        out.append((rel, info))
    return out


def _links_torch(binaries: Sequence[tuple[str, ElfInfo]]) -> bool:
    return any(
        (rule := load_knowledge().never_bundle_rule(strip_graft_hash(n))) is not None
        and rule.torch_own
        for _, info in binaries
        for n in info.needed
    )


def _check_needed(
    binaries: Sequence[tuple[str, ElfInfo]], torch_sonames: frozenset[str], torch_label: str
) -> list[Finding]:
    """Torch and CUDA/ROCm runtime libraries the package needs that this torch does not ship."""
    own = {Path(rel).name for rel, _ in binaries} | {
        info.soname for _, info in binaries if info.soname
    }
    findings: list[Finding] = []
    for rel, info in binaries:
        for needed in info.needed:
            if needed in own or strip_graft_hash(needed) in torch_sonames:
                continue
            # data/never_bundle.yaml says which libraries are torch's or its GPU runtime's
            rule = load_knowledge().never_bundle_rule(strip_graft_hash(needed))
            if rule is None:
                continue  # a system library: the loader's business, not torch's
            if rule.torch_own:
                findings.append(
                    _finding(
                        "missing-library",
                        f"{rel} needs {needed}, which {torch_label} does not ship: importing it "
                        f"fails with '{needed}: cannot open shared object file'. It was built "
                        "for a torch of another accelerator (a CUDA/ROCm build needs "
                        "libc10_cuda/libtorch_cuda or their HIP twins).",
                        path=rel,
                        details=(f"library: {needed}",),
                    )
                )
            else:
                findings.append(
                    _finding(
                        "missing-library",
                        f"{rel} needs {needed}, which neither {torch_label} nor the packages it "
                        "depends on provide: it loads only where the system has that library "
                        "on the loader's path (usually another CUDA/ROCm version than torch's).",
                        path=rel,
                        severity=Severity.WARNING,
                        details=(f"library: {needed}",),
                    )
                )
    return findings


def _check_devices(
    binaries: Sequence[tuple[str, ElfInfo]], gpus: Sequence[GpuInfo]
) -> list[Finding]:
    findings: list[Finding] = []
    for rel, info in binaries:
        for gpu in gpus:
            code = info.hip if gpu.gcn_arch else info.cuda
            if code is None:
                continue
            runs = device_code_runs(code, gpu)
            have = ", ".join(sorted(code.archs)) or "none"
            if runs == "native":
                continue
            if runs == "ptx":
                findings.append(
                    _finding(
                        "no-device-code",
                        f"{rel} has no binary code for GPU {gpu.index} ({gpu.name}, {gpu.arch}); "
                        "its PTX is JIT-compiled at first use (slow start, cached afterwards).",
                        path=rel,
                        severity=Severity.INFO,
                        details=(f"device code: {have}",),
                    )
                )
                continue
            severity = Severity.ERROR if code.complete else Severity.WARNING
            findings.append(
                _finding(
                    "no-device-code",
                    f"{rel} has no device code for GPU {gpu.index} ({gpu.name}, {gpu.arch}): its "
                    "kernels fail with 'no kernel image is available for execution on the "
                    f"device' (it carries: {have})."
                    + ("" if code.complete else " Part of it is compressed and unread."),
                    path=rel,
                    severity=severity,
                    details=(f"device code: {have}", f"gpu: {gpu.arch}"),
                )
            )
    return findings


def _minor(version: Version) -> tuple[int, int]:
    return version.major, version.minor


def _is_exact_build(version: Version) -> bool:
    """A torch that is not a release: only that very build matches it."""
    local = version.local or ""
    return version.is_prerelease or bool(local and not parse_local_label(local)[1])


def _check_built_for(bf: BuiltFor, torch: TorchInfo) -> list[Finding]:
    findings: list[Finding] = []
    installed_label = f"torch {torch.version}"
    if bf.torch is not None:
        built: Version | None = None
        installed: Version | None = None
        with contextlib.suppress(InvalidVersion):
            built, installed = Version(bf.torch), Version(torch.version)
        if built is not None and installed is not None:
            details = (f"built for: {bf.torch}", f"installed: {torch.version}")
            if bf.abi == "stable":
                ok = _minor(installed) >= _minor(built)
            else:
                ok = _minor(built) == _minor(installed)
            if not ok:
                findings.append(
                    _finding(
                        "torch-mismatch",
                        f"built for torch {bf.torch}, but {installed_label} is installed: "
                        "torch's C++ ABI changes between releases, so symbols go missing "
                        "and, where they resolve, struct layouts and inline code may differ.",
                        details=details,
                    )
                )
            elif (_is_exact_build(built) or _is_exact_build(installed)) and (
                built.public != installed.public or built.local != installed.local
            ):
                # same minor, but one side is a source/nightly/vendor build: nothing
                # promises that two such builds share an ABI, nothing says they differ
                findings.append(
                    _finding(
                        "torch-mismatch",
                        f"built for torch {bf.torch}, but {installed_label} is installed, a "
                        "different build of that minor release: every symbol may resolve "
                        "and it may still crash. Build it against this torch to be sure.",
                        severity=Severity.WARNING,
                        details=details,
                    )
                )
    if bf.accelerator is not None and bf.accelerator != torch.accelerator:
        cpu_build = bf.accelerator == "cpu"
        findings.append(
            _finding(
                "accelerator-mismatch",
                f"built for {bf.accelerator}, but {installed_label} is a {torch.accelerator} "
                "build: "
                + (
                    "its ops have no GPU kernels."
                    if cpu_build
                    else "its CUDA/ROCm code and libraries are not this torch's; the wheel "
                    "for this torch's accelerator is the one that matches."
                ),
                severity=Severity.WARNING if cpu_build else Severity.ERROR,
                details=(f"built for: {bf.accelerator}", f"installed: {torch.accelerator}"),
            )
        )
    return findings


def _headline(findings: Sequence[Finding]) -> str:
    errors = [f for f in findings if f.severity is Severity.ERROR]
    if not errors:
        return ""
    first = errors[0]
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    short = {
        "undefined-symbol": "undefined symbol",
        "bundled-torch-lib": "carries its own copy of a torch library",
        "missing-library": "needs a torch library this torch does not ship",
        "abi-mismatch": "C++ ABI differs from torch's",
        "no-device-code": "no device code for the visible GPU",
        "torch-mismatch": "built for another torch",
        "accelerator-mismatch": "built for another accelerator",
        "no-torch": "torch is not installed",
    }.get(first.code, first.code)
    detail = next((d for d in first.details if d.startswith(("library:", "gpu:"))), "")
    if first.code == "undefined-symbol":
        detail = first.message.split(" needs ", 1)[-1].split(", which", 1)[0]
    return f"{short}{': ' + detail if detail else ''}{more}"


def _diagnose_package(
    dist: DistInfo,
    binaries: Sequence[tuple[str, ElfInfo]],
    *,
    snapshot: EnvSnapshot,
    target: TorchTarget | None,
    torch_sonames: frozenset[str],
    index: IndexSettings,
    project: ProjectRef | None,
    pip: str,
) -> PackageReport:
    bf = built_for(dist)
    ours = dist.build_record is not None or (
        project is not None
        and project.name is not None
        and canonicalize_name(project.name) == dist.key
    )
    torch = snapshot.torch
    findings: list[Finding] = []
    if torch is None or target is None:
        findings.append(
            _finding(
                "no-torch",
                f"{dist.name} links libtorch/libc10, but this environment has no usable torch "
                "installation: importing it fails with 'libc10.so: cannot open shared object "
                "file'.",
            )
        )
    else:
        label = f"torch {torch.version}"
        findings += check_binaries(binaries, targets=[target])
        own = [(rel, info) for rel, info in binaries if not is_grafted(rel)]
        findings += _check_needed(own, torch_sonames, label)
        findings += _check_devices(own, torch.gpus)
        findings += _check_built_for(bf, torch)
    errors = [f for f in findings if f.severity is Severity.ERROR]
    warnings = [f for f in findings if f.severity is Severity.WARNING]
    verdict: Verdict
    if errors:
        verdict = "broken"
        reason = _headline(findings)
    elif bf.known and not any(f.code == "torch-mismatch" for f in warnings):
        verdict = "healthy"
        reason = f"built for {bf.describe()}; every symbol resolves against the installed torch"
        if warnings:
            reason += f" ({len(warnings)} warning(s))"
    elif bf.known:
        verdict = "unknown"
        reason = (
            f"every symbol resolves, but it was built for another build of torch "
            f"{bf.torch} than this one"
        )
    else:
        verdict = "unknown"
        reason = (
            "every symbol resolves, but nothing says which torch it was built for, and a clean "
            "symbol check does not prove ABI compatibility"
        )
    fix = None
    if verdict != "healthy" or warnings:
        fix = fix_for(dist, bf, ours=ours, snapshot=snapshot, pip=pip, index=index, project=project)
        if verdict != "broken":  # it may work: the fix is for certainty, not a repair
            prefix = "to be certain, " if verdict == "unknown" else "optional: "
            fix = Fix(summary=prefix + fix.summary, commands=fix.commands)
    return PackageReport(
        name=dist.name,
        version=dist.version,
        location=dist.location,
        ours=ours,
        built_for=bf,
        shared_objects=tuple(rel for rel, _ in binaries),
        findings=tuple(findings),
        verdict=verdict,
        reason=reason,
        fix=fix,
    )


def _torch_state(snapshot: EnvSnapshot) -> tuple[TorchTarget | None, list[Finding], list[str]]:
    torch = snapshot.torch
    findings: list[Finding] = []
    notes: list[str] = []
    if torch is None:
        return None, findings, notes
    target: TorchTarget | None = None
    try:
        target = load_torch_target(torch.site)
    except ToolchainError as exc:
        findings.append(
            _finding(
                "torch-install",
                f"the torch installation is incomplete: {exc}; reinstall torch",
                path=str(torch.site),
            )
        )
    if torch.imported is False:
        findings.append(
            _finding(
                "torch-import",
                f"`import torch` fails: {torch.import_error}. Fix torch first (a package that "
                "puts its own libtorch/libc10 on the loader's path is one cause; the packages "
                "below say whether they do).",
            )
        )
    elif torch.imported is None:
        notes.append("torch was not imported (--no-import): GPUs and the import itself unknown")
    return target, findings, notes


def _torch_dists(snapshot: EnvSnapshot) -> frozenset[str]:
    """torch and the distributions it pulls in (nvidia-*, cuda-toolkit…): not extensions."""
    torch = snapshot.torch
    if torch is None:
        return frozenset({"torch"})
    try:
        libs = scan_torch_libs(torch.site)
    except ToolchainError:
        return frozenset({"torch"})
    return frozenset(canonicalize_name(d) for d in libs.distributions) | {"torch"}


def diagnose(
    snapshot: EnvSnapshot,
    *,
    index: IndexSettings | None = None,
    project: ProjectRef | None = None,
    pip: str = "pip",
) -> DoctorReport:
    """Everything `doctor` says about one environment (reads files; starts no process)."""
    index = index or IndexSettings()
    target, torch_findings, notes = _torch_state(snapshot)
    skip = _torch_dists(snapshot)
    torch_sonames: frozenset[str] = frozenset()
    if target is not None:
        torch_sonames = frozenset(scan_torch_libs(target.site_packages).sonames)
    packages: list[PackageReport] = []
    for dist in sorted(snapshot.dists, key=lambda d: d.key):
        if dist.key in skip:
            continue
        binaries = _binaries(dist)
        if not _links_torch(binaries) and dist.build_record is None:
            continue
        packages.append(
            _diagnose_package(
                dist,
                binaries,
                snapshot=snapshot,
                target=target,
                torch_sonames=torch_sonames,
                index=index,
                project=project,
                pip=pip,
            )
        )
    return DoctorReport(
        snapshot=snapshot,
        torch_cxx11_abi=_cxx11(snapshot.torch, target),
        torch_findings=tuple(torch_findings),
        packages=tuple(packages),
        notes=tuple(notes),
    )


def _cxx11(torch: TorchInfo | None, target: TorchTarget | None) -> bool | None:
    if torch is not None and torch.cxx11_abi is not None:
        return torch.cxx11_abi
    return target.cxx11_abi if target is not None else None
