"""A cell's wheel variant (PEP 825): its label and properties, derived from the build record.

PEP 825 gives a wheel a *variant label* in its file name
(`bt_scatter-0.1.0+pt213-cp311-cp311-linux_x86_64-cu130.whl`) and a `*.dist-info/variant.json`
mapping the label to *properties*, `namespace :: feature :: value`; an installer that knows
variants picks, among the wheels of one version, the best one whose properties the machine
supports. What a buildtools cell is says itself in these properties, read from the wheel's
build record, never typed by hand:

- the torch release(s) it was built against: `abi_dependency :: torch :: 2.13` (one value
  per torch minor the wheel's ABI covers);
- a CUDA cell: `nvidia :: cuda_version_lower_bound :: 13.0` (the CUDA runtime it links) and
  one `nvidia :: sm_arch :: 90_real` per cubin, `…_virtual` per PTX, of its arch list;
- a CPU cell: nothing more, so it is compatible everywhere and ranks after the GPU variants.

ROCm cells get no variant: no ROCm variant provider exists on PyPI, and uv 0.13.10 knows
none (`no_variant_reason`). The namespaces, the provider entries and the schema URL are
facts (`data/wheel_variants.json`). The documents are built and validated with `variantlib`
(PEP 825's reference library); where it and uv disagree (the `$schema` URL) the URL uv reads
is written, and `variantlib`'s own parser still validates every document.
"""

from __future__ import annotations

__all__ = [
    "VARIANT_JSON_NAME",
    "VariantFacts",
    "VariantSpec",
    "device_values",
    "dist_info_json",
    "index_json",
    "no_variant_reason",
    "parse_variant_json",
    "variant_facts",
    "variant_spec",
]

import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version
from variantlib.errors import ValidationError
from variantlib.models.variant import VariantDescription, VariantProperty
from variantlib.models.variant_info import ProviderInfo, VariantInfo
from variantlib.variant_dist_info import VariantDistInfo
from variantlib.variants_json import VariantsJson

from ..jsonfields import decode_json
from ..model import BuildRecord

VARIANT_JSON_NAME = "variant.json"
VARIANT_JSON_BYTES = 1 << 20  # a real one is < 2 KiB
_FACTS_FILE = Path(__file__).resolve().parents[1] / "data" / "wheel_variants.json"
_NAME_RE = re.compile(r"[a-z0-9_]+")  # PEP 825: namespaces and feature names
_LABEL_RE = re.compile(r"[0-9a-z_.]+")  # PEP 825: a variant label


@dataclass(frozen=True, kw_only=True)
class VariantFacts:
    """`data/wheel_variants.json`: what buildtools writes into variant metadata."""

    schema: str
    namespace_order: tuple[str, ...]
    torch_namespace: str
    torch_feature: str
    cuda_namespace: str
    cuda_lower_bound: str
    cuda_arch: str
    cubin_suffix: str
    ptx_suffix: str
    cuda_requires: tuple[str, ...]
    cuda_plugin_api: str


