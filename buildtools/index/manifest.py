"""`index.json`: the published wheels of a site, the one record merging trusts.

The HTML pages are generated from it and never read back; a wheel it lists stays listed
with the same sha256 forever (see `merge`).

A published file is identified by what pip sees in its name, not by how the name is
spelled (`IndexedWheel.identity`): the project name normalised by PEP 503, the version
by packaging's `canonicalize_version`, the build tag and the set of tags. `hostile_x`,
`Hostile_X` and `hostile.x` 1.0+pt213cpu are one wheel to pip; a manifest that lists one
identity twice (two spellings, or one entry 200,000 times) is refused, as is merging a
second spelling into a site (`merge`).
"""

from __future__ import annotations

__all__ = [
    "INDEX_SCHEMA",
    "MANIFEST_MAX_BYTES",
    "MANIFEST_NAME",
    "IndexedWheel",
    "Manifest",
    "WheelIdentity",
    "read_manifest",
    "wheel_identity",
]

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name, canonicalize_version

from ..errors import PublishError
from ..files import check_wheel_filename, read_within, safe_join
from ..jsonfields import decode_json
from ..wheel.archive import project_name_problem
from .pages import LinkTarget
from .smokelog import SmokeRun

INDEX_SCHEMA = "torch-buildtools/index/v1"
MANIFEST_NAME = "index.json"
MANIFEST_MAX_BYTES = 64 << 20  # ~120,000 wheels (10,000 take ~5 MB)
_SHA256_RE = re.compile(r"[0-9a-f]{64}")

WheelIdentity = tuple[str, str, str, str]
"""(PEP 503 name, canonical version, build tag, tags: python-abi-platform, lower-cased, each
compressed set sorted, and `~label` for a PEP 825 variant wheel)."""


@functools.lru_cache(maxsize=65536)
def wheel_identity(filename: str) -> WheelIdentity:
    """What pip tells a wheel by (see the module); `filename` must be a wheel file name."""
    parts = filename[: -len(".whl")].split("-")
    label = ""
    if len(parts) == 6 and not parts[2][:1].isdigit():
        # PEP 825: name-version-python-abi-platform-label (a build tag starts with a digit)
        label = parts.pop()
    tags = "-".join(parts[-3:]).lower()
    if "." in tags:  # a compressed tag set (py2.py3): the same set in any order
        tags = "-".join(".".join(sorted(set(t.split(".")))) for t in tags.split("-"))
    return (
        _canonical(parts[0]),
        _canonical_version(parts[1]),
        parts[2] if len(parts) == 6 else "",
        f"{tags}~{label}" if label else tags,
    )


# a version as tools write it: release numbers without leading zeros, a lower-case local
# label; its canonical form is computed here without building a Version (a site's
# manifest has thousands of versions, read by every publish)
_LOCAL_PART = r"(?:[0-9]*[a-z][a-z0-9]*|0|[1-9][0-9]*)"  # a number has no leading zero
_PLAIN_VERSION_RE = re.compile(
    rf"((?:0|[1-9][0-9]*)(?:\.(?:0|[1-9][0-9]*))*)(\+{_LOCAL_PART}(?:\.{_LOCAL_PART})*)?",
    re.ASCII,
)


@functools.lru_cache(maxsize=65536)
def _canonical_version(version: str) -> str:
    """packaging's `canonicalize_version` (trailing zeros of the release stripped)."""
    plain = _PLAIN_VERSION_RE.fullmatch(version)
    if plain is None:
        return canonicalize_version(version.replace("_", "-"))
    release = plain[1]
    while release.endswith(".0"):
        release = release[:-2]
    return release + (plain[2] or "")


_SAFE_URL_RE = re.compile(r"https?://[^\s\"'<>\\`]+")
# what the pages and their file names are made of: a PEP 440 version (torch's, a wheel's)
# and an accelerator name, as `buildtools build` records them
_VERSION_RE = re.compile(
    r"v?\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?(\+[a-z0-9]+([._-][a-z0-9]+)*)?", re.I
)
_ACCELERATOR_RE = re.compile(r"cpu|cu\d{3,4}|rocm\d+(\.\d+)*")


