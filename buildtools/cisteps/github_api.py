"""The few GitHub REST calls the release jobs make: releases, their assets, uploads.

`GitHubApi` is what the release code needs; `RestApi` speaks HTTPS with the job's token
(`GITHUB_TOKEN`/`GH_TOKEN`, the repository of `GITHUB_REPOSITORY`, the API of
`GITHUB_API_URL`, so GitHub Enterprise Server works too), retrying transient failures.
Assets are read through the API (`Accept: application/octet-stream`), never through the
Pages CDN; the token is not sent on to the storage host the API redirects downloads to.
"""

from __future__ import annotations

__all__ = ["GitHubApi", "RestApi"]

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from ..errors import PublishError
from ..files import naming_path
from ..http import DownloadError, HttpClient, HttpLimits, HttpRequest, NotFound
from ..jsonfields import decode_json

_ANSWER_BYTES = 64 << 20  # one API answer (a page of 100 releases with their assets)
_ASSET_BYTES = 16 << 30  # an asset GitHub gives no size for

Json = dict[str, Any]


class GitHubApi(Protocol):
    """Releases and release assets of one repository."""

    repository: str

    def release(self, tag: str) -> Json | None:
        """The release of `tag` (drafts included), or None."""
        ...

    def create_release(self, tag: str) -> Json:
        """A new draft release of the existing `tag` (published once its assets are)."""
        ...

    def publish_release(self, release: Json) -> Json:
        """The draft `release`, published."""
        ...

    def releases(self) -> list[Json]:
        """Every release, newest first, each with its `assets`."""
        ...

    def assets(self, release: Json) -> list[Json]:
        """The assets of a release (name, size, state, uploader, digest when GitHub knows it)."""
        ...

    def upload(self, release: Json, path: Path, name: str) -> Json:
        """Upload `path` as the asset `name`; the new asset."""
        ...

    def delete_asset(self, asset: Json) -> None: ...

    def download(self, asset: Json, dest: Path) -> None:
        """The asset's bytes into `dest`."""
        ...


class RestApi:
    """`GitHubApi` over HTTPS (`http.HttpClient`: deadlines, byte caps, bounded redirects),
    with a few retries for 5xx and network errors."""

    def __init__(
        self,
        *,
        repository: str,
        token: str,
        api_url: str = "https://api.github.com",
        attempts: int = 4,
        pause: float = 5.0,
    ) -> None:
        self.repository = repository
        self.token = token
        self.api_url = api_url.rstrip("/")
        self.attempts = attempts
        self.pause = pause
        # a release job uploads and downloads its wheels with one client: hours in all
        limits = HttpLimits.from_env(
            os.environ, attempts=attempts, pause=pause, run_seconds=6 * 3600.0
        )
        self.http = HttpClient(limits)

    @classmethod
    def from_env(cls, env: Mapping[str, str], repository: str | None = None) -> RestApi:
        """The API of the running workflow (GITHUB_REPOSITORY, GITHUB_TOKEN or GH_TOKEN)."""
        repo = repository or env.get("GITHUB_REPOSITORY")
        token = env.get("GITHUB_TOKEN") or env.get("GH_TOKEN")
        if not repo or not token:
            raise PublishError(
                "no GitHub repository or token: set GITHUB_REPOSITORY and GITHUB_TOKEN (the "
                "workflows pass `github.token`; by hand, a token that can read the releases)"
            )
        return cls(
            repository=repo,
            token=token,
            api_url=env.get("GITHUB_API_URL") or "https://api.github.com",
        )

    # ------------------------------------------------------------------------- transport

    def _request(  # noqa: PLR0913
        self,
        method: str,
        url: str,
        *,
        body: Any = None,
        data: Any = None,
        headers: Mapping[str, str] | None = None,
        sink: Path | None = None,
        ok404: bool = False,
        timeout: float = 120.0,
        max_bytes: int = _ANSWER_BYTES,
    ) -> Any:
        payload = json.dumps(body).encode() if body is not None else data
        sent = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
        if body is not None:
            sent["Content-Type"] = "application/json"
        sent.update(headers or {})
        # not forwarded when the API redirects a download to its storage host
        token = {"Authorization": f"Bearer {self.token}"}
        request = HttpRequest(
            url=url,
            max_bytes=max_bytes,
            method=method,
            headers=sent,
            secret_headers=token,
            body=payload,
            seconds=timeout,
        )
        try:
            if sink is not None:
                with naming_path(sink), sink.open("wb") as fh:
                    self.http.send(request, sink=fh)
                return None
            answer = self.http.send(request)
        except NotFound as exc:
            if ok404:
                return None
            raise PublishError(f"{method} {exc}") from None
        except DownloadError as exc:
            raise PublishError(f"{method} {exc}; nothing was changed by this call") from None
        if not answer.body:
            return None
        try:
            return decode_json(answer.body, what=f"the answer to {method} {url}")
        except ValueError as exc:
            raise PublishError(f"{exc}; nothing was changed by this call") from None

    def _repo(self, path: str) -> str:
        return f"{self.api_url}/repos/{self.repository}/{path}"

    def _pages(self, url: str) -> list[Json]:
        out: list[Json] = []
        page = 1
        while True:
            sep = "&" if "?" in url else "?"
            batch = self._request("GET", f"{url}{sep}per_page=100&page={page}")
            if not batch:
                return out
            out.extend(batch)
            if len(batch) < 100:
                return out
            page += 1

    # --------------------------------------------------------------------------- calls

    def release(self, tag: str) -> Json | None:
        found = self._request("GET", self._repo(f"releases/tags/{quote(tag, safe='')}"), ok404=True)
        if found is not None:
            return dict(found)
        # drafts have no tag lookup: look through the list
        return next((r for r in self.releases() if r.get("tag_name") == tag), None)

    def create_release(self, tag: str) -> Json:
        body = {"tag_name": tag, "name": tag, "draft": True, "prerelease": False}
        return dict(self._request("POST", self._repo("releases"), body=body))

    def publish_release(self, release: Json) -> Json:
        url = self._repo(f"releases/{int(release['id'])}")
        return dict(self._request("PATCH", url, body={"draft": False}))

    def releases(self) -> list[Json]:
        return self._pages(self._repo("releases"))

    def assets(self, release: Json) -> list[Json]:
        return self._pages(self._repo(f"releases/{int(release['id'])}/assets"))

    def upload(self, release: Json, path: Path, name: str) -> Json:
        base = str(release["upload_url"]).split("{", 1)[0]
        size = path.stat().st_size
        with path.open("rb") as fh:
            return dict(
                self._request(
                    "POST",
                    f"{base}?name={quote(name, safe='')}",
                    data=fh,
                    headers={
                        "Content-Type": "application/octet-stream",
                        "Content-Length": str(size),
                    },
                    timeout=max(300.0, size / 1e6),
                )
            )

    def delete_asset(self, asset: Json) -> None:
        self._request("DELETE", self._repo(f"releases/assets/{int(asset['id'])}"))

    def download(self, asset: Json, dest: Path) -> None:
        size = asset.get("size")
        self._request(
            "GET",
            str(asset["url"]),
            headers={"Accept": "application/octet-stream"},
            sink=dest,
            timeout=600.0,
            max_bytes=size if isinstance(size, int) and size > 0 else _ASSET_BYTES,
        )
