"""metadata-pin and local-version: the labels that let pip pair the wheel with its torch.

`Requires-Dist: torch==X.Y.*` keeps pip from installing the wheel beside another torch; the
local version label (+pt211cu130) tells the cells apart on one find-links page.
"""

from __future__ import annotations

__all__ = ["CHECK", "LOCAL_VERSION", "METADATA_PIN"]

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from ...model import Finding
from ..meta import WheelName, read_metadata, torch_requirements
from .spec import Code, WheelCheck, WheelSubject, finding

METADATA_PIN = Code(
    name="metadata-pin",
    summary="Requires-Dist torch missing or not the expected spec",
)
LOCAL_VERSION = Code(
    name="local-version",
    summary="the version lacks the expected local label",
)


def _check(subject: WheelSubject) -> list[Finding]:
    wheel, expect = subject.wheel, subject.expect
    findings: list[Finding] = []
    name = wheel.name
    meta = read_metadata(wheel)
    pins = torch_requirements(wheel)
    if not pins:
        want = f" ({expect.requires_dist_torch})" if expect.requires_dist_torch else ""
        findings.append(
            finding(
                METADATA_PIN,
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
            return [finding(METADATA_PIN, f"Expectation: {exc}", path=name)]
        if not any(_same_requirement(p, want_req) for p in pins):
            findings.append(
                finding(
                    METADATA_PIN,
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
            finding(
                LOCAL_VERSION,
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
                finding(
                    LOCAL_VERSION,
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


CHECK = WheelCheck(name="metadata", codes=(METADATA_PIN, LOCAL_VERSION), run=_check)
