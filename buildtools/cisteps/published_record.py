"""The published record: `index.json` as a release asset, read through the API, not the CDN.

Every publish uploads the merged manifest as the asset `index.json` of its tag's release
(still a draft), attests it like the wheels, and only then publishes the release and
deploys the pages. The next publish starts from the newest such asset rather than from
what GitHub Pages serves (its CDN caches for minutes: a release right after another could
merge into a stale index and drop the previous release's wheels).

Whoever can upload a release asset would otherwise choose what the next release publishes,
so the record is adopted only when it is authenticated (`RecordPolicy`), else the release
stops with the reason (`UntrustedRecordError`, exit 19):
- it belongs to a published release: drafts are skipped (an unfinished publish; the
  prerelease flag is not consulted: a person may set it on a published release, and
  skipping its record would drop the wheels its publish added);
- the asset was uploaded by the workflow's bot identity (`github-actions[bot]`), not by a
  person's token;
- its release attestation verifies: signed by release.yml of this repository at the
  default branch on a hosted runner, for this release's tag (`cisteps.provenance`);
- every wheel it lists that is not hosted on the site itself links into this repository's
  release downloads (or under `index.wheel_url`).

The record is then checked against the last deployment: every wheel the live site lists
must be in the record with the same sha256 (else the site was deployed without recording,
and nothing is published until that is repaired); wheels the record lists that the site
does not serve yet are reported (the CDN lags, or the last deploy failed: this one brings
them).
"""

from __future__ import annotations

__all__ = [
    "BOT_LOGIN",
    "RECORD_ASSET",
    "Record",
    "RecordPolicy",
    "compare_record",
    "latest_record",
    "outside_downloads",
    "upload_record",
]

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PublishError, UntrustedRecordError
from ..index.manifest import MANIFEST_NAME, Manifest, read_manifest
from .github_api import GitHubApi, Json

RECORD_ASSET = MANIFEST_NAME
# The identity GitHub gives uploads made with a workflow's GITHUB_TOKEN.
BOT_LOGIN = "github-actions[bot]"

# (downloaded record, the tag of its release) → why its attestation does not hold, or None
Authenticate = Callable[[Path, str], "str | None"]


@dataclass(frozen=True, kw_only=True)
class RecordPolicy:
    """What a record must satisfy to be adopted."""

    prefixes: tuple[str, ...]  # where its wheels may link (the release downloads, wheel_url)
    authenticate: Authenticate | None  # None: no attestation check (tests, local use)
    bot: str = BOT_LOGIN


@dataclass(frozen=True, kw_only=True)
class Record:
    """The newest published manifest, and the release that holds it."""

    manifest: Manifest
    text: str
    tag: str
    uploaded: str  # the asset's updated_at
    asset: str = "none"  # its id: the signing job checks it is still the newest record
    skipped: tuple[str, ...] = field(default=())  # drafts holding a newer index.json


def outside_downloads(manifest: Manifest, prefixes: Sequence[str]) -> list[str]:
    """The entries of `manifest` linking anywhere but under `prefixes` (hosted ones pass)."""
    return [
        f"{w.filename}: {w.url}"
        for w in manifest.wheels
        if w.url is not None and not any(w.url.startswith(p) for p in prefixes)
    ]


def _newest(api: GitHubApi) -> tuple[Json, Json, list[str]] | None:
    """(release, asset, drafts skipped) of the newest index.json of a published release."""
    best: tuple[str, Json, Json] | None = None
    drafts: list[tuple[str, str]] = []
    for release in api.releases():
        for asset in release.get("assets") or []:
            if asset.get("name") != RECORD_ASSET or asset.get("state") != "uploaded":
                continue
            stamp = str(asset.get("updated_at") or asset.get("created_at") or "")
            if release.get("draft") is not False:
                drafts.append((stamp, str(release.get("tag_name"))))
                continue
            if best is None or stamp > best[0]:
                best = (stamp, release, asset)
    if best is None:
        return None
    newer = [tag for stamp, tag in drafts if stamp > best[0]]
    return best[1], best[2], newer


def latest_record(api: GitHubApi, policy: RecordPolicy) -> Record | None:
    """The newest authenticated `index.json` of a published release (None: nothing
    published yet); UntrustedRecordError when the newest one cannot be authenticated."""
    found = _newest(api)
    if found is None:
        return None
    release, asset, drafts = found
    tag = str(release.get("tag_name"))
    where = f"{RECORD_ASSET} of the release {tag}"
    stop = "; nothing is published"
    uploader = (asset.get("uploader") or {}).get("login")
    if uploader != policy.bot:
        raise UntrustedRecordError(
            f"{where} was uploaded by {uploader or 'an unknown account'}, not by the release "
            f"workflow ({policy.bot}){stop}. If you replaced it by hand, delete it: the "
            "next release then starts from what the site serves"
        )
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp)
        api.download(asset, site / MANIFEST_NAME)
        if policy.authenticate is not None:
            problem = policy.authenticate(site / MANIFEST_NAME, tag)
            if problem is not None:
                raise UntrustedRecordError(
                    f"{where}: its attestation does not hold ({problem}){stop}. A record "
                    "made before release attestations: delete the asset once you have "
                    "checked it, and the next release starts from what the site serves"
                )
        try:
            manifest = read_manifest(site)
        except PublishError as exc:
            raise UntrustedRecordError(
                f"{where} is not a manifest buildtools wrote: {exc}{stop}"
            ) from None
        text = (site / MANIFEST_NAME).read_text(encoding="utf-8")
    outside = outside_downloads(manifest, policy.prefixes)
    if outside:
        raise UntrustedRecordError(
            f"{where} links wheels outside this repository's release downloads "
            f"({', '.join(policy.prefixes)}):\n  "
            + "\n  ".join(outside[:20])
            + "\nnothing is published"
        )
    return Record(
        manifest=manifest,
        text=text,
        tag=tag,
        uploaded=str(asset.get("updated_at") or ""),
        asset=str(asset.get("id", "none")),
        skipped=tuple(drafts),
    )


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


def upload_record(api: GitHubApi, release: Json, manifest_file: Path) -> None:
    """Make `manifest_file` the record: the asset `index.json` of `release`.

    The record is the one asset that is replaced (each publish writes the merged manifest);
    read_manifest validates it first, so a broken file never becomes the record.
    """
    read_manifest(manifest_file.parent)
    for asset in api.assets(release):
        if asset.get("name") == RECORD_ASSET:
            api.delete_asset(asset)
    api.upload(release, manifest_file, RECORD_ASSET)
