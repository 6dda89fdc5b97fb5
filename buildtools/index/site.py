"""`buildtools index`: publish wheels as a static pip index, incrementally and atomically.

From wheels (and the build records inside them) this writes a static site:

```
SITE/
  index.html                     landing page: every torch × accelerator, install commands
  index.json                     manifest: every published wheel with its sha256
  torch-2.11.0+cu130.html        find-links page (`pip install X -f …/torch-2.11.0+cu130.html`)
  torch-2.11.0+cu130/            PEP 503 index of the same wheels (`--index-url …`)
    index.html, <project>/index.html
  simple/                        PEP 503 index of every wheel
    index.html, <project>/index.html
  wheels/<wheel>, wheels/<wheel>.metadata    (PEP 658; unless wheels live elsewhere)
```

The steps are separate: `read_wheel` (I/O), `SmokeGate` (which wheels may go out),
`merge` (pure: the published set plus the new wheels, or an `ImmutableWheelError`),
`render_site` (pure: path → bytes) and `publish` (the only writer: stages the new site
next to the old one and swaps it in, see `transaction.py`). Everything is decided before
anything is written, so a conflict leaves the site untouched.

Published wheels are immutable: merging reads `index.json` (never the HTML), keeps every
wheel it lists, and refuses a wheel whose file name is published with another sha256.
"""

from __future__ import annotations

__all__ = [
    "INDEX_SCHEMA",
    "MANIFEST_NAME",
    "SMOKE_SCHEMA",
    "IndexSettings",
    "IndexedWheel",
    "Manifest",
    "MergeResult",
    "PublishResult",
    "SmokeGate",
    "Variant",
    "WheelSource",
    "collect_wheels",
    "merge",
    "publish",
    "read_manifest",
    "read_wheel",
    "render_site",
    "wheel_variants",
]

import hashlib
import json
import re
import zipfile
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from email.parser import BytesHeaderParser
from pathlib import Path
from typing import Any
from urllib.parse import quote

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..errors import ImmutableWheelError, PublishError
from ..files import check_member_names, check_wheel_filename, safe_join
from ..knowledge import Knowledge
from ..model import Accelerator
from ..wheel.meta import BUILD_RECORD_NAME, WheelName, validate_build_record
from .gate import SMOKE_SCHEMA, SmokeGate
from .pages import (
    WHEELS_DIR,
    LandingRow,
    LinkTarget,
    anchor,
    render_find_links,
    render_landing,
    render_simple_project,
    render_simple_root,
    wheels_prefix,
)
from .transaction import Exchange, Fault, exchange_dirs, site_transaction

INDEX_SCHEMA = "torch-buildtools/index/v1"
MANIFEST_NAME = "index.json"
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_SAFE_URL_RE = re.compile(r"https?://[^\s\"'<>\\`]+")
SIMPLE_DIR = "simple"


# -- the records ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One find-links page: a torch release × an accelerator ('2.11.0+cu130')."""

    torch: str
    accelerator: str

    @classmethod
    def parse(cls, key: str) -> Variant:
        torch, sep, accelerator = key.partition("+")
        if not sep:
            raise ValueError(f"{key!r} is not TORCH+ACCELERATOR, e.g. '2.11.0+cu130'")
        return cls(torch=torch, accelerator=accelerator)

    @property
    def key(self) -> str:
        return f"{self.torch}+{self.accelerator}"

    @property
    def page(self) -> str:
        """The find-links page, relative to the site root."""
        return f"torch-{self.key}.html"

    @property
    def index_dir(self) -> str:
        """The per-variant PEP 503 root, relative to the site root."""
        return f"torch-{self.key}"

    def sort_key(self) -> tuple[Any, ...]:
        try:
            torch: Any = (0, Version(self.torch))
        except InvalidVersion:
            torch = (1, self.torch)
        try:
            acc = Accelerator.parse(self.accelerator)
            kind = ("cpu", "cuda", "rocm").index(acc.kind)
            accel: Any = (kind, Version(acc.version) if acc.version else Version("0"))
        except ValueError:
            accel = (3, Version("0"), self.accelerator)
        return (torch, accel, self.accelerator)


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

    @property
    def project(self) -> str:
        return canonicalize_name(self.name)

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
        }

    @classmethod
    def from_json(cls, raw: Any) -> IndexedWheel:
        if not isinstance(raw, dict):
            raise ValueError("a wheel entry is not an object")
        strings = ("filename", "sha256", "name", "version", "metadata_sha256", "torch")
        for key in (*strings, "accelerator"):
            if not isinstance(raw.get(key), str):
                raise ValueError(f"{raw.get('filename', '?')}: {key}: expected a string")
        for key in ("requires_python", "torch_specifier", "url", "fingerprint"):
            if raw.get(key) is not None and not isinstance(raw[key], str):
                raise ValueError(f"{raw['filename']}: {key}: expected a string or null")
        versions = raw.get("torch_versions")
        if not isinstance(versions, list) or not all(isinstance(v, str) for v in versions):
            raise ValueError(f"{raw['filename']}: torch_versions: expected a list of strings")
        size = raw.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"{raw['filename']}: size: expected a whole number")
        # the manifest may come back from a published site: nothing in it is trusted
        check_wheel_filename(raw["filename"], what=f"{MANIFEST_NAME} entry")
        for key in ("sha256", "metadata_sha256"):
            if not _SHA256_RE.fullmatch(raw[key]):
                raise ValueError(f"{raw['filename']}: {key}: expected 64 hexadecimal digits")
        url = raw.get("url")
        if url is not None and not _SAFE_URL_RE.fullmatch(url):
            raise ValueError(
                f"{raw['filename']}: url: {url!r} is not an http(s) URL without quotes or spaces"
            )
        return cls(
            filename=raw["filename"],
            sha256=raw["sha256"],
            size=size,
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
        )


