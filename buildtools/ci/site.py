"""`buildtools ci restore-site`: bring back the published site before a publish merges into it.

GitHub Pages deployed from an artifact keeps nothing between runs, while `buildtools
index` merges into the site it is given (every published wheel stays, a file name never
changes its bytes). So the release's index job first downloads what is served at
`index.base_url`: `index.json`, and every wheel it lists that the site hosts (with its
PEP 658 `.metadata`), each checked against the sha256 the manifest records. A site that
does not exist yet (`index.json` answers 404) is a first publish; any other failure stops
the job, so a publish never drops the wheels it could not read back.
"""

from __future__ import annotations

__all__ = ["Fetcher", "UrllibFetcher", "pages_subpath", "restore_site"]

import shutil
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import quote, urlsplit

from ..errors import PublishError
from ..files import check_wheel_filename, safe_join, sha256_file
from ..index.manifest import MANIFEST_NAME, read_manifest
from ..index.pages import WHEELS_DIR


class Fetcher(Protocol):
    """Downloads one URL into a file; False when the server answers 404."""

    def fetch(self, url: str, dest: Path) -> bool: ...


class UrllibFetcher:
    """HTTP(S) with a timeout and a few retries for transient failures."""

    def __init__(self, *, timeout: float = 60.0, attempts: int = 3, pause: float = 5.0) -> None:
        self.timeout = timeout
        self.attempts = attempts
        self.pause = pause

    def fetch(self, url: str, dest: Path) -> bool:
        last: Exception | None = None
        for attempt in range(self.attempts):
            try:
                request = urllib.request.Request(url, headers={"Cache-Control": "no-cache"})
                with (
                    urllib.request.urlopen(request, timeout=self.timeout) as resp,
                    dest.open("wb") as fh,
                ):
                    shutil.copyfileobj(resp, fh, 1 << 20)
                return True
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return False
                last = exc
                if exc.code < 500:
                    break
            except (urllib.error.URLError, TimeoutError, OSError) as exc:
                last = exc
            if attempt + 1 < self.attempts:
                time.sleep(self.pause)
        raise PublishError(f"{url}: cannot download it ({last}); nothing is published")


def pages_subpath(base_url: str, repository: str | None) -> str:
    """Where the site lies inside the Pages artifact, from the URL it is served at.

    `https://OWNER.github.io/REPO/whl` is REPO's project site, so the index goes to
    `whl/`; `https://OWNER.github.io/whl` is the user site `OWNER.github.io`; on a custom
    domain the whole path is the subdirectory. A github.io URL of another owner than this
    repository's is an error: deploying would not put the site at that URL.
    """
    parts = urlsplit(base_url)
    segments = [s for s in parts.path.split("/") if s]
    host = (parts.hostname or "").lower()
    if not host.endswith(".github.io"):
        return "/".join(segments)
    owner = host.removesuffix(".github.io")
    if repository:
        repo_owner, _, repo_name = repository.partition("/")
        if repo_owner.lower() != owner:
            raise PublishError(
                f"index.base_url {base_url} is the GitHub Pages site of {owner!r}, but this "
                f"workflow runs in {repository}: set index.base_url to this repository's "
                f"Pages URL (https://{repo_owner.lower()}.github.io/{repo_name}/…)"
            )
        if repo_name.lower() == host:
            return "/".join(segments)  # the user/organisation site OWNER.github.io
    # a project site: the first segment is the repository
    return "/".join(segments[1:])


@dataclass(frozen=True, kw_only=True)
class Restored:
    site: Path
    wheels: int
    first_publish: bool


def restore_site(base_url: str, site: Path, *, fetcher: Fetcher) -> Restored:
    """Download the site served at `base_url` into the empty directory `site`."""
    base = base_url.rstrip("/")
    if site.exists() and any(site.iterdir()):
        raise PublishError(f"{site}: not empty; restore the published site into a new directory")
    site.mkdir(parents=True, exist_ok=True)
    manifest_path = site / MANIFEST_NAME
    if not fetcher.fetch(f"{base}/{MANIFEST_NAME}", manifest_path):
        manifest_path.unlink(missing_ok=True)
        return Restored(site=site, wheels=0, first_publish=True)
    manifest = read_manifest(site)
    hosted = [w for w in manifest.wheels if w.url is None]
    (site / WHEELS_DIR).mkdir(exist_ok=True)
    for wheel in hosted:
        # the manifest comes back from the published site: its names are not trusted
        check_wheel_filename(wheel.filename, what=f"{MANIFEST_NAME} entry")
        for name, sha in ((wheel.filename, wheel.sha256), (f"{wheel.filename}.metadata", None)):
            url = f"{base}/{WHEELS_DIR}/{quote(name)}"
            dest = safe_join(site / WHEELS_DIR, name, what=f"{MANIFEST_NAME} entry")
            if not fetcher.fetch(url, dest):
                raise PublishError(
                    f"{url}: not found, but {MANIFEST_NAME} lists {wheel.filename}; the "
                    "published site is damaged, so nothing is published (restore the file, "
                    "or remove the wheel from the manifest by hand)"
                )
            got = sha256_file(dest)
            want = sha or wheel.metadata_sha256
            if got != want:
                raise PublishError(
                    f"{url}: sha256 {got}, but {MANIFEST_NAME} records {want}; nothing is published"
                )
    return Restored(site=site, wheels=len(hosted), first_publish=False)
