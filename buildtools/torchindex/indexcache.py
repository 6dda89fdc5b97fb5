"""Asking the package index about torch, with a cache: the page for a while, METADATA forever.

The simple page changes when torch releases, so its cached copy has an age limit
(`max_age`, one hour by default; 0 asks again every time). A wheel's METADATA never changes
for the same file, so it is read once and kept, under a key of what was verified and where
it came from: METADATA whose bytes matched the index's PEP 658 hash under that hash (the
copy is checked against it again when read, so any index may share it); METADATA read by
byte ranges (nothing verifies it against the wheel's hash) under the index, the file's URL
and the hash the index claims together, so one index's answer never becomes another's.
A cached page too old to use is still the answer when the index cannot be reached and the
caller allows it (`stale_ok`): the planner then says how old its answer is.
"""

from __future__ import annotations

__all__ = ["DEFAULT_MAX_AGE", "IndexReader", "PageAnswer"]

import contextlib
import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import NetworkError
from ..files import write_atomic
from ..http import Http
from ..jsonfields import decode_json
from .remote import read_metadata
from .simple import SIMPLE_JSON, IndexFile, ProjectPage, parse_simple_json

DEFAULT_MAX_AGE = 3600.0
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, kw_only=True)
class PageAnswer:
    """A project page and how fresh it is."""

    page: ProjectPage
    fetched: float  # seconds since the epoch
    from_cache: bool
    stale: bool = False  # older than max_age: the index could not be asked


class IndexReader:
    """Reads one index's pages and METADATA through `http`, caching under `cache_dir`."""

    def __init__(
        self,
        http: Http,
        *,
        index_url: str,
        cache_dir: Path | None,
        max_age: float = DEFAULT_MAX_AGE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.http = http
        self.index_url = index_url.rstrip("/")
        self.cache_dir = cache_dir / "package-index" if cache_dir is not None else None
        self.max_age = max_age
        self.clock = clock
        self.requests = 0  # what this reader asked the index (the cache answered the rest)

    def page_url(self, project: str) -> str:
        return f"{self.index_url}/{project}/"

    def _page_cache(self, url: str) -> Path | None:
        if self.cache_dir is None:
            return None
        return self.cache_dir / "pages" / (hashlib.sha256(url.encode()).hexdigest()[:32] + ".json")

    def _cached_page(self, path: Path | None, url: str, project: str) -> PageAnswer | None:
        if path is None or not path.is_file():
            return None
        try:
            raw = decode_json(path.read_bytes(), what=path.name)
            fetched = float(raw["fetched"])
            body = str(raw["body"]).encode()
            if raw.get("url") != url:
                return None
            page = parse_simple_json(body, url=url, project=project)
        except (OSError, ValueError, KeyError, TypeError, NetworkError):
            return None  # a damaged cache entry is asked again, never trusted
        return PageAnswer(page=page, fetched=fetched, from_cache=True)

    def page(self, project: str, *, stale_ok: bool = False) -> PageAnswer:
        """The project's page: from the cache while younger than max_age, else the index."""
        url = self.page_url(project)
        path = self._page_cache(url)
        cached = self._cached_page(path, url, project)
        now = self.clock()
        if cached is not None and 0 <= now - cached.fetched < self.max_age:
            return cached
        try:
            self.requests += 1
            answer = self.http.get(url, accept=SIMPLE_JSON, max_bytes=64 << 20)
            page = parse_simple_json(answer.body, url=url, project=project)
        except NetworkError:
            if stale_ok and cached is not None:
                return PageAnswer(
                    page=cached.page, fetched=cached.fetched, from_cache=True, stale=True
                )
            raise
        if path is not None:
            try:
                record = {"url": url, "fetched": now, "body": answer.body.decode()}
                write_atomic(path, json.dumps(record))
            except (OSError, UnicodeDecodeError):
                pass  # a cache that cannot be written costs a request next time, nothing else
        return PageAnswer(page=page, fetched=now, from_cache=False)

    def _metadata_cache(self, file: IndexFile) -> tuple[Path, str | None] | None:
        """(where a wheel's METADATA is cached, the sha256 its bytes must have or None)."""
        if self.cache_dir is None:
            return None
        verified = file.core_metadata_sha256
        if file.core_metadata and verified is not None and _SHA256_RE.match(verified):
            return self.cache_dir / "metadata" / f"{verified}.METADATA", verified
        source = "\n".join((self.index_url, file.url, file.sha256))
        key = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
        return self.cache_dir / "metadata" / "by-source" / f"{key}.METADATA", None

    def metadata(self, file: IndexFile) -> str:
        """A wheel's METADATA (PEP 658 or range reads), cached by what verified it and where
        it came from (see the module)."""
        cached = self._metadata_cache(file)
        if cached is not None and cached[0].is_file():
            path, digest = cached
            try:
                raw = path.read_bytes()
                if digest is None or hashlib.sha256(raw).hexdigest() == digest:
                    return raw.decode("utf-8")
            except (OSError, UnicodeDecodeError):
                pass  # a damaged cache entry is asked again, never trusted
        self.requests += 1
        text = read_metadata(file, self.http)
        if cached is not None:
            with contextlib.suppress(OSError):
                write_atomic(cached[0], text)
        return text