@dataclass(frozen=True, kw_only=True)
class WheelSource:
    """A wheel to publish: its record, where it is, and its METADATA bytes (PEP 658)."""

    wheel: IndexedWheel
    path: Path
    metadata: bytes


@dataclass(frozen=True, kw_only=True)
class IndexSettings:
    """How pages link and alias (matrix.yaml `index:`, overridden by CLI options)."""

    base_url: str | None = None
    wheel_url: str | None = None
    alias_patches: bool = True
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.base_url is not None:
            object.__setattr__(self, "base_url", self.base_url.rstrip("/") or None)


# -- reading wheels -------------------------------------------------------------------------


def _sha256(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _dist_info(names: Iterable[str]) -> str | None:
    found = {
        n.split("/", 1)[0]
        for n in names
        if n.count("/") == 1
        and n.endswith("/METADATA")
        and n.split("/", 1)[0].endswith(".dist-info")
    }
    return found.pop() if len(found) == 1 else None


def _torch_spec(requires: Iterable[str]) -> str | None:
    """The unconditional torch requirement of METADATA's Requires-Dist, as one specifier."""
    specs: list[str] = []
    for value in requires:
        try:
            req = Requirement(value)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) == "torch" and (
            req.marker is None or "extra" not in str(req.marker)
        ):
            specs.append(str(req.specifier))
    return ",".join(s for s in specs if s) or None


def wheel_url(template: str, wheel: IndexedWheel) -> str:
    """Fill a `--wheel-url` template for one wheel."""
    return template.format(
        filename=quote(wheel.filename, safe=""),
        project=wheel.project,
        version=wheel.version,
        public_version=Version(wheel.version).public,
    )


def read_wheel(path: Path, *, wheel_url_template: str | None = None) -> WheelSource:
    """Hash `path` and read its METADATA and build record; PublishError names what is wrong."""
    try:
        wname = WheelName.parse(path.name)
        sha, size = _sha256(path)
        with zipfile.ZipFile(path) as zf:
            check_member_names(zf.namelist(), what=path.name)  # a zip-slip wheel is refused
            dist_info = _dist_info(zf.namelist())
            if dist_info is None:
                raise ValueError("no single top-level *.dist-info/METADATA; is it a wheel?")
            metadata = zf.read(f"{dist_info}/METADATA")
            try:
                raw_record = zf.read(f"{dist_info}/{BUILD_RECORD_NAME}")
            except KeyError:
                raise ValueError(
                    f"no {dist_info}/{BUILD_RECORD_NAME}: the index needs the build record "
                    "`buildtools build` writes (torch version, accelerator)"
                ) from None
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise PublishError(f"{path}: {exc}") from exc
    try:
        record = json.loads(raw_record)
    except ValueError as exc:
        raise PublishError(f"{path}: {BUILD_RECORD_NAME} is not valid JSON: {exc}") from exc
    problems = validate_build_record(record) if isinstance(record, dict) else ["not an object"]
    if problems:
        raise PublishError(f"{path}: {BUILD_RECORD_NAME}: " + "; ".join(problems))
    headers = BytesHeaderParser().parsebytes(metadata)
    name, version = str(headers.get("Name", "")).strip(), str(headers.get("Version", "")).strip()
    try:
        consistent = canonicalize_name(name) == canonicalize_name(wname.name) and Version(
            version
        ) == Version(wname.version)
        torch = Version(str(record["torch"])).public
        versions = record.get("torch_versions") or [torch]
        torch_versions = tuple(sorted({Version(str(v)).public for v in versions}, key=Version))
        Accelerator.parse(str(record["accelerator"]))
    except (InvalidVersion, ValueError) as exc:
        raise PublishError(f"{path}: {exc}") from exc
    if not consistent:
        raise PublishError(
            f"{path}: METADATA says {name} {version}, the file name {wname.name} "
            f"{wname.version}; pip refuses such a wheel"
        )
    requires_python = headers.get("Requires-Python")
    wheel = IndexedWheel(
        filename=path.name,
        sha256=sha,
        size=size,
        name=name,
        version=version,
        requires_python=str(requires_python).strip() if requires_python else None,
        metadata_sha256=hashlib.sha256(metadata).hexdigest(),
        torch=torch,
        torch_versions=torch_versions,
        torch_specifier=_torch_spec(str(v) for v in headers.get_all("Requires-Dist", [])),
        accelerator=str(record["accelerator"]),
        fingerprint=record["fingerprint"] if isinstance(record.get("fingerprint"), str) else None,
    )
    if wheel_url_template is not None:
        wheel = replace(wheel, url=wheel_url(wheel_url_template, wheel))
    return WheelSource(wheel=wheel, path=path, metadata=metadata)


