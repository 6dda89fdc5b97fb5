"""GitHub's side of a `nox -s ci-run` release, on this machine: the REST API and Pages.

    python fakegithub.py --state DIR --repo-dir GIT --repository OWNER/NAME --token T
                         --pages-host HOST [--pages-prefix /REPO]

Two listeners on 127.0.0.1, their ports written to DIR/ports.json:
  api    the REST calls the release workflow makes (GITHUB_API_URL points here): tag refs
         and tag objects read from the run's git repository (what `gh api` asks while the
         tag is vetted), and releases with their assets (buildtools.cisteps.github_api):
         create a draft, list, look one up by tag (drafts are not found that way, as on
         GitHub), upload to upload_url, delete and download assets, publish;
         It is also GITHUB_SERVER_URL: `git fetch` of OWNER/NAME (what actions/checkout runs
         for a `ref:` other than the run's own) is served by `git http-backend` from the
         run's repository, smart HTTP, read-only; and the download URL of a published
         release's asset (OWNER/NAME/releases/download/TAG/NAME: what a release's index links
         to, and what release.yml's smoke-only leg downloads); a workflow dispatch
         (`gh workflow run`: POST …/actions/workflows/WF/dispatches) is recorded in
         DIR/dispatches.jsonl (what real GitHub would start);
  proxy  an HTTP proxy (https_proxy): CONNECT to HOST:443, the Pages host of index.base_url,
         is answered with TLS under a certificate of this run's own CA (SSL_CERT_FILE
         trusts it) and serves DIR/pages/ (what the deploy-pages stand-in deployed; 404
         before); CONNECT to --server-host (GITHUB_SERVER_URL's host, when the run names one)
         is answered by the api listener under TLS (an https server URL, as on GitHub: the
         window plan takes only https wheel links); any other CONNECT is tunnelled to the
         real host.
Every request is appended to DIR/requests.jsonl (method, path, status): the run prints
what would have been sent to GitHub. A wrong token is 401. Stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import select
import socket
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

LOCK = threading.RLock()  # held while answering; _record takes it again


class State:
    def __init__(self, root: Path, repo_dir: Path, repository: str, token: str) -> None:
        self.root, self.repo_dir, self.repository, self.token = root, repo_dir, repository, token
        self.file = root / "releases.json"
        self.assets = root / "assets"
        self.assets.mkdir(parents=True, exist_ok=True)
        self.api_url = ""
        self.server_url = "https://github.com"
        if not self.file.exists():
            self.file.write_text(json.dumps({"next": 1, "releases": []}))

    def load(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.file.read_text())
        return data

    def save(self, data: dict[str, Any]) -> None:
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.file)

    def release_json(self, rel: dict[str, Any]) -> dict[str, Any]:
        base = f"{self.api_url}/repos/{self.repository}/releases/{rel['id']}"
        out = dict(rel)
        out.update(
            url=base,
            assets_url=f"{base}/assets",
            upload_url=f"{self.api_url}/uploads/repos/{self.repository}/releases/{rel['id']}"
            "/assets{?name,label}",
            html_url=f"{self.server_url}/{self.repository}/releases/tag/{rel['tag_name']}",
            assets=[self.asset_json(rel, a) for a in rel["assets"]],
        )
        return out

    def asset_json(self, rel: dict[str, Any], asset: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": asset["id"],
            "name": asset["name"],
            "size": asset["size"],
            "state": "uploaded",
            "digest": f"sha256:{asset['sha256']}",
            "content_type": "application/octet-stream",
            "updated_at": asset["updated_at"],
            # an upload with the workflow's token is github-actions[bot]'s, as on GitHub
            "uploader": {"login": asset.get("uploader", "github-actions[bot]"), "type": "Bot"},
            "url": f"{self.api_url}/repos/{self.repository}/releases/assets/{asset['id']}",
            "browser_download_url": f"{self.server_url}/{self.repository}/releases/download/"
            f"{rel['tag_name']}/{asset['name']}",
        }


def _git(repo: Path, *args: str) -> str | None:
    done = subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, timeout=60, check=False
    )
    return done.stdout.strip() if done.returncode == 0 else None


class Api(BaseHTTPRequestHandler):
    state: State

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _record(self, status: int) -> None:
        with LOCK, (self.state.root / "requests.jsonl").open("a") as log:
            log.write(
                json.dumps({"method": self.command, "path": self.path, "status": status}) + "\n"
            )

    def _send(self, status: int, body: Any = None, raw: bytes | None = None) -> None:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
        self.send_response(status)
        self.send_header(
            "Content-Type", "application/octet-stream" if raw is not None else "application/json"
        )
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self._record(status)

    def _authorized(self) -> bool:
        got = self.headers.get("Authorization", "")
        if got in (f"Bearer {self.state.token}", f"token {self.state.token}"):
            return True
        self._send(401, {"message": "Bad credentials"})
        return False

    def _route(self) -> tuple[list[str], dict[str, list[str]]]:
        parts = urlsplit(self.path)
        segs = [unquote(s) for s in parts.path.strip("/").split("/")]
        prefix = ["repos", *self.state.repository.split("/")]
        if segs[:1] == ["uploads"]:
            segs = segs[1:]
        if segs[:3] != prefix:
            return [], {}
        return segs[3:], parse_qs(parts.query)

    def _git_http(self) -> bool:
        """Smart HTTP for OWNER/NAME(.git): `git http-backend` over the run's repository."""
        parts = urlsplit(self.path)
        base = f"/{self.state.repository}"
        rest = None
        for prefix in (base + ".git/", base + "/"):
            if parts.path.startswith(prefix):
                rest = parts.path[len(prefix) :]
        if rest not in {"info/refs", "git-upload-pack"}:
            return False
        repo = self.state.repo_dir
        body = self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
        env = {
            "PATH": "/usr/bin:/bin",
            "GIT_PROJECT_ROOT": str(repo.parent),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": f"/{repo.name}/.git/{rest}",
            "QUERY_STRING": parts.query,
            "REQUEST_METHOD": self.command,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
        }
        done = subprocess.run(
            ["git", "http-backend"],
            input=body,
            env=env,
            capture_output=True,
            timeout=600,
            check=False,
        )
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        status = 200
        headers = []
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        self._record(status)
        return True

    def _download(self) -> bool:
        """GET OWNER/NAME/releases/download/TAG/FILE: a published release's asset, no token."""
        prefix = f"/{self.state.repository}/releases/download/"
        path = unquote(urlsplit(self.path).path)
        if not path.startswith(prefix):
            return False
        tag, _, name = path[len(prefix) :].partition("/")
        for rel in self.state.load()["releases"]:
            if rel["tag_name"] != tag or rel["draft"]:
                continue
            for asset in rel["assets"]:
                if asset["name"] == name:
                    self._send(200, raw=(self.state.assets / str(asset["id"])).read_bytes())
                    return True
        self._send(404, {"message": "Not Found"})
        return True

    def do_GET(self) -> None:
        if self._git_http() or self._download() or not self._authorized():
            return
        segs, query = self._route()
        st = self.state
        if segs[:3] == ["git", "ref", "tags"] and len(segs) >= 4:
            tag = "/".join(segs[3:])
            sha = _git(st.repo_dir, "rev-parse", "--verify", "-q", f"refs/tags/{tag}")
            if not sha:
                return self._send(404, {"message": "Not Found"})
            kind = _git(st.repo_dir, "cat-file", "-t", sha)
            return self._send(
                200, {"ref": f"refs/tags/{tag}", "object": {"type": kind, "sha": sha}}
            )
        if segs[:2] == ["git", "tags"] and len(segs) == 3:
            target = _git(st.repo_dir, "rev-parse", "--verify", "-q", f"{segs[2]}^{{}}")
            inner = _git(st.repo_dir, "cat-file", "-p", segs[2]) or ""
            line = next((x for x in inner.splitlines() if x.startswith("object ")), "")
            kind = next((x.split()[1] for x in inner.splitlines() if x.startswith("type ")), "")
            if not target or not line:
                return self._send(404, {"message": "Not Found"})
            return self._send(
                200, {"sha": segs[2], "object": {"type": kind, "sha": line.split()[1]}}
            )
        data = st.load()
        if segs == ["releases"]:
            page = int(query.get("page", ["1"])[0])
            per = int(query.get("per_page", ["30"])[0])
            rels = sorted(data["releases"], key=lambda r: -int(r["id"]))[
                (page - 1) * per : page * per
            ]
            return self._send(200, [st.release_json(r) for r in rels])
        if segs[:2] == ["releases", "tags"] and len(segs) == 3:
            rel = next(
                (r for r in data["releases"] if r["tag_name"] == segs[2] and not r["draft"]), None
            )
            return (
                self._send(200, st.release_json(rel))
                if rel
                else self._send(404, {"message": "Not Found"})
            )
        if segs[:1] == ["releases"] and len(segs) == 3 and segs[2] == "assets":
            rel = next((r for r in data["releases"] if str(r["id"]) == segs[1]), None)
            if not rel:
                return self._send(404, {"message": "Not Found"})
            page = int(query.get("page", ["1"])[0])
            per = int(query.get("per_page", ["30"])[0])
            return self._send(
                200, [st.asset_json(rel, a) for a in rel["assets"]][(page - 1) * per : page * per]
            )
        if segs[:2] == ["releases", "assets"] and len(segs) == 3:
            for rel in data["releases"]:
                for asset in rel["assets"]:
                    if str(asset["id"]) == segs[2]:
                        if "octet-stream" in self.headers.get("Accept", ""):
                            return self._send(200, raw=(st.assets / str(asset["id"])).read_bytes())
                        return self._send(200, st.asset_json(rel, asset))
        return self._send(404, {"message": "Not Found"})

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def do_POST(self) -> None:
        if self._git_http() or not self._authorized():
            return
        segs, query = self._route()
        body = self._body()
        st = self.state
        if segs[:2] == ["actions", "workflows"] and segs[3:] == ["dispatches"]:
            req = json.loads(body)
            with LOCK, (st.root / "dispatches.jsonl").open("a") as log:
                log.write(json.dumps({"workflow": segs[2], **req}) + "\n")
            return self._send(204)
        with LOCK:
            data = st.load()
            if segs == ["releases"]:
                req = json.loads(body)
                if any(r["tag_name"] == req["tag_name"] for r in data["releases"]):
                    return self._send(422, {"message": "Validation Failed: already_exists"})
                rel = {
                    "id": data["next"],
                    "tag_name": req["tag_name"],
                    "name": req.get("name"),
                    "draft": bool(req.get("draft")),
                    "prerelease": bool(req.get("prerelease")),
                    "assets": [],
                }
                data["next"] += 1
                data["releases"].append(rel)
                st.save(data)
                return self._send(201, st.release_json(rel))
            if segs[:1] == ["releases"] and len(segs) == 3 and segs[2] == "assets":
                rel = next((r for r in data["releases"] if str(r["id"]) == segs[1]), None)
                name = query.get("name", [""])[0]
                if not rel or not name:
                    return self._send(404, {"message": "Not Found"})
                if any(a["name"] == name for a in rel["assets"]):
                    return self._send(422, {"message": "Validation Failed: already_exists"})
                asset = {
                    "id": data["next"],
                    "name": name,
                    "size": len(body),
                    "sha256": hashlib.sha256(body).hexdigest(),
                    "updated_at": "2026-01-01T00:00:00Z",
                }
                data["next"] += 1
                (st.assets / str(asset["id"])).write_bytes(body)
                rel["assets"].append(asset)
                st.save(data)
                return self._send(201, st.asset_json(rel, asset))
        return self._send(404, {"message": "Not Found"})

    def do_PATCH(self) -> None:
        if not self._authorized():
            return
        segs, _ = self._route()
        req = json.loads(self._body())
        with LOCK:
            data = self.state.load()
            rel = next(
                (r for r in data["releases"] if len(segs) == 2 and str(r["id"]) == segs[1]), None
            )
            if not rel:
                return self._send(404, {"message": "Not Found"})
            rel.update({k: v for k, v in req.items() if k in {"draft", "name", "prerelease"}})
            self.state.save(data)
            return self._send(200, self.state.release_json(rel))

    def do_DELETE(self) -> None:
        if not self._authorized():
            return
        segs, _ = self._route()
        with LOCK:
            data = self.state.load()
            for rel in data["releases"]:
                for asset in list(rel["assets"]):
                    if segs[:2] == ["releases", "assets"] and str(asset["id"]) == segs[-1]:
                        rel["assets"].remove(asset)
                        self.state.save(data)
                        return self._send(204)
        return self._send(404, {"message": "Not Found"})


