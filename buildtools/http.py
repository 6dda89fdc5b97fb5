"""The one chokepoint through which buildtools reads over HTTP: the package index, a
published site, GitHub's API, a find-links page.

Readers of the package index receive an `Http` (the protocol; `UrllibHttp` is the real
one, named for what it first used), and tests pass a fake that answers from recorded bytes
(`tests/fixtures/fakehttp.py`); downloads into files, the GitHub API and the smoke's
find-links pages use `HttpClient` directly. Both are this module's one transport, and
nothing else opens a socket. The other end can be slow, broken or hostile, and these
requests run in release jobs, so:

- only http and https URLs (and `file:` for `Http.get`: a site on disk), without
  credentials in them; a redirect is followed at most `HttpLimits.redirects` times and only
  to http(s) (never `ftp:` or `file:`), and headers given as secret (a token) are never
  sent after one;
- every request has a total deadline, from connecting to the last byte
  (`request_seconds`, or the call's `seconds`), enforced by a watchdog that shuts the
  connection down: a server sending one byte every 2 s cannot keep a job alive, however
  long each socket read stays under the socket timeout; and a client has a deadline for
  all its requests together (`run_seconds`), so retries cannot add up to hours;
- every body has a byte cap given by the caller (a `Content-Length` above it is refused
  before the body is read; a longer body, chunked or not, is cut off at the cap; a shorter
  one than announced is an error, not an answer);
- a protocol error (a bad status line, more than 100 headers, an over-long header, a
  broken chunk, a connection closed early) is one `DownloadError` line (a `NetworkError`)
  naming the URL;
- a 5xx or 429 answer and a dropped connection are tried again (`attempts`, `pause`),
  within the client's deadline; a 404 or 410 is `NotFound` (callers decide what absence
  means), any other answer an error;
- a range request (`byte_range`: how a wheel's METADATA is read without the wheel) must be
  answered 206: a server that ignores the range is refused, never read whole.

Proxies are taken from the environment (`https_proxy`, `http_proxy`, `no_proxy`).
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_TIMEOUT",
    "HTTP_TIMEOUT_ENV",
    "DownloadError",
    "Http",
    "HttpClient",
    "HttpLimits",
    "HttpRequest",
    "HttpResponse",
    "NotFound",
    "UrllibHttp",
    "check_url",
    "range_header",
]

import base64
import contextlib
import http.client
import math
import os
import socket
import ssl
import stat
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Protocol
from urllib.parse import unquote, urljoin, urlsplit

from . import __version__
from .errors import ConfigError, NetworkError

DEFAULT_TIMEOUT = 30.0
_SCHEMES = ("https", "http", "file")


@dataclass(frozen=True, kw_only=True)
class HttpResponse:
    """A complete answer: status, headers (lower-case names) and the body read (empty when
    it went to a sink)."""

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


class DownloadError(NetworkError):
    """A request failed; the message is one line naming the URL and what went wrong."""

    def __init__(self, message: str, *, url: str, status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status
        self.transient = status is None or status >= 500 or status == 429


class NotFound(DownloadError):
    """The server answered 404 or 410."""


class _Deadline(DownloadError):
    """A deadline passed (never retried: a slow server stays slow)."""


HTTP_TIMEOUT_ENV = "BUILDTOOLS_HTTP_TIMEOUT"
"""Seconds one request may take (default 300), as $BUILDTOOLS_TIMEOUT is for a process."""


@dataclass(frozen=True, kw_only=True)
class HttpLimits:
    """What one client may spend."""

    request_seconds: float = 300.0  # one request, connect to last byte
    run_seconds: float = 3 * 3600.0  # every request of the client, retries included
    socket_seconds: float = 30.0  # one blocking socket operation (connect, one read)
    redirects: int = 5
    attempts: int = 3
    pause: float = 2.0  # seconds before the second attempt; doubled for each next one

    @classmethod
    def from_env(cls, env: Mapping[str, str], **fields: float) -> HttpLimits:
        """The limits, with `request_seconds` from $BUILDTOOLS_HTTP_TIMEOUT when it is set
        (finite, above 0, at most a day; ConfigError otherwise)."""
        text = env.get(HTTP_TIMEOUT_ENV, "")
        if text:
            try:
                value = float(text)
            except ValueError:
                value = math.nan
            if not math.isfinite(value) or not 0 < value <= 24 * 3600:
                raise ConfigError(
                    f"${HTTP_TIMEOUT_ENV}: {text!r} is not a number of seconds above 0 and at "
                    "most a day"
                )
            fields = {"request_seconds": value, **fields}
        return cls(**fields)  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class HttpRequest:
    """One request: what it asks, and what its answer may cost."""

    url: str
    max_bytes: int  # the body's cap
    method: str = "GET"
    headers: Mapping[str, str] = field(default_factory=dict)
    secret_headers: Mapping[str, str] = field(default_factory=dict)  # for `url` only
    body: bytes | IO[bytes] | None = None
    seconds: float | None = None  # this request's deadline (default: the client's)


_REDIRECTS = (301, 302, 303, 307, 308)
_CHUNK = 1 << 16


def _check_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path?query) of an http(s) URL, or DownloadError."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise DownloadError(f"{url}: not a URL ({exc})", url=url, status=0) from None
    if parts.scheme not in ("http", "https"):
        raise DownloadError(
            f"{url}: only http and https URLs are fetched, not {parts.scheme or 'a bare path'}",
            url=url,
            status=0,
        )
    if not parts.hostname or parts.username is not None or parts.password is not None:
        raise DownloadError(f"{url}: needs a host and no credentials", url=url, status=0)
    if any(c in url for c in "\r\n\t ") or any(ord(c) < 0x20 for c in url):
        raise DownloadError(f"{url!r}: has whitespace or a control character", url=url, status=0)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), target


def _shutdown(sock: socket.socket | None) -> None:
    """Wake whatever blocks on `sock` in another thread: shut the connection down through a
    second descriptor (never touching the SSL object the other thread is using)."""
    if sock is None:
        return
    with contextlib.suppress(OSError):
        other = socket.socket(fileno=os.dup(sock.fileno()))
        try:
            other.shutdown(socket.SHUT_RDWR)
        finally:
            other.close()


class HttpClient:
    """The HTTP(S) client with the limits of the module (one per run: its deadline starts
    when it is made). `clock` and `sleep` are injectable for tests."""

    def __init__(
        self,
        limits: HttpLimits | None = None,
        *,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        user_agent: str = "torch-buildtools",
    ) -> None:
        self._env = dict(os.environ if env is None else env)
        self.limits = limits or HttpLimits.from_env(self._env)
        self._clock = clock
        self._sleep = sleep
        self._end = clock() + self.limits.run_seconds
        self._agent = user_agent
        self._context = ssl.create_default_context()

    # -------------------------------------------------------------------- the calls

    def get(self, url: str, *, max_bytes: int, headers: Mapping[str, str] | None = None) -> bytes:
        """The body of `url` (at most `max_bytes`); NotFound or DownloadError."""
        return self.send(HttpRequest(url=url, max_bytes=max_bytes, headers=headers or {})).body

    def download(
        self, url: str, dest: Path, *, max_bytes: int, seconds: float | None = None
    ) -> bool:
        """`url`'s body into `dest` (at most `max_bytes`, within `seconds` or the request
        deadline); False when the server says 404. A failure leaves no partial file."""
        request = HttpRequest(url=url, max_bytes=max_bytes, seconds=seconds)
        try:
            with dest.open("wb") as fh:
                try:
                    self.send(request, sink=fh)
                except OSError as exc:  # writing: a full disk says no file name
                    raise OSError(exc.errno, exc.strerror, os.fspath(dest)) from exc
        except NotFound:
            dest.unlink(missing_ok=True)
            return False
        except BaseException:
            dest.unlink(missing_ok=True)
            raise
        return True

    def send(self, request: HttpRequest, *, sink: IO[bytes] | None = None) -> HttpResponse:
        """`request`, retried while it fails transiently (see the module); the body goes to
        `sink` when given."""
        pause = self.limits.pause
        for attempt in range(1, self.limits.attempts + 1):
            if sink is not None:
                sink.seek(0)
                sink.truncate()
            try:
                return self._follow(request, sink)
            except DownloadError as exc:
                last_try = attempt == self.limits.attempts
                if isinstance(exc, _Deadline) or not exc.transient or last_try:
                    raise
                if self._clock() + pause >= self._end:
                    raise
            self._sleep(pause)
            pause *= 2
        raise AssertionError("unreachable")  # the loop returns or raises

    # -------------------------------------------------------------------- one exchange

    def _follow(self, request: HttpRequest, sink: IO[bytes] | None) -> HttpResponse:
        seconds = request.seconds or self.limits.request_seconds
        deadline = min(self._clock() + seconds, self._end)
        hop = request
        for _hop in range(self.limits.redirects + 1):
            if hop.body is not None and not isinstance(hop.body, bytes):
                hop.body.seek(0)  # sent from its start (again, after a 307/308)
            answer = self._exchange(hop, sink, deadline, seconds)
            if isinstance(answer, HttpResponse):
                return answer
            status, location = answer
            try:
                _check_url(location)
            except DownloadError as exc:
                raise DownloadError(
                    f"{hop.url}: redirected to {exc}", url=request.url, status=0
                ) from None
            # a token is for the host it was given to, never a redirect's; 301/302/303 fetch
            # the redirect, 307/308 repeat the request there
            keep = status in (307, 308) or hop.method in ("GET", "HEAD")
            hop = replace(
                hop,
                url=location,
                secret_headers={},
                method=hop.method if keep else "GET",
                body=hop.body if keep else None,
            )
        raise DownloadError(
            f"{request.url}: more than {self.limits.redirects} redirects",
            url=request.url,
            status=0,
        )

    def _connection(
        self, scheme: str, host: str, port: int, timeout: float
    ) -> tuple[http.client.HTTPConnection, bool, dict[str, str]]:
        """A connection to host:port (through the environment's proxy when one applies),
        whether requests must name the absolute URL (a plain-HTTP proxy), and the headers
        such a proxy needs."""
        proxies = {k.lower(): v for k, v in self._env.items() if k.lower().endswith("_proxy")}
        proxy = proxies.get(f"{scheme}_proxy")
        if proxy and not _bypassed(host, proxies.get("no_proxy", "")):
            p = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
            auth: dict[str, str] = {}
            if p.username is not None:
                token = f"{unquote(p.username)}:{unquote(p.password or '')}".encode()
                auth["Proxy-Authorization"] = "Basic " + base64.b64encode(token).decode()
            if scheme == "https":
                tunnel = http.client.HTTPSConnection(
                    p.hostname or "", p.port or 3128, timeout=timeout, context=self._context
                )
                tunnel.set_tunnel(host, port, headers=auth)
                return tunnel, False, {}
            plain = http.client.HTTPConnection(p.hostname or "", p.port or 3128, timeout=timeout)
            return plain, True, auth
        if scheme == "https":
            secure = http.client.HTTPSConnection(host, port, timeout=timeout, context=self._context)
            return secure, False, {}
        return http.client.HTTPConnection(host, port, timeout=timeout), False, {}

    @contextlib.contextmanager
    def _watchdog(
        self, conn: http.client.HTTPConnection, deadline: float
    ) -> Iterator[threading.Event]:
        fired = threading.Event()

        def fire() -> None:
            fired.set()
            _shutdown(conn.sock)

        timer = threading.Timer(max(deadline - self._clock(), 0.0), fire)
        timer.daemon = True
        timer.start()
        try:
            yield fired
        finally:
            timer.cancel()

    def _exchange(
        self, request: HttpRequest, sink: IO[bytes] | None, deadline: float, seconds: float
    ) -> HttpResponse | tuple[int, str]:
        """One request and its answer: a Response, or a redirect's status and location."""
        url, method, body = request.url, request.method, request.body
        headers = {**request.headers, **request.secret_headers}
        scheme, host, port, target = _check_url(url)
        left = deadline - self._clock()
        if left <= 0:
            raise _Deadline(f"{url}: the time for downloads ran out", url=url)
        conn, absolute, extra = self._connection(
            scheme, host, port, min(self.limits.socket_seconds, left)
        )
        with self._watchdog(conn, deadline) as fired:
            try:
                all_headers = {"User-Agent": self._agent, **extra, **headers}
                conn.request(method, url if absolute else target, body=body, headers=all_headers)
                resp = conn.getresponse()
                if resp.status in _REDIRECTS:
                    location = resp.getheader("Location")
                    if not location:
                        raise DownloadError(
                            f"{url}: HTTP {resp.status} without a Location", url=url, status=0
                        )
                    return resp.status, urljoin(url, location.strip())
                if resp.status in (404, 410):
                    raise NotFound(f"{url}: HTTP {resp.status}", url=url, status=resp.status)
                if resp.status >= 400:
                    detail = resp.read(500).decode("utf-8", "replace").strip().splitlines()
                    said = f": {detail[0][:200]}" if detail else ""
                    raise DownloadError(
                        f"{url}: HTTP {resp.status} {resp.reason}{said}",
                        url=url,
                        status=resp.status,
                    )
                answer = self._body(url, resp, sink, request.max_bytes, deadline)
                if fired.is_set():  # cut off by the watchdog: what came is not the answer
                    raise OSError("the connection was shut at the deadline")
                return answer
            except DownloadError:
                raise
            except (http.client.HTTPException, OSError, ValueError) as exc:
                if fired.is_set() or self._clock() >= deadline:
                    raise _Deadline(
                        f"{url}: no complete answer within {seconds:g} s (the deadline of "
                        "one request; a server that slow is not waited for)",
                        url=url,
                    ) from None
                what = (str(exc) or type(exc).__name__).splitlines()[0][:300]
                # a dropped connection may work next time; a malformed answer will not
                dropped = isinstance(exc, (OSError, http.client.IncompleteRead))
                raise DownloadError(
                    f"{url}: {type(exc).__name__}: {what}", url=url, status=None if dropped else 0
                ) from None
            finally:
                conn.close()

    def _body(
        self,
        url: str,
        resp: http.client.HTTPResponse,
        sink: IO[bytes] | None,
        max_bytes: int,
        deadline: float,
    ) -> HttpResponse:
        length = resp.getheader("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) > max_bytes:
            raise DownloadError(
                f"{url}: {int(length):,} bytes announced, more than the {max_bytes:,} allowed",
                url=url,
                status=0,
            )
        announced = int(length) if length is not None and length.strip().isdigit() else None
        parts: list[bytes] = []
        seen = 0
        while chunk := resp.read(_CHUNK):
            seen += len(chunk)
            if seen > max_bytes:
                raise DownloadError(
                    f"{url}: more than the {max_bytes:,} bytes allowed", url=url, status=0
                )
            if self._clock() >= deadline:
                raise _Deadline(f"{url}: no complete answer within its deadline", url=url)
            if sink is not None:
                sink.write(chunk)
            else:
                parts.append(chunk)
        if announced is not None and seen < announced:  # http.client returns short reads
            raise DownloadError(
                f"{url}: the connection closed after {seen:,} of the {announced:,} bytes announced",
                url=url,
            )
        headers = {k.lower(): v for k, v in resp.getheaders()}
        return HttpResponse(url=url, status=resp.status, headers=headers, body=b"".join(parts))


def _bypassed(host: str, no_proxy: str) -> bool:
    """Whether `no_proxy` (comma-separated hosts, domains, or `*`) exempts `host`."""
    host = host.lower().rstrip(".")
    for entry in (e.strip().lower().lstrip(".") for e in no_proxy.split(",")):
        if entry == "*" or (entry and (host == entry or host.endswith(f".{entry}"))):
            return True
    return False


class UrllibHttp:
    """`Http` over `HttpClient` (the name is what it first used): one attempt per read (a
    reader of the package index has its own cache and fallbacks), `timeout` the deadline of
    the whole request."""

    def __init__(self, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.timeout = timeout
        self._client = HttpClient(
            HttpLimits(request_seconds=timeout, attempts=1),
            user_agent=f"torch-buildtools/{__version__}",
        )

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
        headers = {}
        if accept:
            headers["Accept"] = accept
        if byte_range is not None:
            headers["Range"] = range_header(byte_range)
        answer = self._client.send(HttpRequest(url=url, max_bytes=max_bytes, headers=headers))
        if byte_range is not None and answer.status != 206:
            raise NetworkError(
                f"{url}: the server ignored the byte range (status {answer.status}); "
                "refusing to read the whole file"
            )
        return HttpResponse(url=url, status=answer.status, body=answer.body, headers=answer.headers)


def _get_file(
    url: str, *, byte_range: tuple[int, int | None] | None, max_bytes: int
) -> HttpResponse:
    """A file: URL (a site on disk), ranges applied the way a server would; only a regular
    file is read (a FIFO or a device is refused by its type before it is opened)."""
    path = urllib.request.url2pathname(urllib.parse.urlsplit(url).path)
    try:
        if not stat.S_ISREG(Path(path).stat().st_mode):
            raise NetworkError(f"{url}: not a regular file; refused")
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