def collect_wheels(paths: Sequence[Path]) -> list[Path]:
    """The wheels named, and every `*.whl` directly inside the directories named; sorted."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(path.glob("*.whl"))
        elif path.is_file() and path.name.endswith(".whl"):
            found.append(path)
        else:
            raise PublishError(f"{path}: no such wheel or directory")
    return found


# -- merge ----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """What a site publishes: its wheels and the files the last publish generated."""

    wheels: tuple[IndexedWheel, ...] = ()
    generated: tuple[str, ...] = ()

    def to_json(self) -> str:
        """One wheel per line (diffs stay readable); json's C encoder does each line."""

        def line(value: Any) -> str:
            return json.dumps(value, sort_keys=True, ensure_ascii=False)

        wheels = ",\n  ".join(line(w.to_json()) for w in self.wheels)
        generated = ",\n  ".join(line(g) for g in self.generated)
        return (
            f'{{\n "schema": {line(INDEX_SCHEMA)},\n'
            f' "wheels": [\n  {wheels}\n ],\n'
            f' "generated": [\n  {generated}\n ]\n}}\n'
        )


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
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("schema") != INDEX_SCHEMA:
            raise ValueError(f"schema is not {INDEX_SCHEMA!r}")
        wheels = tuple(IndexedWheel.from_json(w) for w in data.get("wheels", []))
        generated = data.get("generated", [])
        if not isinstance(generated, list) or not all(isinstance(g, str) for g in generated):
            raise ValueError("generated: expected a list of paths")
        for rel in generated:
            safe_join(site, rel, what=f"{MANIFEST_NAME} generated file")
    except (OSError, ValueError) as exc:
        raise PublishError(f"{path}: {exc}") from exc
    return Manifest(wheels=wheels, generated=tuple(generated))


@dataclass(frozen=True, kw_only=True)
class MergeResult:
    wheels: tuple[IndexedWheel, ...]  # everything the new site lists, sorted by file name
    added: tuple[WheelSource, ...]
    unchanged: tuple[str, ...]


def merge(published: Sequence[IndexedWheel], new: Sequence[WheelSource]) -> MergeResult:
    """The published wheels plus the new ones; the same name with other bytes is an error."""
    by_name = {w.filename: w for w in published}
    added: dict[str, WheelSource] = {}
    unchanged: set[str] = set()
    conflicts: list[str] = []
    for src in new:
        name, sha = src.wheel.filename, src.wheel.sha256
        old = by_name.get(name)
        if old is not None:
            if old.sha256 != sha:
                conflicts.append(
                    f"{name}: published with sha256 {old.sha256}, the new file ({src.path}) "
                    f"has sha256 {sha}"
                )
            else:
                unchanged.add(name)
            continue
        other = added.get(name)
        if other is not None and other.wheel.sha256 != sha:
            conflicts.append(
                f"{name}: two inputs differ: {other.path} has sha256 {other.wheel.sha256}, "
                f"{src.path} has sha256 {sha}"
            )
            continue
        added.setdefault(name, src)
    if conflicts:
        raise ImmutableWheelError(
            "published wheels are immutable; nothing was written:\n  "
            + "\n  ".join(conflicts)
            + "\n(bump the version, or rebuild exactly the published wheel)"
        )
    merged = sorted([*published, *(s.wheel for s in added.values())], key=lambda w: w.filename)
    return MergeResult(
        wheels=tuple(merged),
        added=tuple(added[n] for n in sorted(added)),
        unchanged=tuple(sorted(unchanged)),
    )