@dataclass(frozen=True, kw_only=True)
class IndexedWheel:
    """One published wheel, as `index.json` records it."""

    filename: str
    sha256: str
    size: int
    name: str
    version: str
    requires_python: str | None
    metadata_sha256: str
    torch: str
    torch_versions: tuple[str, ...]
    torch_specifier: str | None
    accelerator: str
    url: str | None = None  # absolute URL when the wheel lives elsewhere
    # the build record's job fingerprint: `buildtools build --index-site` skips a job whose
    # fingerprint is published (absent from manifests written before it existed)
    fingerprint: str | None = None
    # PEP 825 (index.wheel_variants): the variant label of a variant wheel and its
    # properties ('namespace :: feature :: value'); `variant_fallback` marks the plain wheel
    # of a variant version, for installers that know no variants. The three make the set
    # the variant index lists (`variantindex`); absent from every other wheel's entry
    variant_label: str | None = None
    variant_properties: tuple[str, ...] = ()
    variant_fallback: bool = False

    @property
    def in_variant_set(self) -> bool:
        """Whether the wheel belongs to the variant index rather than the ordinary pages."""
        return self.variant_label is not None or self.variant_fallback

    @property
    def project(self) -> str:
        return _canonical(self.name)

    @property
    def identity(self) -> WheelIdentity:
        """What pip tells this wheel by, whatever the spelling of its file name."""
        return wheel_identity(self.filename)

    def link(self) -> LinkTarget:
        return LinkTarget(
            filename=self.filename,
            sha256=self.sha256,
            requires_python=self.requires_python,
            metadata_sha256=self.metadata_sha256,
            url=self.url,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "filename": self.filename,
            "sha256": self.sha256,
            "size": self.size,
            "name": self.name,
            "version": self.version,
            "requires_python": self.requires_python,
            "metadata_sha256": self.metadata_sha256,
            "torch": self.torch,
            "torch_versions": list(self.torch_versions),
            "torch_specifier": self.torch_specifier,
            "accelerator": self.accelerator,
            "url": self.url,
            **({"fingerprint": self.fingerprint} if self.fingerprint else {}),
            **({"variant_fallback": True} if self.variant_fallback else {}),
            **({"variant_label": self.variant_label} if self.variant_label is not None else {}),
            **(
                {"variant_properties": list(self.variant_properties)}
                if self.variant_label is not None
                else {}
            ),
        }

    @classmethod
    def from_json(cls, raw: Any) -> IndexedWheel:
        """One entry of `index.json`, validated (the manifest may come back from a published
        site: nothing in it is trusted); ValueError or UnsafeArtefactError names the entry."""
        if not _plain_types(raw):
            _check_types(raw)  # raises, naming the first key that is wrong
        label, properties, fallback = _variant_fields(raw)
        base = raw["filename"]
        if label is not None:
            if not base.endswith(f"-{label}.whl"):
                raise ValueError(f"{base}: variant_label: {label!r} is not its file name's label")
            base = base[: -len(f"-{label}.whl")] + ".whl"
        check_wheel_filename(base, what=f"{MANIFEST_NAME} entry")
        for key in ("sha256", "metadata_sha256"):
            if not _SHA256_RE.fullmatch(raw[key]):
                raise ValueError(f"{raw['filename']}: {key}: expected 64 hexadecimal digits")
        _check_names(raw)
        url = raw.get("url")
        if url is not None and not _SAFE_URL_RE.fullmatch(url):
            raise ValueError(
                f"{raw['filename']}: url: {url!r} is not an http(s) URL without quotes or spaces"
            )
        versions = raw["torch_versions"]
        return cls(
            filename=raw["filename"],
            sha256=raw["sha256"],
            size=raw["size"],
            name=raw["name"],
            version=raw["version"],
            requires_python=raw.get("requires_python"),
            metadata_sha256=raw["metadata_sha256"],
            torch=raw["torch"],
            torch_versions=tuple(versions),
            torch_specifier=raw.get("torch_specifier"),
            accelerator=raw["accelerator"],
            url=raw.get("url"),
            fingerprint=raw.get("fingerprint"),
            variant_label=label,
            variant_properties=properties,
            variant_fallback=fallback,
        )


_LABEL_RE = re.compile(r"[0-9a-z_.]{1,64}")  # PEP 825's label, bounded
_PROPERTY_RE = re.compile(r"[a-z0-9_]+ :: [a-z0-9_]+ :: [a-z0-9_.]+")  # as variantlib writes


def _variant_fields(raw: dict[str, Any]) -> tuple[str | None, tuple[str, ...], bool]:
    """An entry's PEP 825 fields, checked (ValueError naming the key)."""
    filename = raw["filename"]
    label, props, fallback = (
        raw.get("variant_label"),
        raw.get("variant_properties", []),
        raw.get("variant_fallback", False),
    )
    if label is not None and (not isinstance(label, str) or not _LABEL_RE.fullmatch(label)):
        raise ValueError(f"{filename}: variant_label: expected a PEP 825 label ([0-9a-z_.]+)")
    if not isinstance(props, list) or not all(
        isinstance(p, str) and _PROPERTY_RE.fullmatch(p) for p in props
    ):
        raise ValueError(
            f"{filename}: variant_properties: expected 'namespace :: feature :: value' strings"
        )
    if props and label is None:
        raise ValueError(f"{filename}: variant_properties: only a variant wheel has them")
    if not isinstance(fallback, bool) or (fallback and label is not None):
        raise ValueError(f"{filename}: variant_fallback: true only for a plain (unlabelled) wheel")
    return label, tuple(props), fallback


