"""`buildtools ci restore-site`: bring back the published site before a publish merges into it.

GitHub Pages deployed from an artifact keeps nothing between runs, while `buildtools
index` merges into the site it is given (every published wheel stays, a file name never
changes its bytes). So the release's publish job first restores the manifest: from the
published record (`index.json` of the newest release, read through the API; `cisteps.record`)
checked against what `index.base_url` serves, or, without a record yet, from what is
served. Wheels live in the releases (the manifest links them); a wheel an older site
still hosts itself comes back too (with its PEP 658 `.metadata`), checked against the
sha256 the manifest records. A site that does not exist yet (`index.json` answers 404) is
a first publish; any other failure stops the job, so a publish never drops the wheels it
could not read back.
"""

from __future__ import annotations

__all__ = [
    "Fetcher",
    "HttpFetcher",
    "Restored",
    "pages_subpath",
    "restore_from_record",
    "restore_site",
    "served_manifest",
]

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import quote, urlsplit

from ..errors import PublishError
from ..files import check_wheel_filename, safe_join, sha256_file
from ..http import DownloadError, HttpClient
from ..index.manifest import MANIFEST_MAX_BYTES, MANIFEST_NAME, Manifest, read_manifest
from ..index.pages import WHEELS_DIR
from .published_record import Record, compare_record


class Fetcher(Protocol):
    """Downloads one URL into a file (at most `max_bytes`); False when the server answers 404."""

    def fetch(self, url: str, dest: Path, *, max_bytes: int) -> bool: ...


METADATA_MAX_BYTES = 8 << 20  # a PEP 658 .metadata file: METADATA, which a wheel caps so too


class HttpFetcher:
    """`http.HttpClient`: http(s) only, bounded redirects, a deadline per request and per run,
    byte caps, retries for transient failures; any failure is one PublishError line."""

    def __init__(self, http: HttpClient | None = None) -> None:
        self.http = http or HttpClient()

    def fetch(self, url: str, dest: Path, *, max_bytes: int) -> bool:
        try:
            return self.http.download(url, dest, max_bytes=max_bytes)
        except DownloadError as exc:
            raise PublishError(f"cannot download it: {exc}; nothing is published") from None


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
    wheels: int  # wheels the manifest lists
    hosted: int  # of which the site itself hosts (restored here)
    first_publish: bool
    source: str = ""  # where the manifest came from
    notes: tuple[str, ...] = ()


def _empty_site(site: Path) -> None:
    if site.exists() and any(site.iterdir()):
        raise PublishError(f"{site}: not empty; restore the published site into a new directory")
    site.mkdir(parents=True, exist_ok=True)


def served_manifest(
    base_url: str, dest: Path, *, fetcher: Fetcher, cache_bust: str = ""
) -> Manifest | None:
    """What the site at `base_url` serves as `index.json` (None: nothing published there).

    `cache_bust` goes into the query string: the CDN keys its cache on the whole URL.
    """
    dest.mkdir(parents=True, exist_ok=True)
    url = f"{base_url.rstrip('/')}/{MANIFEST_NAME}" + (
        f"?v={quote(cache_bust)}" if cache_bust else ""
    )
    if not fetcher.fetch(url, dest / MANIFEST_NAME, max_bytes=MANIFEST_MAX_BYTES):
        (dest / MANIFEST_NAME).unlink(missing_ok=True)
        return None
    return read_manifest(dest)


def _restore_hosted(base_url: str, site: Path, *, fetcher: Fetcher) -> int:
    """Download the wheels `site/index.json` says the site hosts itself (no `url`)."""
    base = base_url.rstrip("/")
    manifest = read_manifest(site)
    hosted = [w for w in manifest.wheels if w.url is None]
    if hosted:
        (site / WHEELS_DIR).mkdir(exist_ok=True)
    for wheel in hosted:
        # the manifest comes back from the published site: its names are not trusted
        check_wheel_filename(wheel.filename, what=f"{MANIFEST_NAME} entry")
        files = (
            (wheel.filename, wheel.sha256, wheel.size),
            (f"{wheel.filename}.metadata", None, METADATA_MAX_BYTES),
        )
        for name, sha, cap in files:
            url = f"{base}/{WHEELS_DIR}/{quote(name)}"
            dest = safe_join(site / WHEELS_DIR, name, what=f"{MANIFEST_NAME} entry")
            if not fetcher.fetch(url, dest, max_bytes=cap):
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
    return len(hosted)


def restore_site(base_url: str, site: Path, *, fetcher: Fetcher) -> Restored:
    """Download the site served at `base_url` into the empty directory `site`."""
    _empty_site(site)
    manifest = served_manifest(base_url, site, fetcher=fetcher)
    if manifest is None:
        return Restored(site=site, wheels=0, hosted=0, first_publish=True, source=base_url)
    hosted = _restore_hosted(base_url, site, fetcher=fetcher)
    return Restored(
        site=site, wheels=len(manifest.wheels), hosted=hosted, first_publish=False, source=base_url
    )


def restore_from_record(
    record: Record | None,
    site: Path,
    *,
    base_url: str | None,
    fetcher: Fetcher,
    scratch: Path,
    cache_bust: str = "",
) -> Restored:
    """Start `site` from the published record, checked against what `base_url` serves.

    Without a record yet, what is served is adopted (the first publish of this pipeline on
    a site an earlier one deployed); without either, this is the first publish.
    """
    _empty_site(site)
    served = (
        served_manifest(base_url, scratch, fetcher=fetcher, cache_bust=cache_bust)
        if base_url
        else None
    )
    notes: list[str] = []
    if record is None:
        if served is None:
            return Restored(site=site, wheels=0, hosted=0, first_publish=True, source="none")
        (site / MANIFEST_NAME).write_bytes((scratch / MANIFEST_NAME).read_bytes())
        notes.append(
            f"no published record in the releases yet: starting from the {MANIFEST_NAME} "
            f"{base_url} serves"
        )
        source = f"{base_url} (served)"
    else:
        if served is not None:
            problems, lag = compare_record(record.manifest, served)
            if problems:
                raise PublishError(
                    f"{base_url} serves wheels the published record ({MANIFEST_NAME} of the "
                    f"release {record.tag}) does not list:\n  "
                    + "\n  ".join(problems)
                    + "\nthe site was deployed without recording it; nothing is published. "
                    f"Upload the served {MANIFEST_NAME} as the asset {MANIFEST_NAME} of the "
                    f"release {record.tag} (`gh release upload {record.tag} {MANIFEST_NAME} "
                    "--clobber`) once you have checked it, then re-run this job"
                )
            notes += lag
        (site / MANIFEST_NAME).write_text(record.text, encoding="utf-8")
        source = f"{MANIFEST_NAME} of the release {record.tag} ({record.uploaded})"
    manifest = read_manifest(site)
    hosted = _restore_hosted(base_url, site, fetcher=fetcher) if base_url else 0
    if not base_url and any(w.url is None for w in manifest.wheels):
        raise PublishError(
            "the published record lists wheels the site hosts itself, but no index.base_url "
            "says where to read them back; set index.base_url"
        )
    return Restored(
        site=site,
        wheels=len(manifest.wheels),
        hosted=hosted,
        first_publish=False,
        source=source,
        notes=tuple(notes),
    )
