"""The variant index (matrix.yaml `index.wheel_variants`): PEP 825 variant wheels, one index.

A find-links page lists one torch × accelerator, so the user must pick it. PEP 825 lets an
installer pick instead: the wheels of one *version* differ by a variant label whose
properties (`wheel.variantprops`: torch, CUDA version, GPU archs) the installer checks
against the machine. uv 0.13.10 selects variants within a version and resolves versions
as usual (measured: docs/index.md), so the torch axis stays in the version and the
accelerator axis becomes the variant:

- for each published wheel `bt_scatter-0.1.0+pt213cu130-…` a *variant twin*
  `bt_scatter-0.1.0+pt213-…-cu130.whl`: the same files at the version whose local label is
  `index.local_version` without the accelerator, with its `variant.json`;
- for each CPU wheel also the *fallback* `bt_scatter-0.1.0+pt213-….whl`, the plain wheel of
  that version, which pip (no variants) installs from the same index;
- `{name}-{version}-variants.json` beside the wheels (PEP 825's index-level metadata),
  linked with its sha256 from every page that lists the variant wheels:
  `wheel-variants.html` (find-links) and `wheel-variants/<project>/` (PEP 503).

The twins are made here, from wheels the gate let through: only the version, the file
name and `variant.json` change (`meta.variant_wheel`), the compiled files keep their bytes,
so the smoke runs of the wheel vouch for its twin; each twin passes the
`variant-properties` check before it is published. They are ordinary published files
after that: immutable, in `index.json`, merged and swapped in with everything else.
"""

from __future__ import annotations

__all__ = [
    "VARIANT_INDEX_DIR",
    "VARIANT_PAGE",
    "refuse_variant_inputs",
    "render_variant_index",
    "variant_sources",
    "variants_json_name",
]

import hashlib
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ..errors import PublishError
from ..model import BuildRecord, Severity
from ..planner.derive import local_version
from ..wheel.checks.variantclaims import variant_findings
from ..wheel.meta import read_build_record, variant_wheel, with_local_version
from ..wheel.variantprops import VariantSpec, dist_info_json, index_json, no_variant_reason
from ..wheel.variantprops import variant_spec as derive_spec
from .manifest import IndexedWheel
from .pages import (
    WHEELS_DIR,
    anchor,
    quote_name,
    render_find_links,
    render_simple_project,
    render_simple_root,
    wheels_prefix,
)
from .settings import IndexSettings
from .wheels import WheelSource, read_wheel

VARIANT_INDEX_DIR = "wheel-variants"
VARIANT_PAGE = "wheel-variants.html"


def _has_label(filename: str) -> bool:
    parts = filename.removesuffix(".whl").split("-")
    return len(parts) == 6 and not parts[2][:1].isdigit()


def refuse_variant_inputs(sources: Sequence[WheelSource]) -> None:
    """PublishError for a wheel given to publish that already is a variant wheel: the index
    makes those itself, from the wheel buildtools built."""
    for src in sources:
        if _has_label(src.wheel.filename):
            raise PublishError(
                f"{src.path}: a PEP 825 variant wheel (a label after its platform tag); "
                "`buildtools index` makes variant wheels itself (index.wheel_variants): "
                "publish the wheel `buildtools build` wrote instead"
            )


def _torch_label(template: str, record: BuildRecord, path: Path) -> str:
    """The local label of the variant version: the template's without the accelerator."""
    full = local_version(
        template, torch=record.torch, accelerator=record.accelerator.name, abi=record.abi or ""
    )
    label = local_version(template, torch=record.torch, accelerator="", abi=record.abi or "")
    label = re.sub(r"\.{2,}", ".", label).strip(".")
    try:
        with_local_version("0", label)
    except ValueError:
        label = ""
    if not label or label == full:
        raise PublishError(
            f"{path}: index.local_version {template!r} gives {label or 'nothing'!r} without "
            "its {accelerator}: wheel variants need a label that names torch and one that "
            "adds the accelerator, e.g. 'pt{torch_major}{torch_minor}{accelerator}'"
        )
    return label