def _check_names(raw: dict[str, Any]) -> None:
    """The values pages and their paths are made of are what a build records: the file
    name's project, versions, an accelerator name (ValueError naming the key otherwise)."""
    filename = raw["filename"]
    if _canonical(raw["name"]) != _canonical(filename.split("-", 1)[0]):
        raise ValueError(f"{filename}: name: {raw['name']!r} is not the project of the file name")
    versions = [raw["version"], raw["torch"], *raw["torch_versions"]]
    if not all(_VERSION_RE.fullmatch(v) for v in versions):
        raise ValueError(
            f"{filename}: version, torch, torch_versions: expected PEP 440 versions, got "
            + ", ".join(repr(v) for v in versions if not _VERSION_RE.fullmatch(v))
        )
    if not _ACCELERATOR_RE.fullmatch(raw["accelerator"]):
        raise ValueError(
            f"{filename}: accelerator: {raw['accelerator']!r} is not cpu, cuNNN or rocmX.Y"
        )


@functools.lru_cache(maxsize=1024)
def _canonical(name: str) -> str:
    """canonicalize_name, once per distinct name (a site has thousands of wheels of a few)."""
    return canonicalize_name(name)


@functools.lru_cache(maxsize=1024)
def _name_problem(name: str) -> str | None:
    """Why `name` is not a PEP 508 project name, or None (a site has a few names)."""
    return project_name_problem(name)


_STRINGS = ("filename", "sha256", "name", "version", "metadata_sha256", "torch", "accelerator")
_OPTIONAL = ("requires_python", "torch_specifier", "url", "fingerprint")


def _plain_types(raw: Any) -> bool:
    """Whether an entry has every field of the type it must have: the common case, checked
    in one expression (`_check_types` finds and words the first problem otherwise)."""
    if type(raw) is not dict:
        return False
    get = raw.get
    size = get("size")
    versions = get("torch_versions")
    optional = (get("requires_python"), get("torch_specifier"), get("url"), get("fingerprint"))
    return (
        type(get("filename")) is str
        and type(get("sha256")) is str
        and type(get("name")) is str
        and type(get("version")) is str
        and type(get("metadata_sha256")) is str
        and type(get("torch")) is str
        and type(get("accelerator")) is str
        and all(v is None or type(v) is str for v in optional)
        and type(versions) is list
        and all(type(v) is str for v in versions)
        and type(size) is int
        and size >= 0
    )


def _check_types(raw: Any) -> None:
    """ValueError naming the first field of an entry with the wrong type, if any."""
    if not isinstance(raw, dict):
        raise ValueError("a wheel entry is not an object")
    for key in _STRINGS:
        if not isinstance(raw.get(key), str):
            raise ValueError(f"{raw.get('filename', '?')}: {key}: expected a string")
    for key in _OPTIONAL:
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise ValueError(f"{raw['filename']}: {key}: expected a string or null")
    versions = raw.get("torch_versions")
    if not isinstance(versions, list) or not all(isinstance(v, str) for v in versions):
        raise ValueError(f"{raw['filename']}: torch_versions: expected a list of strings")
    size = raw.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ValueError(f"{raw['filename']}: size: expected a whole number")


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """What a site publishes: its wheels, the passing smoke runs of those wheels (where and
    when they were tested; `smokelog`), and the files the last publish generated."""

    wheels: tuple[IndexedWheel, ...] = ()
    generated: tuple[str, ...] = ()
    smoke: tuple[SmokeRun, ...] = ()

    def to_json(self) -> str:
        """One wheel per line (diffs stay readable), each as json.dumps writes it."""

        def line(value: Any) -> str:
            return json.dumps(value, sort_keys=True, ensure_ascii=False)

        wheels = ",\n  ".join(_wheel_line(w) for w in self.wheels)
        generated = ",\n  ".join(line(g) for g in self.generated)
        # only a site with smoke runs has the key: older sites keep their bytes
        runs = ",\n  ".join(line(r.to_json()) for r in self.smoke)
        smoke = f' "smoke": [\n  {runs}\n ],\n' if self.smoke else ""
        return (
            f'{{\n "schema": {line(INDEX_SCHEMA)},\n'
            f' "wheels": [\n  {wheels}\n ],\n'
            f"{smoke}"
            f' "generated": [\n  {generated}\n ]\n}}\n'
        )


