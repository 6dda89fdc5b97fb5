"""variant-properties: what a PEP 825 variant wheel claims is what it is.

An installer that knows variants picks a wheel by the properties of its label, before it
reads anything else: a label that claims `nvidia :: sm_90` on a wheel without sm_90 code
sends an H100 user a wheel that fails at its first kernel. So a variant wheel's
`variant.json` must be exactly the variant its build record gives (`variantprops`:
torch release, CUDA version, archs; the label its accelerator), its file name's label the
one of its `variant.json`, and every `sm_arch` it claims must be device code in each of
its own shared objects that carries CUDA code. A wheel with neither a label nor a
`variant.json` is not a variant wheel: nothing to check.
"""

from __future__ import annotations

__all__ = ["CHECK", "VARIANT_PROPERTIES", "variant_findings"]

import tempfile
from pathlib import Path

from ...model import BuildRecordError, Finding
from .. import variantprops
from ..archive import open_wheel
from ..meta import read_build_record
from .elves import WheelElf, extract_elves
from .spec import Code, WheelCheck, WheelSubject, finding

VARIANT_PROPERTIES = Code(
    name="variant-properties",
    summary="a variant wheel whose label or properties are not its build record's and device code's",
)


def _label(filename: str) -> str | None:
    """The PEP 825 label of a file name (6 fields, the third no build tag), else None."""
    parts = filename.removesuffix(".whl").split("-")
    return parts[5] if len(parts) == 6 and not parts[2][:1].isdigit() else None


def _check(subject: WheelSubject) -> list[Finding]:
    return _findings(subject.wheel, subject.elves)


def variant_findings(wheel: Path) -> list[Finding]:
    """The findings of this check alone (what the index runs on the variant wheels it makes)."""
    with tempfile.TemporaryDirectory(prefix="buildtools-check-") as tmp:
        return _findings(wheel, tuple(extract_elves(wheel, Path(tmp))))


def _findings(wheel: Path, elves: tuple[WheelElf, ...]) -> list[Finding]:
    name = wheel.name
    label = _label(name)
    with open_wheel(wheel) as archive:
        raw = archive.read_optional(
            f"{archive.dist_info}/{variantprops.VARIANT_JSON_NAME}",
            max_bytes=variantprops.VARIANT_JSON_BYTES,
        )
    if raw is None and label is None:
        return []

    def bad(message: str, details: tuple[str, ...] = ()) -> list[Finding]:
        return [finding(VARIANT_PROPERTIES, f"{name}: {message}", path=name, details=details)]

    if raw is None:
        return bad(
            f"its file name has the variant label {label!r} but it has no "
            f"{variantprops.VARIANT_JSON_NAME}; installers that know variants refuse it. "
            "Let `buildtools index` make the variant wheels (index.wheel_variants)."
        )
    if label is None:
        return bad(
            f"it has a {variantprops.VARIANT_JSON_NAME} but no variant label in its file name "
            "(PEP 825: …-<platform>-<label>.whl); publish the wheel buildtools built instead."
        )
    try:
        claimed = variantprops.parse_variant_json(raw, label=label)
        record = read_build_record(wheel)
    except (BuildRecordError, ValueError) as exc:
        return bad(f"{exc}")
    if record is None:
        return bad("it has no build record to derive its variant from; rebuild it")
    try:
        derived = variantprops.variant_spec(record)
    except ValueError as exc:
        return bad(f"its build record gives no variant: {exc}")
    findings: list[Finding] = []
    extra = sorted(set(claimed.properties) - set(derived.properties))
    missing = sorted(set(derived.properties) - set(claimed.properties))
    if claimed.label != derived.label or extra or missing:
        findings += bad(
            f"label {claimed.label!r} claims properties its build record does not give "
            f"(label {derived.label!r}; claimed beyond it: {', '.join(extra) or 'none'}; "
            f"missing: {', '.join(missing) or 'none'}): an installer would pick it for "
            "machines it was not built for. Let `buildtools index` make it again.",
            (*(f"claimed: {p}" for p in extra), *(f"missing: {p}" for p in missing)),
        )
    findings += _device(name, claimed, elves)
    return findings


def _device(
    name: str, claimed: variantprops.VariantSpec, elves: tuple[WheelElf, ...]
) -> list[Finding]:
    """Each claimed sm_arch is device code in every own shared object carrying CUDA code."""
    facts = variantprops.variant_facts()
    wanted = set(claimed.values(facts.cuda_namespace, facts.cuda_arch))
    if not wanted:
        return []
    carriers = [
        (e.arcname, variantprops.device_values(e.info.cuda.archs))
        for e in elves
        if not e.grafted and e.info.cuda is not None
    ]
    if not carriers:
        return [
            finding(
                VARIANT_PROPERTIES,
                f"{name} claims {facts.cuda_namespace} :: {facts.cuda_arch} "
                f"{', '.join(sorted(wanted))} but none of its shared objects carries CUDA "
                "device code: an installer would give it to GPUs it cannot run on.",
                path=name,
            )
        ]
    out: list[Finding] = []
    for arcname, have in carriers:
        lacking = sorted(wanted - have)
        if lacking:
            out.append(
                finding(
                    VARIANT_PROPERTIES,
                    f"{name} claims {facts.cuda_arch} {', '.join(lacking)}, which {arcname} "
                    f"does not carry (it has {', '.join(sorted(have)) or 'no device code'}): "
                    "an installer would give it to GPUs it has no code for.",
                    path=arcname,
                    details=tuple(f"lacking: {v}" for v in lacking),
                )
            )
    return out


CHECK = WheelCheck(name="variantclaims", codes=(VARIANT_PROPERTIES,), run=_check)