# -- pages ----------------------------------------------------------------------------------


class _Aliases:
    """Which pages list a wheel, with the knowledge look-ups and specifier checks cached."""

    def __init__(self, settings: IndexSettings, kb: Knowledge) -> None:
        self.settings = settings
        self.kb = kb
        self._patches: dict[str, tuple[str, ...]] = {}
        self._admits: dict[tuple[str, str], bool] = {}

    def patches(self, torch: str) -> tuple[str, ...]:
        if torch not in self._patches:
            try:
                self._patches[torch] = self.kb.torch_release(torch).patches
            except (LookupError, ValueError):
                self._patches[torch] = ()
        return self._patches[torch]

    def admits(self, specifier: str, torch: str) -> bool:
        key = (specifier, torch)
        if key not in self._admits:
            try:
                spec = SpecifierSet(specifier)
            except InvalidSpecifier:
                spec = SpecifierSet()
            self._admits[key] = spec.contains(torch, prereleases=True)
        return self._admits[key]

    def variants(self, wheel: IndexedWheel) -> set[Variant]:
        found = {Variant(torch=t, accelerator=wheel.accelerator) for t in wheel.torch_versions}
        if self.settings.alias_patches:
            spec = wheel.torch_specifier or ""
            for torch in wheel.torch_versions:
                for patch in self.patches(torch):
                    if self.admits(spec, patch):
                        found.add(Variant(torch=patch, accelerator=wheel.accelerator))
        for variant in list(found):
            for target in self.settings.aliases.get(variant.key, ()):
                found.add(Variant.parse(target))
        return found


def wheel_variants(
    wheel: IndexedWheel, settings: IndexSettings, kb: Knowledge
) -> tuple[Variant, ...]:
    """The pages that list `wheel`: its torch versions, their patch aliases, extra aliases.

    A patch alias is added only when the wheel's own `Requires-Dist: torch…` admits it.
    """
    return tuple(sorted(_Aliases(settings, kb).variants(wheel), key=Variant.sort_key))


def _python_tags(wheels: Iterable[IndexedWheel]) -> tuple[str, ...]:
    tags = {t for w in wheels for t in WheelName.parse(w.filename).python.split(".")}
    return tuple(sorted(tags, key=lambda t: (len(t), t)))


def render_site(
    wheels: Sequence[IndexedWheel], settings: IndexSettings, kb: Knowledge
) -> dict[str, bytes]:
    """Every generated file of the site (pages and manifest), path → bytes; pure."""
    wheels = sorted(wheels, key=lambda w: w.filename)
    base = settings.base_url
    aliases = _Aliases(settings, kb)
    # each wheel's <a> line is made once per depth, then shared by every page listing it
    top = wheels_prefix(base, 0)
    nested = wheels_prefix(base, 2)
    flat: dict[str, str] = {}
    deep: dict[str, str] = {}
    pages: dict[Variant, list[IndexedWheel]] = defaultdict(list)
    for w in wheels:
        target = w.link()
        flat[w.filename] = anchor(target, top)
        deep[w.filename] = anchor(target, nested)
        for variant in aliases.variants(w):
            pages[variant].append(w)
    files: dict[str, str] = {}
    rows: list[LandingRow] = []
    for variant in sorted(pages, key=Variant.sort_key):
        listed = pages[variant]
        title = f"torch {variant.key}"
        files[variant.page] = render_find_links(title, [flat[w.filename] for w in listed])
        by_project: dict[str, list[IndexedWheel]] = defaultdict(list)
        for w in listed:
            by_project[w.project].append(w)
        root = variant.index_dir
        files[f"{root}/index.html"] = render_simple_root(title, sorted(by_project))
        for project in sorted(by_project):
            group = by_project[project]
            files[f"{root}/{project}/index.html"] = render_simple_project(
                f"{project} for torch {variant.key}", [deep[w.filename] for w in group]
            )
            versions = sorted({w.version for w in group}, key=Version, reverse=True)
            rows.append(
                LandingRow(
                    torch=variant.torch,
                    accelerator=variant.accelerator,
                    project=project,
                    versions=tuple(versions),
                    pythons=_python_tags(group),
                    page=variant.page,
                    index=f"{root}/",
                )
            )
    all_projects: dict[str, list[IndexedWheel]] = defaultdict(list)
    for w in wheels:
        all_projects[w.project].append(w)
    files[f"{SIMPLE_DIR}/index.html"] = render_simple_root("Simple index", sorted(all_projects))
    for project, group in sorted(all_projects.items()):
        files[f"{SIMPLE_DIR}/{project}/index.html"] = render_simple_project(
            f"Links for {project}", [deep[w.filename] for w in group]
        )
    files["index.html"] = render_landing(
        "Wheels by torch and accelerator", rows, base_url=base, total_wheels=len(wheels)
    )
    files[".nojekyll"] = ""  # GitHub Pages: serve the files as they are
    out = {path: text.encode("utf-8") for path, text in sorted(files.items())}
    manifest = Manifest(wheels=tuple(wheels), generated=tuple(sorted(out)))
    out[MANIFEST_NAME] = manifest.to_json().encode("utf-8")
    return out


