"""bundled-torch-lib: a library torch or its GPU runtime provides, grafted into the wheel.

A library counts when the target torch installation ships it (its SONAME), or when it is a
grafted copy (in `*.libs/` or hash-renamed) of a library `data/never_bundle.yaml` lists: the
same facts the repair step turns into auditwheel excludes, so whatever repair keeps out, this
check flags when it got in anyway. A package's own libtorchfoo.so is not a graft.
"""

from __future__ import annotations

__all__ = ["BUNDLED_TORCH_LIB", "CHECK"]

from ...knowledge import NeverBundle
from ...model import Finding
from ..elf import strip_graft_hash
from .spec import BinaryCheck, Code, Subject, finding

BUNDLED_TORCH_LIB = Code(
    name="bundled-torch-lib",
    summary="a torch/c10/CUDA/ROCm runtime library grafted into the wheel",
)


def _consequence(rule: NeverBundle | None) -> str:
    if rule is not None and rule.torch_own:
        return (
            'a second libtorch in one process aborts at import ("Tried to register multiple '
            'backend fallbacks for the same dispatch key")'
        )
    if rule is not None:
        return (
            "a second CUDA/ROCm runtime in one process does not share handles or streams with "
            "torch's (cudaErrorInvalidResourceHandle)"
        )
    return "two copies of one runtime end up in one process, and the wheel grows for nothing"


def _check(subject: Subject) -> list[Finding]:
    findings: list[Finding] = []
    for elf in subject.elves:
        names = {strip_graft_hash(elf.basename)}
        if elf.info.soname:
            names.add(strip_graft_hash(elf.info.soname))
        owners = [f.target.label for f in subject.targets if names & f.sonames]
        rules = [r for n in sorted(names) if (r := subject.knowledge.never_bundle_rule(n))]
        if not owners and not (elf.grafted and rules):
            continue
        lib = sorted(names)[0]
        provider = ", ".join(owners) if owners else "the target torch's runtime"
        consequence = _consequence(subject.knowledge.never_bundle_rule(lib))
        findings.append(
            finding(
                BUNDLED_TORCH_LIB,
                f"The wheel bundles {lib} (as {elf.arcname}), which {provider} already "
                f"provides: {consequence}. Repair with the torch libraries excluded "
                f"(buildtools derives the excludes from the target torch), or add --exclude "
                f"'{lib}'.",
                path=elf.arcname,
                details=(f"library: {lib}", f"provided by: {provider}"),
            )
        )
    return findings


CHECK = BinaryCheck(name="bundled", codes=(BUNDLED_TORCH_LIB,), run=_check)