class Pages(BaseHTTPRequestHandler):
    """What the Pages host serves: DIR/pages/<path> (GET/HEAD), 404 otherwise."""

    root: Path
    prefix: str  # a project site (OWNER.github.io/REPO) serves its artifact under /REPO/

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = unquote(urlsplit(self.path).path)
        if self.prefix and not (path + "/").startswith(self.prefix + "/"):
            path = "/\0"  # outside the site
        rel = path[len(self.prefix) :].lstrip("/")
        target = (self.root / rel).resolve()
        if rel.endswith("/") or target.is_dir():
            target = target / "index.html"
        ok = target.is_file() and self.root.resolve() in target.parents
        data = target.read_bytes() if ok else b"not found"
        self.send_response(200 if ok else 404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        with LOCK, (self.root.parent / "requests.jsonl").open("a") as log:
            log.write(
                json.dumps({"method": "GET", "pages": self.path, "status": 200 if ok else 404})
                + "\n"
            )


def _relay(a: socket.socket, b: socket.socket) -> None:
    try:
        while True:
            ready, _, _ = select.select([a, b], [], [], 300)
            if not ready:
                return
            for s in ready:
                chunk = s.recv(65536)
                if not chunk:
                    return
                (b if s is a else a).sendall(chunk)
    except OSError:
        return
    finally:
        a.close()
        b.close()


class Proxy(BaseHTTPRequestHandler):
    pages_host: str
    server_host: str
    context: ssl.SSLContext
    pages: type[Pages]
    api: type[Api]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_CONNECT(self) -> None:
        host, _, port = self.path.rpartition(":")
        if host == self.pages_host:
            self.send_response(200, "Connection established")
            self.end_headers()
            tls = self.context.wrap_socket(self.connection, server_side=True)
            self.pages(tls, self.client_address, self.server)
            self.close_connection = True
            return
        if self.server_host and host == self.server_host:
            self.send_response(200, "Connection established")
            self.end_headers()
            tls = self.context.wrap_socket(self.connection, server_side=True)
            self.api(tls, self.client_address, self.server)
            self.close_connection = True
            return
        try:
            upstream = socket.create_connection((host, int(port)), timeout=30)
        except OSError:
            self.send_error(502)
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        _relay(self.connection, upstream)
        self.close_connection = True


def make_ca(root: Path, host: str, *others: str) -> tuple[Path, Path, Path]:
    """A CA of this run only and a certificate for `host` (and `others`) under it."""
    ca_key, ca, key, csr, cert = (
        root / n for n in ("ca.key", "ca.pem", "host.key", "host.csr", "host.pem")
    )
    run = lambda *a: subprocess.run(["openssl", *a], check=True, capture_output=True, timeout=60)  # noqa: E731
    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca),
        "-days",
        "2",
        "-subj",
        "/CN=ci-run local CA",
    )
    run(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(csr),
        "-subj",
        f"/CN={host}",
    )
    ext = root / "host.ext"
    ext.write_text("subjectAltName=" + ",".join(f"DNS:{h}" for h in (host, *others)) + "\n")
    run(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-out",
        str(cert),
        "-days",
        "2",
        "-extfile",
        str(ext),
    )
    return ca, cert, key


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--repo-dir", type=Path, required=True)
    parser.add_argument("--repository", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--pages-host", required=True)
    parser.add_argument("--pages-prefix", default="")
    parser.add_argument("--server-host", default="")
    args = parser.parse_args()
    args.state.mkdir(parents=True, exist_ok=True)
    (args.state / "pages").mkdir(exist_ok=True)
    state = State(args.state, args.repo_dir, args.repository, args.token)
    api = ThreadingHTTPServer(("127.0.0.1", 0), type("A", (Api,), {"state": state}))
    state.api_url = f"http://127.0.0.1:{api.server_address[1]}"
    ca, cert, key = make_ca(
        args.state, args.pages_host, *([args.server_host] if args.server_host else [])
    )
    if args.server_host:
        state.server_url = f"https://{args.server_host}"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    pages = type(
        "P", (Pages,), {"root": args.state / "pages", "prefix": args.pages_prefix.rstrip("/")}
    )
    proxy = ThreadingHTTPServer(
        ("127.0.0.1", 0),
        type(
            "X",
            (Proxy,),
            {
                "pages_host": args.pages_host,
                "server_host": args.server_host,
                "context": context,
                "pages": pages,
                "api": type("A2", (Api,), {"state": state}),
            },
        ),
    )
    bundle = args.state / "ca-bundle.pem"
    system = Path(ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")
    bundle.write_bytes(system.read_bytes() + b"\n" + ca.read_bytes())
    for server in (api, proxy):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    (args.state / "ports.json").write_text(
        json.dumps(
            {
                "api": state.api_url,
                "proxy": f"http://127.0.0.1:{proxy.server_address[1]}",
                "ca_bundle": str(bundle),
            }
        )
    )
    threading.Event().wait()


if __name__ == "__main__":
    main()