def _twin(src: WheelSource, out: Path, label: str, spec: VariantSpec | None) -> WheelSource:
    """The variant twin (with `spec`) or the plain fallback of `src`, read back as published."""
    try:
        path = variant_wheel(
            src.path,
            out_dir=out,
            local_version=label,
            label=spec.label if spec else None,
            variant_json=dist_info_json(spec) if spec else b"",
        )
    except (OSError, ValueError) as exc:
        raise PublishError(f"{src.path}: cannot make its variant wheel: {exc}") from exc
    errors = [f for f in variant_findings(path) if f.severity is Severity.ERROR]
    if errors:
        raise PublishError(
            f"{path.name}: [{errors[0].code}] {errors[0].message}; nothing was published"
        )
    made = read_wheel(path)
    wheel = (
        replace(made.wheel, variant_label=spec.label, variant_properties=spec.properties)
        if spec
        else replace(made.wheel, variant_fallback=True)
    )
    return replace(made, wheel=wheel)


def variant_sources(
    sources: Sequence[WheelSource], settings: IndexSettings, workdir: Path
) -> tuple[list[WheelSource], list[str]]:
    """The variant twins (and CPU fallbacks) of `sources`, written into `workdir`; and one
    note per wheel that gets none (a ROCm cell: no provider), saying why."""
    made: list[WheelSource] = []
    notes: list[str] = []
    for src in sources:
        try:
            record = read_build_record(src.path)
        except (OSError, ValueError) as exc:
            raise PublishError(f"{src.path}: {exc}") from exc
        if record is None:
            continue  # read_wheel refused it already; nothing to derive a variant from
        reason = no_variant_reason(record)
        if reason is not None:
            notes.append(f"{src.wheel.filename}: no variant wheel: {reason}")
            continue
        label = _torch_label(settings.local_version, record, src.path)
        try:
            spec = derive_spec(record)
        except ValueError as exc:
            raise PublishError(f"{src.path}: {exc}") from exc
        made.append(_twin(src, workdir, label, spec))
        if record.accelerator.kind == "cpu":
            made.append(_twin(src, workdir, label, None))
    return made, notes


def variants_json_name(wheel: IndexedWheel) -> str:
    """`{name}-{version}-variants.json`, both spelled as in the wheel's file name (PEP 825)."""
    name, version = wheel.filename.split("-", 2)[:2]
    return f"{name}-{version}-variants.json"


def _json_anchor(name: str, data: bytes, prefix: str) -> str:
    sha = hashlib.sha256(data).hexdigest()
    href = f"{prefix}{WHEELS_DIR}/{quote_name(name)}#sha256={sha}"
    return f'<a href="{href}">{name}</a><br>'


def render_variant_index(wheels: Sequence[IndexedWheel], settings: IndexSettings) -> dict[str, str]:
    """The variant index's files, path → text: `wheel-variants.html`, the PEP 503 pages
    under `wheel-variants/` and each version's variants JSON in `wheels/` (pure)."""
    members = sorted((w for w in wheels if w.in_variant_set), key=lambda w: w.filename)
    if not members:
        return {}
    documents: dict[str, bytes] = {}
    specs: dict[str, list[VariantSpec]] = defaultdict(list)
    for w in members:
        if w.variant_label is not None:
            spec = VariantSpec(label=w.variant_label, properties=w.variant_properties)
            specs[variants_json_name(w)].append(spec)
    for name, found in sorted(specs.items()):
        try:
            documents[name] = index_json(found)
        except ValueError as exc:
            raise PublishError(f"{name}: {exc}; nothing was published") from exc
    by_project: dict[str, list[IndexedWheel]] = defaultdict(list)
    for w in members:
        by_project[w.project].append(w)
    files: dict[str, str] = {}
    top, nested = wheels_prefix(settings.base_url, 0), wheels_prefix(settings.base_url, 2)
    flat: list[str] = []
    for project, group in sorted(by_project.items()):
        names = sorted({variants_json_name(w) for w in group if w.variant_label is not None})
        deep = [anchor(w.link(), nested) for w in group]
        deep += [_json_anchor(n, documents[n], nested) for n in names]
        flat += [anchor(w.link(), top) for w in group]
        flat += [_json_anchor(n, documents[n], top) for n in names]
        files[f"{VARIANT_INDEX_DIR}/{project}/index.html"] = render_simple_project(
            f"{project}: wheel variants (PEP 825)", deep
        )
    files[f"{VARIANT_INDEX_DIR}/index.html"] = render_simple_root(
        "Wheel variants (PEP 825)", sorted(by_project)
    )
    files[VARIANT_PAGE] = render_find_links("Wheel variants (PEP 825)", flat)
    for name, data in documents.items():
        files[f"{WHEELS_DIR}/{name}"] = data.decode("utf-8")
    return files