_string = json.encoder.encode_basestring  # json.dumps(str, ensure_ascii=False), in C


def _json(value: str | None) -> str:
    return "null" if value is None else _string(value)


def _wheel_line(w: IndexedWheel) -> str:
    """`json.dumps(w.to_json(), sort_keys=True, ensure_ascii=False)`, spelled out: the
    same bytes (a test checks it on arbitrary entries) at a quarter of the cost, which
    counts for a manifest of 10,000 wheels rewritten by every publish."""
    versions = ", ".join(_string(v) for v in w.torch_versions)
    fingerprint = f'"fingerprint": {_string(w.fingerprint)}, ' if w.fingerprint else ""
    return (
        f'{{"accelerator": {_string(w.accelerator)}, "filename": {_string(w.filename)}, '
        f'{fingerprint}"metadata_sha256": {_string(w.metadata_sha256)}, '
        f'"name": {_string(w.name)}, "requires_python": {_json(w.requires_python)}, '
        f'"sha256": {_string(w.sha256)}, "size": {int(w.size)!r}, "torch": {_string(w.torch)}, '
        f'"torch_specifier": {_json(w.torch_specifier)}, "torch_versions": [{versions}], '
        f'"url": {_json(w.url)}, {_variant_line(w)}"version": {_string(w.version)}}}'
    )


def _variant_line(w: IndexedWheel) -> str:
    """The PEP 825 keys of `_wheel_line`, in their sorted place (none for most wheels)."""
    if w.variant_label is None:
        return '"variant_fallback": true, ' if w.variant_fallback else ""
    props = ", ".join(_string(p) for p in w.variant_properties)
    return f'"variant_label": {_string(w.variant_label)}, "variant_properties": [{props}], '


def read_manifest(site: Path) -> Manifest:
    """The site's `index.json`; empty for a missing or empty directory."""
    path = site / MANIFEST_NAME
    if not path.is_file():
        if site.is_dir() and any(site.iterdir()):
            raise PublishError(
                f"{site} is not empty and has no {MANIFEST_NAME}, so it is not a site "
                "`buildtools index` wrote; publish into an empty or new directory"
            )
        return Manifest()
    try:
        # never through a link out of the site: what it names would be read and shown
        raw = read_within(site, MANIFEST_NAME, max_bytes=MANIFEST_MAX_BYTES)
        # every entry's fields are type-checked below: that bounds the depth of what is kept
        data = decode_json(raw, what=MANIFEST_NAME, max_bytes=MANIFEST_MAX_BYTES, max_depth=None)
        if not isinstance(data, dict) or data.get("schema") != INDEX_SCHEMA:
            raise ValueError(f"schema is not {INDEX_SCHEMA!r}")
        entries = data.get("wheels", [])
        if not isinstance(entries, list):
            raise ValueError("wheels: expected a list of wheel entries")
        wheels = tuple(IndexedWheel.from_json(w) for w in entries)
        _check_unique(wheels)
        generated = data.get("generated", [])
        if not isinstance(generated, list) or not all(isinstance(g, str) for g in generated):
            raise ValueError("generated: expected a list of paths")
        for rel in generated:
            safe_join(site, rel, what=f"{MANIFEST_NAME} generated file")
        smoke = data.get("smoke", [])
        if not isinstance(smoke, list):
            raise ValueError("smoke: expected a list of smoke runs")
        runs = tuple(SmokeRun.from_json(r, f"smoke[{i}]") for i, r in enumerate(smoke))
    except (OSError, ValueError) as exc:
        raise PublishError(f"{path}: {exc}") from exc
    return Manifest(wheels=wheels, generated=tuple(generated), smoke=runs)


def _check_unique(wheels: tuple[IndexedWheel, ...]) -> None:
    """ValueError when an entry's name is not its file name's project (by PEP 503), or not
    a PEP 508 name, or when two entries are one wheel to pip (the same identity)."""
    seen: dict[WheelIdentity, int] = {}
    for index, wheel in enumerate(wheels):
        identity = wheel_identity(wheel.filename)
        problem = _name_problem(wheel.name)
        if problem is not None:
            raise ValueError(f"{wheel.filename}: name: {problem}")
        if _canonical(wheel.name) != identity[0]:
            raise ValueError(
                f"{wheel.filename}: name: {wheel.name!r} is another project than the file name's"
            )
        first = seen.setdefault(identity, index)
        if first != index:
            other = wheels[first].filename
            same = "listed twice" if other == wheel.filename else f"the same wheel as {other}"
            raise ValueError(
                f"{wheel.filename}: {same} (project, version and tags, as pip compares "
                "them); a site lists each wheel once"
            )
