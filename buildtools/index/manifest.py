"""`index.json`: the published wheels of a site, the one record merging trusts.

The HTML pages are generated from it and never read back; a wheel it lists stays listed
with the same sha256 forever (see `merge`).
"""

from __future__ import annotations

__all__ = ["INDEX_SCHEMA", "MANIFEST_NAME", "IndexedWheel", "Manifest", "read_manifest"]

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from ..errors import PublishError
from ..files import check_wheel_filename, safe_join
from .pages import LinkTarget

INDEX_SCHEMA = "torch-buildtools/index/v1"
MANIFEST_NAME = "index.json"
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_SAFE_URL_RE = re.compile(r"https?://[^\s\"'<>\\`]+")


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
