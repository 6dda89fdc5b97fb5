"""What `buildtools doctor` found: the records, their JSON (schema v1) and the text a person reads.

Kept apart from the diagnosis so the CLI can build a report (an environment whose probe
failed) and render it without knowing how a package is judged.
"""

from __future__ import annotations

__all__ = ["DOCTOR_SCHEMA", "DoctorReport", "PackageReport", "Verdict"]

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from ..errors import ExitCode
from ..model import Finding, Severity
from ..probe.hostenv import BUILD_WORDS, EnvSnapshot
from ..torchinstall import TorchInstall
from ..untrusted import printable
from .matching import BuiltFor, Fix

DOCTOR_SCHEMA = "torch-buildtools/doctor/v1"
Verdict = Literal["healthy", "broken", "unknown"]


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
        """The report for a person, fixes included. Package names, build records and the
        loader's messages are the packages' text: the whole made printable (no ESC, no
        bidi, no workflow command in a CI log)."""
        text = io.StringIO()
        self._render(text)
        out.write(printable(text.getvalue()))

    def _render(self, out: TextIO) -> None:
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


def _torch_json(torch: TorchInstall, cxx11_abi: bool | None) -> dict[str, Any]:
    return {
        "version": torch.version,
        "cuda": torch.cuda,
        "hip": torch.hip,
        "accelerator": torch.accelerator,
        "cxx11_abi": cxx11_abi,
        "build": torch.build,
        "git_version": torch.git_version,
        "location": str(torch.site_packages),
        "imported": torch.imported,
        "import_error": torch.import_error,
        "gpus": [
            {"index": g.index, "name": g.name, "arch": g.arch, "capability": g.capability}
            for g in torch.gpus
        ],
        "arch_list": list(torch.arch_list),
    }


def _torch_line(torch: TorchInstall, cxx11_abi: bool | None) -> str:
    device = (
        f"CUDA {torch.cuda}" if torch.cuda else f"ROCm/HIP {torch.hip}" if torch.hip else "CPU only"
    )
    abi = {True: "cxx11", False: "pre-cxx11", None: "?"}[cxx11_abi]
    git = f", git {torch.git_version[:12]}" if torch.git_version else ""
    return (
        f"torch {torch.version}: {device}, C++ ABI {abi}, {BUILD_WORDS[torch.build]}{git} "
        f"(in {torch.site_packages})"
    )
