"""The durable published record: the wheels of a release are assets of the tag's GitHub Release.

- `select_wheels`: the wheels a release may publish, from the downloaded `wheels-<job>`
  artifacts and the smoke reports: the same gate as `buildtools index --require-smoke`,
  bound to this run's job outputs (which only the job that declares them can set): a
  wheel must be one a build leg reported (`built_wheels`), and a smoke report counts only
  when a smoke leg reported its sha256, and only for the wheels of that leg's own family
  (`SmokeBinding`): one compromised GPU machine can write any artifact of the run, but
  cannot vouch for another family's wheels, and a family without a smoke runner is never
  passed. The selection (published and held back, with each wheel's job) is written as
  `selection.json` for the index and status jobs.
- `upload_assets`: resumable and idempotent. An asset already there with the same bytes
  is kept, a half-finished upload is replaced, and an asset with other bytes under the
  same name stops the job (a published file never changes).
- `missing_assets`: before the release is published and Pages points at them, every wheel
  of the new index that lives in this tag's release must be an uploaded asset of the same
  size and digest.

The release is created as a draft and published by `publish_release` after the record is
uploaded: a release nobody finished publishing is never the one the next release adopts.
"""

from __future__ import annotations

__all__ = [
    "ReleaseWheels",
    "SmokeBinding",
    "UploadResult",
    "built_wheels",
    "ensure_release",
    "missing_assets",
    "publish_release",
    "read_selection",
    "reported_smoke",
    "select_wheels",
    "selection_lines",
    "upload_assets",
]

import json
import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ImmutableWheelError, PublishError
from ..files import check_wheel_filename, read_regular, sha256_file
from ..index.gate import SmokeGate
from ..index.manifest import Manifest
from ..jsonfields import JSON_MAX_BYTES, decode_json
from .github_api import GitHubApi, Json

SELECTION_SCHEMA = "torch-buildtools/ci-selection/v1"
WHEELS_ARTIFACT = "wheels-"


@dataclass(frozen=True, kw_only=True)
class ReleaseWheels:
    """The wheels of a run: (file name, sha256, job) published, and held back with why."""

    published: tuple[tuple[str, str, str], ...] = ()
    held_back: tuple[tuple[str, str, str], ...] = ()  # (file name, job, reason)

    def to_json(self) -> str:
        return (
            json.dumps(
                {
                    "schema": SELECTION_SCHEMA,
                    "published": [
                        {"wheel": w, "sha256": s, "job": j} for w, s, j in self.published
                    ],
                    "held_back": [
                        {"wheel": w, "job": j, "reason": r} for w, j, r in self.held_back
                    ],
                },
                indent=1,
                sort_keys=True,
            )
            + "\n"
        )