def _text(raw: Mapping[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{_FACTS_FILE}: {where}{key}: expected a non-empty string")
    return value


def _name(raw: Mapping[str, Any], key: str, where: str) -> str:
    value = _text(raw, key, where)
    if not _NAME_RE.fullmatch(value):
        raise ValueError(f"{_FACTS_FILE}: {where}{key}: {value!r} is not [a-z0-9_]+ (PEP 825)")
    return value


@functools.cache
def variant_facts() -> VariantFacts:
    """Load and validate `data/wheel_variants.json` (once)."""
    raw = decode_json(_FACTS_FILE.read_bytes(), what=str(_FACTS_FILE), max_bytes=1 << 16)
    if not isinstance(raw, dict):
        raise ValueError(f"{_FACTS_FILE}: expected an object")
    torch, cuda = raw.get("torch"), raw.get("cuda")
    if not isinstance(torch, dict) or not isinstance(cuda, dict):
        raise ValueError(f"{_FACTS_FILE}: torch, cuda: expected objects")
    provider = cuda.get("provider")
    order = raw.get("namespace_order")
    if not isinstance(provider, dict) or not isinstance(order, list):
        raise ValueError(f"{_FACTS_FILE}: cuda.provider, namespace_order: expected them")
    requires = provider.get("requires")
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise ValueError(f"{_FACTS_FILE}: cuda.provider.requires: expected strings")
    facts = VariantFacts(
        schema=_text(raw, "schema", ""),
        namespace_order=tuple(str(n) for n in order),
        torch_namespace=_name(torch, "namespace", "torch."),
        torch_feature=_name(torch, "feature", "torch."),
        cuda_namespace=_name(cuda, "namespace", "cuda."),
        cuda_lower_bound=_name(cuda, "lower_bound", "cuda."),
        cuda_arch=_name(cuda, "arch", "cuda."),
        cubin_suffix=_text(cuda, "cubin_suffix", "cuda."),
        ptx_suffix=_text(cuda, "ptx_suffix", "cuda."),
        cuda_requires=tuple(requires),
        cuda_plugin_api=_text(provider, "plugin-api", "cuda.provider."),
    )
    if sorted(facts.namespace_order) != sorted({facts.torch_namespace, facts.cuda_namespace}):
        raise ValueError(f"{_FACTS_FILE}: namespace_order must list exactly the namespaces used")
    return facts


@dataclass(frozen=True, kw_only=True)
class VariantSpec:
    """One variant: its label and its properties ('namespace :: feature :: value', sorted)."""

    label: str
    properties: tuple[str, ...]

    def values(self, namespace: str, feature: str) -> tuple[str, ...]:
        """The values of one feature, in order."""
        prefix = f"{namespace} :: {feature} :: "
        return tuple(p[len(prefix) :] for p in self.properties if p.startswith(prefix))

    def description(self) -> VariantDescription:
        """The same variant as variantlib's model (which validates every name and value)."""
        return VariantDescription(
            properties=[VariantProperty.from_str(p) for p in self.properties], label=self.label
        )


def no_variant_reason(record: BuildRecord) -> str | None:
    """Why the wheel of this record gets no variant twin, or None when it does."""
    kind = record.accelerator.kind
    if kind == "rocm":
        return (
            "no ROCm variant provider exists (none on PyPI, none built into uv 0.13.10): a "
            "ROCm variant could never be selected, so its cell keeps only its ordinary wheel"
        )
    if kind == "cuda" and (not record.cuda or not record.arch_list):
        return "its build record names no CUDA version or arch list to derive properties from"
    return None


def _torch_values(record: BuildRecord) -> tuple[str, ...]:
    """'2.13' for each torch minor the wheel's ABI covers (the record's torch_versions)."""
    out: list[str] = []
    for text in record.torch_versions or (record.torch,):
        try:
            v = Version(text)
        except InvalidVersion as exc:
            raise ValueError(f"build record: torch {text!r}: {exc}") from None
        value = f"{v.major}.{v.minor}"
        if value not in out:
            out.append(value)
    return tuple(out)


def device_values(archs: Iterable[str]) -> frozenset[str]:
    """sm_90 → 90_real, compute_120 → 120_virtual, sm_90a → 90a_real (the sm_arch values
    the NVIDIA provider speaks); other device code (LTO IR, gfx targets) has none."""
    facts = variant_facts()
    out: set[str] = set()
    for arch in archs:
        kind, _, number = arch.partition("_")
        if kind == "sm" and number:
            out.add(number + facts.cubin_suffix)
        elif kind == "compute" and number:
            out.add(number + facts.ptx_suffix)
    return frozenset(out)


def variant_spec(record: BuildRecord) -> VariantSpec:
    """The variant of the wheel this record describes; ValueError (`no_variant_reason`) when
    it has none."""
    reason = no_variant_reason(record)
    if reason is not None:
        raise ValueError(reason)
    facts = variant_facts()
    label = record.accelerator.name
    if not _LABEL_RE.fullmatch(label):
        raise ValueError(f"accelerator {label!r} is not a PEP 825 variant label ([0-9a-z_.]+)")
    props = [
        f"{facts.torch_namespace} :: {facts.torch_feature} :: {v}" for v in _torch_values(record)
    ]
    if record.accelerator.kind == "cuda" and record.cuda and record.arch_list:
        from .checks.device import expected_archs  # checks import this module

        runtime = Version(record.cuda)
        ns = facts.cuda_namespace
        props.append(f"{ns} :: {facts.cuda_lower_bound} :: {runtime.major}.{runtime.minor}")
        props += [
            f"{ns} :: {facts.cuda_arch} :: {v}"
            for v in device_values(expected_archs(record.arch_list, "cuda"))
        ]
    spec = VariantSpec(label=label, properties=tuple(sorted(props)))
    try:
        spec.description()
    except ValidationError as exc:
        raise ValueError(f"variant {label}: {exc}") from None
    return spec


def _info(torch_values: Sequence[str]) -> VariantInfo:
    """The providers and namespace order every variant of a buildtools wheel declares."""
    facts = variant_facts()
    providers = {
        facts.cuda_namespace: ProviderInfo(
            requires=list(facts.cuda_requires), plugin_api=facts.cuda_plugin_api
        ),
        facts.torch_namespace: ProviderInfo(
            static_properties={facts.torch_feature: list(torch_values)}
        ),
    }
    return VariantInfo(namespace_priorities=list(facts.namespace_order), providers=providers)


def _with_schema(text: str) -> bytes:
    """variantlib's JSON with the `$schema` uv reads (variantlib 0.2.2 writes its own)."""
    data = decode_json(text, what="variantlib's variants JSON")
    data["$schema"] = variant_facts().schema
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def dist_info_json(spec: VariantSpec) -> bytes:
    """The wheel's `*.dist-info/variant.json`, built by variantlib and read back by it."""
    facts = variant_facts()
    doc = VariantDistInfo(_info(spec.values(facts.torch_namespace, facts.torch_feature)))
    doc.variant_desc = spec.description()
    out = _with_schema(doc.to_str())
    if parse_variant_json(out, label=spec.label) != spec:
        raise ValueError(f"variant {spec.label}: variant.json does not read back as written")
    return out


def index_json(specs: Iterable[VariantSpec]) -> bytes:
    """`{name}-{version}-variants.json`: every variant of one version, one label → one set
    of properties (ValueError naming a label two wheels give different properties)."""
    facts = variant_facts()
    by_label: dict[str, VariantSpec] = {}
    torch: list[str] = []
    for spec in specs:
        seen = by_label.setdefault(spec.label, spec)
        if seen != spec:
            raise ValueError(
                f"variant label {spec.label!r} stands for two sets of properties: "
                f"{', '.join(seen.properties)} and {', '.join(spec.properties)}"
            )
        torch += [
            v for v in spec.values(facts.torch_namespace, facts.torch_feature) if v not in torch
        ]
    doc = VariantsJson(_info(torch))
    doc.variants = {label: by_label[label].description() for label in sorted(by_label)}
    out = _with_schema(doc.to_str())
    try:
        VariantsJson(
            decode_json(out, what="variants JSON")
        )  # variantlib's own validation of the index document
    except ValidationError as exc:
        raise ValueError(f"variants JSON: {exc}") from None
    return out


def parse_variant_json(raw: bytes, *, label: str) -> VariantSpec:
    """A wheel's `variant.json`, validated by variantlib: exactly one variant, labelled
    `label`, in the schema buildtools writes; ValueError says what is wrong."""
    data = decode_json(raw, what=VARIANT_JSON_NAME, max_bytes=VARIANT_JSON_BYTES)
    if not isinstance(data, dict):
        raise ValueError(f"{VARIANT_JSON_NAME}: expected an object")
    schema = data.get("$schema")
    if schema != variant_facts().schema:
        raise ValueError(
            f"{VARIANT_JSON_NAME}: $schema is {schema!r}, expected {variant_facts().schema!r}"
        )
    try:
        doc = VariantDistInfo(json.dumps(data), expected_label=label)
        desc = doc.variant_desc
    except (ValidationError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{VARIANT_JSON_NAME}: {exc}") from None
    return VariantSpec(
        label=desc.label, properties=tuple(sorted(p.to_str() for p in desc.properties))
    )
