"""A container registry on loopback for `nox -s ci-run`: what docker push and pull need of
the distribution API (v2), in memory, standard library only.

A release builds only FROM a base pinned by digest, and a digest is what a registry gives
an image it was pushed: the run pushes the local base here (127.0.0.1, which docker
treats as an insecure registry without any configuration), pins the digest this answers,
and the builds pull `127.0.0.1:PORT/bt-base:cpu@sha256:…` as they would from Docker Hub.
`forget(name, digest)` drops a manifest, as a registry's garbage collection does after a
tag was pushed again: a build pinned to it then stops at the pull.

Endpoints: `GET /v2/`; `HEAD|GET /v2/<name>/blobs/<digest>`;
`POST /v2/<name>/blobs/uploads/` (a mount request is answered as a plain upload),
`PATCH` and `PUT ?digest=` on the upload's location; `PUT|HEAD|GET
/v2/<name>/manifests/<tag or digest>`. Uploads are checked against their digest.
"""

from __future__ import annotations

import hashlib
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from urllib.parse import parse_qs, urlsplit

_NAME = r"[a-z0-9]+(?:[._/-][a-z0-9]+)*"


class Registry:
    """The store: blobs by digest, manifests by (name, reference)."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[tuple[str, str], tuple[str, bytes]] = {}  # → (type, body)
        self.uploads: dict[str, bytearray] = {}
        self.lock = threading.Lock()

    def forget(self, name: str, digest: str) -> None:
        """Drop the manifest `digest` of `name` (and every tag naming it)."""
        with self.lock:
            for key in [k for k, (_, body) in self.manifests.items() if k[0] == name]:
                if key[1] == digest or _digest(self.manifests[key][1]) == digest:
                    del self.manifests[key]


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    registry: ClassVar[Registry]
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _send(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _route(self) -> tuple[str, str, str] | None:
        path = urlsplit(self.path).path
        if path in ("/v2", "/v2/"):
            return ("base", "", "")
        m = re.fullmatch(rf"/v2/({_NAME})/(blobs|manifests)/(.+)", path)
        if m:
            return (m[2], m[1], m[3])
        return None

    def do_GET(self) -> None:
        self._read()

    def do_HEAD(self) -> None:
        self._read()

    def _read(self) -> None:
        route = self._route()
        store = self.registry
        if route is None:
            return self._send(404)
        kind, name, ref = route
        if kind == "base":
            return self._send(200, b"{}", {"Content-Type": "application/json"})
        if kind == "blobs" and ref.startswith("sha256:"):
            blob = store.blobs.get(ref)
            if blob is None:
                return self._send(404, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}')
            return self._send(
                200,
                blob,
                {"Docker-Content-Digest": ref, "Content-Type": "application/octet-stream"},
            )
        if kind == "manifests":
            found = store.manifests.get((name, ref))
            if found is None:
                return self._send(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')
            media, body = found
            return self._send(
                200, body, {"Content-Type": media, "Docker-Content-Digest": _digest(body)}
            )
        return self._send(404)

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        m = re.fullmatch(rf"/v2/({_NAME})/blobs/uploads/?", path)
        if not m:
            return self._send(404)
        self._body()
        upload = uuid.uuid4().hex
        self.registry.uploads[upload] = bytearray()
        location = f"/v2/{m[1]}/blobs/uploads/{upload}"
        return self._send(
            202, headers={"Location": location, "Docker-Upload-UUID": upload, "Range": "0-0"}
        )

    def do_PATCH(self) -> None:
        m = re.fullmatch(rf"/v2/({_NAME})/blobs/uploads/(\w+)", urlsplit(self.path).path)
        if not m or m[2] not in self.registry.uploads:
            return self._send(404)
        data = self.registry.uploads[m[2]]
        data += self._body()
        return self._send(
            202,
            headers={
                "Location": f"/v2/{m[1]}/blobs/uploads/{m[2]}",
                "Docker-Upload-UUID": m[2],
                "Range": f"0-{max(len(data) - 1, 0)}",
            },
        )

    def do_PUT(self) -> None:
        parts = urlsplit(self.path)
        store = self.registry
        m = re.fullmatch(rf"/v2/({_NAME})/blobs/uploads/(\w+)", parts.path)
        if m and m[2] in store.uploads:
            data = store.uploads.pop(m[2]) + self._body()
            want = parse_qs(parts.query).get("digest", [""])[0]
            if _digest(bytes(data)) != want:
                return self._send(400, b'{"errors":[{"code":"DIGEST_INVALID"}]}')
            store.blobs[want] = bytes(data)
            return self._send(
                201, headers={"Location": f"/v2/{m[1]}/blobs/{want}", "Docker-Content-Digest": want}
            )
        m = re.fullmatch(rf"/v2/({_NAME})/manifests/(.+)", parts.path)
        if m:
            body = self._body()
            media = self.headers.get("Content-Type", "application/json")
            digest = _digest(body)
            with store.lock:
                store.manifests[(m[1], m[2])] = (media, body)
                store.manifests[(m[1], digest)] = (media, body)
            return self._send(
                201,
                headers={
                    "Location": f"/v2/{m[1]}/manifests/{digest}",
                    "Docker-Content-Digest": digest,
                },
            )
        return self._send(404)


def serve(host: str = "127.0.0.1", port: int = 0) -> tuple[Registry, ThreadingHTTPServer]:
    """A registry served on (host, port) in a daemon thread; the server's address is
    `server.server_address`."""
    registry = Registry()
    handler = type("RegistryHandler", (_Handler,), {"registry": registry})
    server = ThreadingHTTPServer((host, port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return registry, server
