"""A real-world corpus extension's sdist for the benchmarks, pinned by tests/realworld/corpus.py.

The pin (file name and sha256) lives in the corpus, once; the sdist is read from the cache the
corpus tests use (`<cache>/realworld/sdists`), else downloaded from the package index's
JSON simple API (PEP 691) through buildtools' bounded HTTP client and kept only if its
sha256 is the pinned one. Unpacked with tarfile's "data" filter (no links out, no devices).

    python bench/corpus.py xformers /tmp/x     # prints the unpacked source tree
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tarfile
import tempfile
from pathlib import Path

from buildtools.cachedir import default_cache_dir
from buildtools.http import HttpClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from realworld.corpus import CORPUS, Extension  # noqa: E402  (the pins, in one place)

INDEX = "https://pypi.org/simple"
MAX_SDIST = 256 * 1024 * 1024
MAX_PAGE = 16 * 1024 * 1024


def extension(name: str) -> Extension:
    for ext in CORPUS:
        if name in (ext.name, ext.module):
            return ext
    known = ", ".join(e.name for e in CORPUS)
    raise SystemExit(f"{name}: not in the corpus (tests/realworld/corpus.py: {known})")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sdist(ext: Extension) -> Path:
    """The pinned sdist, from the cache or the index; a hash mismatch is an error."""
    cached = default_cache_dir(os.environ) / "realworld" / "sdists" / ext.sdist
    if cached.is_file() and _sha256(cached) == ext.sha256:
        return cached
    client = HttpClient()
    page = client.get(
        f"{INDEX}/{ext.name}/",
        max_bytes=MAX_PAGE,
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
    )
    files = json.loads(page).get("files", [])
    urls = [f.get("url") for f in files if isinstance(f, dict) and f.get("filename") == ext.sdist]
    if not urls or not isinstance(urls[0], str):
        raise SystemExit(f"{INDEX}/{ext.name}/ lists no {ext.sdist}")
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cached.parent) as tmp:
        part = Path(tmp) / ext.sdist
        client.download(urls[0], part, max_bytes=MAX_SDIST)
        got = _sha256(part)
        if got != ext.sha256:
            raise SystemExit(f"{urls[0]}: sha256 {got}, pinned {ext.sha256}; not used")
        part.replace(cached)
    return cached


def unpacked(ext: Extension, dest: Path) -> Path:
    """The sdist unpacked under `dest`: its one top-level directory."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist(ext)) as tar:
        tar.extractall(dest, filter="data")
    (src,) = [p for p in dest.iterdir() if p.is_dir()]
    return src


if __name__ == "__main__":
    print(unpacked(extension(sys.argv[1]), Path(sys.argv[2])))
