"""`buildtools doctor`: why an extension fails to import beside this torch, and what to run.

The inspected environment is described by its own interpreter (`buildtools.probe.hostenv`,
through the ProcessRunner); everything after that is static and reads files only:

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

This module runs the steps and judges each package (3, 4). torch itself (1) is read in
`torch_state`; an extension's binaries and the libraries they need (2, 3) in `libraries`;
device code in `devices`; what it was built for and the wheel that matches in `matching`;
`report` holds the result and renders it.
"""

from __future__ import annotations

__all__ = ["diagnose"]

import contextlib
from collections.abc import Sequence

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..model import Finding, Severity
from ..probe.hostenv import DistInfo, EnvSnapshot
from ..torchinstall import TorchInstall
from ..wheel.checks import check_binaries, is_grafted
from ..wheel.elf import ElfInfo
from .devices import check_devices
from .doctor_report import DoctorReport, PackageReport, Verdict
from .libraries import binaries_of, check_needed, links_torch
from .matching import (
    BuiltFor,
    Fix,
    IndexSettings,
    ProjectRef,
    built_for,
    fix_for,
    parse_local_label,
)
from .torch_state import TorchState, torch_cxx11_abi, torch_distributions, torch_state


def diagnose(
    snapshot: EnvSnapshot,
    *,
    index: IndexSettings | None = None,
    project: ProjectRef | None = None,
    pip: str = "pip",
) -> DoctorReport:
    """Everything `doctor` says about one environment (reads files; starts no process)."""
    index = index or IndexSettings()
    torch = torch_state(snapshot)
    skip = torch_distributions(snapshot)
    packages: list[PackageReport] = []
    for dist in sorted(snapshot.dists, key=lambda d: d.key):
        if dist.key in skip:
            continue
        binaries = binaries_of(dist)
        if not links_torch(binaries) and dist.build_record is None:
            continue
        packages.append(
            _diagnose_package(
                dist,
                binaries,
                snapshot=snapshot,
                state=torch,
                index=index,
                project=project,
                pip=pip,
            )
        )
    return DoctorReport(
        snapshot=snapshot,
        torch_cxx11_abi=torch_cxx11_abi(snapshot, torch.target),
        torch_findings=torch.findings,
        packages=tuple(packages),
        notes=torch.notes,
    )


def _minor(version: Version) -> tuple[int, int]:
    return version.major, version.minor


def _is_exact_build(version: Version) -> bool:
    """A torch that is not a release: only that very build matches it."""
    local = version.local or ""
    return version.is_prerelease or bool(local and not parse_local_label(local)[1])


def _check_built_for(bf: BuiltFor, torch: TorchInstall) -> list[Finding]:
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
            consequence: tuple[Severity, str] | None = None
            if not ok:
                consequence = (
                    Severity.ERROR,
                    ": torch's C++ ABI changes between releases, so symbols go missing "
                    "and, where they resolve, struct layouts and inline code may differ.",
                )
            elif (_is_exact_build(built) or _is_exact_build(installed)) and (
                built.public != installed.public or built.local != installed.local
            ):
                # same minor, but one side is a source/nightly/vendor build: nothing
                # promises that two such builds share an ABI, nothing says they differ
                consequence = (
                    Severity.WARNING,
                    ", a different build of that minor release: every symbol may resolve "
                    "and it may still crash. Build it against this torch to be sure.",
                )
            if consequence is not None:
                severity, why = consequence
                findings.append(
                    Finding(
                        code="torch-mismatch",
                        severity=severity,
                        message=f"built for torch {bf.torch}, but {installed_label} is "
                        f"installed{why}",
                        details=details,
                    )
                )
    if bf.accelerator is not None and bf.accelerator != torch.accelerator:
        cpu_build = bf.accelerator == "cpu"
        findings.append(
            Finding(
                code="accelerator-mismatch",
                message=f"built for {bf.accelerator}, but {installed_label} is a "
                f"{torch.accelerator} build: "
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
    state: TorchState,
    index: IndexSettings,
    project: ProjectRef | None,
    pip: str,
) -> PackageReport:
    target, torch_sonames = state.target, state.sonames
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
            Finding(
                code="no-torch",
                severity=Severity.ERROR,
                message=f"{dist.name} links libtorch/libc10, but this environment has no usable "
                "torch installation: importing it fails with 'libc10.so: cannot open shared "
                "object file'.",
            )
        )
    else:
        label = f"torch {torch.version}"
        findings += check_binaries(binaries, targets=[target])
        own = [(rel, info) for rel, info in binaries if not is_grafted(rel)]
        findings += check_needed(own, torch_sonames, label)
        findings += check_devices(own, torch.gpus)
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