def read_selection(path: Path) -> ReleaseWheels:
    """`selection.json` as `select_wheels` wrote it."""
    try:
        data = decode_json(read_regular(path, max_bytes=JSON_MAX_BYTES), what=path.name)
        if not isinstance(data, dict) or data.get("schema") != SELECTION_SCHEMA:
            raise ValueError(f"schema is not {SELECTION_SCHEMA!r}")
        return ReleaseWheels(
            published=tuple((d["wheel"], d["sha256"], d["job"]) for d in data["published"]),
            held_back=tuple((d["wheel"], d["job"], d["reason"]) for d in data["held_back"]),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PublishError(
            f"{path}: not a selection written by `buildtools ci select`: {exc}"
        ) from None


def _job_of(path: Path, root: Path) -> str:
    """The build job a downloaded wheel came from (its `wheels-<job>` artifact directory)."""
    for parent in path.relative_to(root).parents:
        if parent.name.startswith(WHEELS_ARTIFACT):
            return parent.name.removeprefix(WHEELS_ARTIFACT)
    return "-"


def built_wheels(outputs: Iterable[str]) -> dict[str, str]:
    """wheel name → sha256, from the build jobs' outputs (each `toJSON(needs.<job>.outputs)`:
    `wheels_<leg>` → `sha256:name` tokens separated by spaces, which only that leg could set).
    """
    built: dict[str, str] = {}
    for text in outputs:
        try:
            data = decode_json(text or "{}", what="the build jobs' outputs")
        except ValueError:
            raise PublishError("the build jobs' outputs are not JSON (toJSON(needs…))") from None
        if not isinstance(data, dict):
            raise PublishError("the build jobs' outputs are not a JSON object")
        for key, value in data.items():
            if not str(key).startswith("wheels_"):
                continue
            for token in str(value).split():
                sha, sep, name = token.partition(":")
                if not sep or len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
                    raise PublishError(f"build output {key}: {token!r} is not sha256:wheel")
                check_wheel_filename(name, what=f"build output {key}")
                if built.setdefault(name, sha) != sha:
                    raise ImmutableWheelError(
                        f"{name}: two build jobs reported other bytes; nothing is published"
                    )
    return built


def _outputs(text: str, what: str) -> dict[str, object]:
    try:
        data = decode_json(text or "{}", what=what)
    except ValueError:
        raise PublishError(f"{what} are not JSON (toJSON(needs…))") from None
    if not isinstance(data, dict):
        raise PublishError(f"{what} are not a JSON object")
    return data


def reported_smoke(outputs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """smoke report sha256 → family, from (family, `toJSON(needs.<smoke job>.outputs)`)
    pairs: `report_<leg>` is the sha256 of the report.json that leg wrote, which only
    that leg could set."""
    bound: dict[str, str] = {}
    for family, text in outputs:
        for key, value in _outputs(text, "the smoke jobs' outputs").items():
            if not str(key).startswith("report_") or not value:
                continue
            sha = str(value)
            if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
                raise PublishError(f"smoke output {key}: {sha!r} is not a sha256")
            if bound.setdefault(sha, family) != family:
                raise PublishError(
                    f"smoke report {sha}: reported by a {bound[sha]} and a {family} smoke leg; "
                    "nothing is published"
                )
    return bound


@dataclass(frozen=True, kw_only=True)
class SmokeBinding:
    """Which smoke report may vouch for which wheel: a report counts only when a smoke leg
    of this run reported its sha256 (`reports`: sha256 → that leg's family), and only for
    the wheels of that family (`wheels`: name → the family of the build that reported it)."""

    reports: Mapping[str, str]
    wheels: Mapping[str, str]

    def gates(self, paths: Sequence[Path]) -> dict[str, SmokeGate]:
        """family → the gate of the reports its smoke legs reported; any other report stops
        the publish (something else put it into an artifact)."""
        by_family: dict[str, list[Path]] = defaultdict(list)
        for path in paths:
            sha = sha256_file(path)
            family = self.reports.get(sha)
            if family is None:
                raise PublishError(
                    f"{path} (sha256 {sha}): no smoke leg of this run reported a report with "
                    "these bytes; something else put it into an artifact, so nothing is published"
                )
            by_family[family].append(path)
        return {family: SmokeGate.load(found) for family, found in by_family.items()}

    def verdict(self, gates: Mapping[str, SmokeGate], name: str, sha: str) -> str | None:
        """None when a report of the wheel's own family passed it, else why not."""
        family = self.wheels.get(name)
        if family is None:
            return "no build job of this run reported its family"
        gate = gates.get(family)
        if gate is None:
            return f"no smoke report of the {family} family in this run"
        return gate.verdict(sha)


def select_wheels(
    root: Path,
    reports: Sequence[Path],
    out: Path,
    *,
    built: Mapping[str, str] | None = None,
    binding: SmokeBinding | None = None,
) -> ReleaseWheels:
    """Link the wheels under `root` that the smoke reports passed into `out`; the selection.

    Two wheels of one name must be the same file (a job that uploaded another job's wheel
    name is a conflict, not a choice). With `built` (what the build jobs of this run said
    they made: their job outputs, which no other job can set), a wheel whose name and
    sha256 no build job reported stops the publish: something else put it in an artifact.
    With `binding`, a report no smoke leg reported stops it too, and a wheel passes only
    on a report of its own family's smoke legs.
    """
    wheels = []
    for path in sorted(root.rglob("*.whl")):
        check_wheel_filename(path.name, what=f"downloaded artifact {path}")
        if path.is_symlink() or not path.is_file():
            raise PublishError(f"{path}: not a regular file; refusing to publish it")
        wheels.append((path, sha256_file(path), _job_of(path, root)))
    for path, sha, job in wheels:
        if built is not None and built.get(path.name) != sha:
            raise PublishError(
                f"{path.name} (artifact of {job}, sha256 {sha}): no build job of this run "
                + (
                    f"made these bytes (it reported {built[path.name]})"
                    if path.name in built
                    else "reported a wheel of this name"
                )
                + "; something else put it into an artifact, so nothing is published"
            )
    # then the reports: each one a smoke leg reported (with a binding), per family
    gate = SmokeGate.load(reports) if reports and binding is None else None
    gates = binding.gates(reports) if binding is not None else {}
    out.mkdir(parents=True, exist_ok=True)
    published: dict[str, tuple[str, str]] = {}
    held: list[tuple[str, str, str]] = []
    for path, sha, job in wheels:
        if binding is not None:
            reason = binding.verdict(gates, path.name, sha)
        else:
            reason = "no smoke report in this run" if gate is None else gate.verdict(sha)
        if reason is not None:
            held.append((path.name, job, reason))
            continue
        if path.name in published and published[path.name][0] != sha:
            raise ImmutableWheelError(
                f"{path.name}: two downloaded wheels of this name differ (jobs "
                f"{published[path.name][1]} and {job}); nothing is published"
            )
        published[path.name] = (sha, job)
        target = out / path.name
        if not target.exists():
            try:
                os.link(path, target)
            except OSError:
                shutil.copy2(path, target)
    return ReleaseWheels(
        published=tuple((name, sha, job) for name, (sha, job) in sorted(published.items())),
        held_back=tuple(sorted(held)),
    )


@dataclass(frozen=True, kw_only=True)
class UploadResult:
    uploaded: tuple[str, ...] = ()
    present: tuple[str, ...] = ()
    replaced: tuple[str, ...] = field(default=())  # unfinished uploads of an earlier attempt


def _asset_sha(api: GitHubApi, asset: Json) -> str:
    digest = asset.get("digest")
    if isinstance(digest, str) and digest.startswith("sha256:"):
        return digest.removeprefix("sha256:")
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "asset"
        api.download(asset, dest)
        return sha256_file(dest)


def ensure_release(api: GitHubApi, tag: str) -> Json:
    """The release of `tag`, created as a draft (no notes) when there is none yet: it is
    published (`publish_release`) once every asset is uploaded and verified."""
    release = api.release(tag)
    if release is not None:
        return release
    try:
        return api.create_release(tag)
    except PublishError:
        # a concurrent run (or a person) created it meanwhile
        release = api.release(tag)
        if release is None:
            raise
        return release


def upload_assets(api: GitHubApi, tag: str, files: Sequence[Path]) -> UploadResult:
    """Upload `files` to the release of `tag`; safe to run again after any failure."""
    release = ensure_release(api, tag)
    existing = {str(a["name"]): a for a in api.assets(release)}
    uploaded, present, replaced = [], [], []
    for path in files:
        name = path.name
        asset = existing.get(name)
        if asset is not None and asset.get("state") == "uploaded":
            sha = sha256_file(path)
            if int(asset.get("size", -1)) != path.stat().st_size or _asset_sha(api, asset) != sha:
                raise ImmutableWheelError(
                    f"{name}: the release {tag} has an asset of this name with other bytes "
                    f"(the new file has sha256 {sha}); published files never change: bump the "
                    "version, or delete the asset by hand if it was never installable"
                )
            present.append(name)
            continue
        if asset is not None:
            api.delete_asset(asset)  # an upload that never finished
            replaced.append(name)
        api.upload(release, path, name)
        uploaded.append(name)
    return UploadResult(uploaded=tuple(uploaded), present=tuple(present), replaced=tuple(replaced))


def missing_assets(api: GitHubApi, tag: str, manifest: Manifest, url_prefix: str) -> list[str]:
    """The wheels of `manifest` linked under `url_prefix` (this tag's downloads) that the
    release does not hold as uploaded assets of the recorded size (and digest, when known)."""
    release = api.release(tag)
    assets = {str(a["name"]): a for a in api.assets(release)} if release else {}
    problems = []
    for wheel in manifest.wheels:
        if wheel.url is None or not wheel.url.startswith(url_prefix):
            continue
        asset = assets.get(wheel.filename)
        if asset is None or asset.get("state") != "uploaded":
            problems.append(f"{wheel.filename}: not an uploaded asset of the release {tag}")
            continue
        digest = asset.get("digest")
        if int(asset.get("size", -1)) != wheel.size or (
            isinstance(digest, str) and digest != f"sha256:{wheel.sha256}"
        ):
            problems.append(f"{wheel.filename}: the asset of the release {tag} has other bytes")
    return problems


def publish_release(api: GitHubApi, tag: str) -> bool:
    """Publish the draft release of `tag`; False when it was published already."""
    release = api.release(tag)
    if release is None:
        raise PublishError(f"no release for {tag}: the publish job creates it first")
    if release.get("draft") is False:
        return False
    api.publish_release(release)
    return True


def selection_lines(selection: ReleaseWheels) -> list[str]:
    """Human lines of a selection (the job log)."""
    out = [f"  publish    {w} ({j})" for w, _, j in selection.published]
    out += [f"  held back  {w} ({j}): {r}" for w, j, r in selection.held_back]
    return out
