"""abi-mismatch: std::string symbols in the other C++ ABI than the target torch's.

A wheel built with -D_GLIBCXX_USE_CXX11_ABI=0 against a cxx11 torch (or the reverse) fails
at the first call that passes a std::string; the symbols say which ABI each side uses.
"""

from __future__ import annotations

__all__ = ["ABI_MISMATCH", "CHECK"]

from ...model import Finding, Severity
from .spec import BinaryCheck, Code, Subject, finding

ABI_MISMATCH = Code(
    name="abi-mismatch",
    summary="std::string symbols in the other C++ ABI than the target torch's",
)


def _check(subject: Subject) -> list[Finding]:
    findings: list[Finding] = []
    for elf in subject.elves:
        abi = elf.info.cxx_abi
        if elf.grafted or abi is None:
            continue
        for target in (f.target for f in subject.targets):
            want = "cxx11" if target.cxx11_abi else "pre-cxx11"
            if abi == want:
                continue
            flag = 1 if target.cxx11_abi else 0
            if abi == "mixed":
                findings.append(
                    finding(
                        ABI_MISMATCH,
                        f"{elf.arcname} mixes cxx11 and pre-cxx11 std::string symbols; "
                        f"{target.label} uses the {want} ABI. Build every source with "
                        f"-D_GLIBCXX_USE_CXX11_ABI={flag}.",
                        path=elf.arcname,
                        severity=Severity.WARNING,
                    )
                )
                continue
            findings.append(
                finding(
                    ABI_MISMATCH,
                    f"{elf.arcname} uses the {abi} std::string ABI but {target.label} is built "
                    f"with the {want} ABI: every call passing a std::string fails with "
                    f"'undefined symbol'. Build with -D_GLIBCXX_USE_CXX11_ABI={flag} (what "
                    "torch.utils.cpp_extension does when building against that torch).",
                    path=elf.arcname,
                )
            )
    return findings


CHECK = BinaryCheck(name="abi", codes=(ABI_MISMATCH,), run=_check)
