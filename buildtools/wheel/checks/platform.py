"""platform-tag: a tag weaker than the job promised, or symbol versions beyond the tag.

Both halves protect the same promise: a wheel tagged manylinux_2_28 must install only where
it loads. The symbol versions are judged against the strictest tag of the wheel's tag set,
by auditwheel's own policy data.
"""

from __future__ import annotations

__all__ = ["CHECK", "PLATFORM_TAG"]

from ...model import Finding, Severity
from ..elf import demangle
from ..meta import WheelName, platform_tag_satisfies
from .policy import policy_for, strictest, system_version_prefixes, version_prefix
from .spec import Code, WheelCheck, WheelSubject, finding

PLATFORM_TAG = Code(
    name="platform-tag",
    summary="a tag weaker than promised, or symbol versions beyond the tag",
)


def _symbol_versions(subject: WheelSubject) -> list[Finding]:
    wheel_tag = strictest(WheelName.parse(subject.wheel.name).platform)
    policy = policy_for(wheel_tag)
    if policy is None:
        return []  # 'linux_*' promises nothing about glibc
    system = system_version_prefixes()
    findings: list[Finding] = []
    for elf in subject.elves:
        if elf.grafted:
            continue
        too_new: dict[str, set[str]] = {}
        for sym in elf.info.undefined:
            if sym.version is None:
                continue
            prefix, ver = version_prefix(sym.version)
            if prefix in system and ver not in policy.symbol_versions.get(prefix, frozenset()):
                too_new.setdefault(sym.version, set()).add(sym.name)
        if not too_new:
            continue
        versions = sorted(too_new)
        findings.append(
            finding(
                PLATFORM_TAG,
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


def _promised_tag(subject: WheelSubject) -> list[Finding]:
    wheel, expect = subject.wheel, subject.expect
    if not expect.platform_tag:
        return []
    tag = WheelName.parse(wheel.name).platform
    if platform_tag_satisfies(tag, expect.platform_tag):
        return []
    severity = Severity.ERROR if expect.weaker_platform_tag == "error" else Severity.WARNING
    return [
        finding(
            PLATFORM_TAG,
            f"{wheel.name} is tagged {tag}, weaker than the promised {expect.platform_tag}: "
            "users on older glibc cannot install it. Build it in a "
            f"{expect.platform_tag} builder image "
            "(`buildtools build --backend docker`); the build host's glibc decides the best tag.",
            path=wheel.name,
            severity=severity,
            details=(f"tagged: {tag}", f"promised: {expect.platform_tag}"),
        )
    ]


def _check(subject: WheelSubject) -> list[Finding]:
    return _symbol_versions(subject) + _promised_tag(subject)


CHECK = WheelCheck(name="platform", codes=(PLATFORM_TAG,), run=_check)