# -- publish --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PublishResult:
    site: Path
    added: tuple[str, ...]
    unchanged: tuple[str, ...]
    held_back: tuple[tuple[str, str], ...]  # (file name, reason)
    pages: tuple[str, ...]  # find-links pages
    wheels: int  # wheels the site lists now
    written: bool


def _check_foreign(site: Path, added: Sequence[WheelSource]) -> None:
    """A new hosted wheel must not replace a file the site serves outside the manifest."""
    clashes = []
    for src in added:
        if src.wheel.url is not None:
            continue
        existing = site / WHEELS_DIR / src.wheel.filename
        if existing.is_file():
            sha, _ = _sha256(existing)
            if sha != src.wheel.sha256:
                clashes.append(
                    f"{existing}: served (not in {MANIFEST_NAME}) with sha256 {sha}, "
                    f"the new file ({src.path}) has sha256 {src.wheel.sha256}"
                )
    if clashes:
        raise ImmutableWheelError(
            "published files are immutable; nothing was written:\n  " + "\n  ".join(clashes)
        )


def publish(
    site: Path,
    sources: Sequence[WheelSource],
    settings: IndexSettings,
    kb: Knowledge,
    *,
    gate: SmokeGate | None = None,
    dry_run: bool = False,
    exchange: Exchange = exchange_dirs,
    fault: Fault | None = None,
) -> PublishResult:
    """Merge `sources` into the site at `site` and swap the new site in atomically."""
    held: list[tuple[str, str]] = []
    passing: list[WheelSource] = []
    for src in sources:
        reason = gate.verdict(src.wheel.sha256) if gate is not None else None
        if reason is None:
            passing.append(src)
        else:
            held.append((src.wheel.filename, reason))
    site = site.absolute()

    def decide() -> tuple[Manifest, MergeResult, dict[str, bytes], PublishResult]:
        manifest = read_manifest(site)
        result = merge(manifest.wheels, passing)
        _check_foreign(site, result.added)
        files = render_site(result.wheels, settings, kb)
        outcome = PublishResult(
            site=site,
            added=tuple(s.wheel.filename for s in result.added),
            unchanged=result.unchanged,
            held_back=tuple(sorted(held)),
            pages=tuple(p for p in files if p.startswith("torch-") and "/" not in p),
            wheels=len(result.wheels),
            written=not dry_run,
        )
        return manifest, result, files, outcome

    if dry_run:
        return decide()[3]
    with site_transaction(site, exchange=exchange, fault=fault) as txn:
        manifest, result, files, outcome = decide()  # under the lock: nobody else publishes
        replaced = set(manifest.generated) | set(files)
        new_hosted = {f"{WHEELS_DIR}/{s.wheel.filename}" for s in result.added if not s.wheel.url}
        replaced |= new_hosted | {f"{p}.metadata" for p in new_hosted}
        kept = set(txn.carry_over(lambda rel: rel not in replaced))
        txn.fault("carried-over")
        missing = [
            rel
            for w in manifest.wheels
            if w.url is None
            for rel in (f"{WHEELS_DIR}/{w.filename}", f"{WHEELS_DIR}/{w.filename}.metadata")
            if rel not in kept
        ]
        if missing:
            raise PublishError(
                f"{site} is damaged: {MANIFEST_NAME} lists files that are missing: "
                + ", ".join(missing[:5])
                + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            )
        for src in result.added:
            if src.wheel.url is None:
                rel = f"{WHEELS_DIR}/{src.wheel.filename}"
                txn.copy_in(rel, src.path, sha256=src.wheel.sha256)
                txn.write(f"{rel}.metadata", src.metadata)
        txn.fault("wheels-copied")
        for rel, data in files.items():
            txn.write(rel, data)
        txn.fault("pages-written")
        txn.commit()
    return outcome
