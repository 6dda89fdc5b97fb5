"""The published record: `index.json` as a release asset, read through the API, not the CDN.

Every publish uploads the merged manifest as the asset `index.json` of its tag's release
before it deploys the pages, so the newest such asset (by upload time; publishes run one
at a time in the Pages concurrency group) is what was last published. The next publish
starts from it rather than from what GitHub Pages serves, which its CDN caches for
minutes: a release right after another can no longer merge into a stale index and drop
the previous release's wheels.

The record is checked against the last deployment: every wheel the live site lists must
be in the record with the same sha256 (else the site was deployed without recording, and
nothing is published until that is repaired); wheels the record lists that the site does
not serve yet are reported (the CDN lags, or the last deploy failed: this one brings them).
"""

from __future__ import annotations

__all__ = ["RECORD_ASSET", "Record", "compare_record", "latest_record", "upload_record"]

import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import PublishError
from ..index.manifest import MANIFEST_NAME, Manifest, read_manifest
from .github_api import GitHubApi, Json

RECORD_ASSET = MANIFEST_NAME


@dataclass(frozen=True, kw_only=True)
class Record:
    """The newest published manifest, and the release that holds it."""

    manifest: Manifest
    text: str
    tag: str
    uploaded: str  # the asset's updated_at


def latest_record(api: GitHubApi) -> Record | None:
    """The newest `index.json` asset of the repository's releases (None: nothing published)."""
    best: tuple[str, Json, Json] | None = None
    for release in api.releases():
        for asset in release.get("assets") or []:
            if asset.get("name") != RECORD_ASSET or asset.get("state") != "uploaded":
                continue
            stamp = str(asset.get("updated_at") or asset.get("created_at") or "")
            if best is None or stamp > best[0]:
                best = (stamp, release, asset)
    if best is None:
        return None
    stamp, release, asset = best
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp)
        api.download(asset, site / MANIFEST_NAME)
        try:
            manifest = read_manifest(site)
        except PublishError as exc:
            raise PublishError(
                f"the published record ({RECORD_ASSET} of release {release.get('tag_name')}) "
                f"is not a manifest buildtools wrote: {exc}; nothing is published"
            ) from None
        text = (site / MANIFEST_NAME).read_text(encoding="utf-8")
    return Record(manifest=manifest, text=text, tag=str(release.get("tag_name")), uploaded=stamp)


def compare_record(record: Manifest, served: Manifest) -> tuple[list[str], list[str]]:
    """(problems, notes) of the record against what the live site serves."""
    recorded = {w.filename: w.sha256 for w in record.wheels}
    live = {w.filename: w.sha256 for w in served.wheels}
    problems = [
        f"{name}: served with sha256 {sha}, "
        + ("not in the record" if name not in recorded else f"the record has {recorded[name]}")
        for name, sha in sorted(live.items())
        if recorded.get(name) != sha
    ]
    notes = [f"{name}: in the record, not served yet" for name in sorted(set(recorded) - set(live))]
    return problems, notes


def upload_record(api: GitHubApi, tag: str, manifest_file: Path) -> None:
    """Make `manifest_file` the record: the asset `index.json` of the release of `tag`.

    The record is the one asset that is replaced (each publish writes the merged manifest);
    read_manifest validates it first, so a broken file never becomes the record.
    """
    read_manifest(manifest_file.parent)
    release = api.release(tag)
    if release is None:
        raise PublishError(
            f"no release for {tag}: the assets job creates it before the index is published"
        )
    for asset in api.assets(release):
        if asset.get("name") == RECORD_ASSET:
            api.delete_asset(asset)
    api.upload(release, manifest_file, RECORD_ASSET)
