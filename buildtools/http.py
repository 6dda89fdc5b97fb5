"""The one chokepoint through which buildtools reads over HTTP (the package index, a site).

Like `runner.Runner` for processes: readers receive an `Http`, tests pass a fake that
answers from recorded bytes (`tests/fixtures/pypi/`), and nothing else opens a socket.

Every request has a deadline (`timeout`), a cap on the bytes it reads (an answer is hostile
until checked: a page that never ends must not fill the memory), and a scheme check (https,
http, file). A range request (`byte_range`) is how a wheel's METADATA is read without the
wheel: a server that ignores the range (200 instead of 206) is refused, never read whole.
"""

from __future__ import annotations

__all__ = ["DEFAULT_TIMEOUT", "Http", "HttpResponse", "UrllibHttp"]

import email.message
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from . import __version__
from .errors import NetworkError

DEFAULT_TIMEOUT = 30.0
_SCHEMES = ("https", "http", "file")


@dataclass(frozen=True, kw_only=True)
class HttpResponse:
    """A complete answer: status, headers (lower-case names) and the body read."""

    url: str
    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


class Http(Protocol):
    """Reads one URL. `byte_range` is (start, end) inclusive, or (-n, None) for the last n."""

    def get(
        self,
        url: str,
        *,
        accept: str | None = None,
        byte_range: tuple[int, int | None] | None = None,
        max_bytes: int = 64 << 20,
    ) -> HttpResponse: ...


def range_header(byte_range: tuple[int, int | None]) -> str:
    """'bytes=START-END', or 'bytes=-N' for the last N bytes."""
    start, end = byte_range
    if start < 0:
        return f"bytes={start}"
    return f"bytes={start}-{'' if end is None else end}"


def check_url(url: str) -> str:
    """The URL when its scheme is one buildtools reads, else NetworkError naming it."""
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in _SCHEMES:
        raise NetworkError(f"{url}: only {', '.join(_SCHEMES)} URLs are read (got {scheme!r})")
    return url


class UrllibHttp:
    """The standard library's client, with a deadline and a size cap per request.

    Certificates: the default SSL context, so SSL_CERT_FILE and the system store apply.
    """

    def __init__(self, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.timeout = timeout

    def get(
        self,
        url: str,
        *,
        accept: str | None = None,
        byte_range: tuple[int, int | None] | None = None,
        max_bytes: int = 64 << 20,
    ) -> HttpResponse:
        if check_url(url).startswith("file:"):
            return _get_file(url, byte_range=byte_range, max_bytes=max_bytes)
        headers = {"User-Agent": f"torch-buildtools/{__version__}"}
        if accept:
            headers["Accept"] = accept
        if byte_range is not None:
            headers["Range"] = range_header(byte_range)
        request = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                status = int(getattr(resp, "status", 200) or 200)
                if byte_range is not None and status != 206:
                    raise NetworkError(
                        f"{url}: the server ignored the byte range (status {status}); "
                        "refusing to read the whole file"
                    )
                body = resp.read(max_bytes + 1)
                meta: email.message.Message = resp.headers
                answer = {k.lower(): v for k, v in meta.items()}
        except urllib.error.HTTPError as exc:
            raise NetworkError(f"{url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise NetworkError(
                f"{url}: unreachable ({reason}); check the network or the proxy settings"
            ) from None
        if len(body) > max_bytes:
            raise NetworkError(f"{url}: the answer is larger than {max_bytes} bytes; refused")
        return HttpResponse(url=url, status=status, body=body, headers=answer)


def _get_file(
    url: str, *, byte_range: tuple[int, int | None] | None, max_bytes: int
) -> HttpResponse:
    """A file: URL (a site on disk), ranges applied the way a server would."""
    path = urllib.request.url2pathname(urllib.parse.urlsplit(url).path)
    try:
        with open(path, "rb") as fh:  # noqa: PTH123 (a path from a URL, not a Path)
            size = fh.seek(0, 2)
            start, end = 0, size - 1
            if byte_range is not None:
                start, stop = byte_range
                start = max(size + start, 0) if start < 0 else start
                end = size - 1 if stop is None or byte_range[0] < 0 else min(stop, size - 1)
            fh.seek(start)
            body = fh.read(min(end - start + 1, max_bytes + 1))
    except OSError as exc:
        raise NetworkError(f"{url}: cannot read ({exc.strerror})") from None
    if len(body) > max_bytes:
        raise NetworkError(f"{url}: the answer is larger than {max_bytes} bytes; refused")
    return HttpResponse(url=url, status=206 if byte_range else 200, body=body)
