"""The release bundle: everything the signing job publishes, made by a job that cannot sign.

The publish of a release is two jobs. `prepare` holds no write permission and runs the
repository's code (select the smoke-tested wheels, restore the record, index them, say
what to attest); it writes one directory, the bundle, and outputs the sha256 of the
bundle's `MANIFEST.sha256`. The signing job (`publish`: `id-token`, `attestations` and
`contents: write`) checks nothing out and runs no repository code: it downloads the
bundle, checks that digest and every file against the manifest (no file missing, none
added), attests, uploads and publishes with the runner's own tools (bash, coreutils,
curl, jq, gh) and actions pinned by commit. A job output can be set only by the job that
declares it, so whatever else the run's jobs put into the artifact store (any of them
can, a self-hosted GPU machine included) cannot become what the release signs.

The bundle's layout (every path is fixed, so the signing job's script names them):

    MANIFEST.sha256   `sha256  path` of every other file (sha256sum's format, sorted)
    wheels/           the selected wheels
    site/             the site to deploy (the index with links to the release assets)
    record            the record's path inside the bundle (site/…/index.json)
    attest/           subjects.sha256 (the wheels and the record), predicate.json
    linked.tsv        `sha256 size name` of every wheel the new index links under this
                      tag's release downloads (the release must hold each, with those bytes)
    base-record       the asset id of the published record `site` was merged into, or
                      `none`: the signing job stops if another release recorded meanwhile
"""

from __future__ import annotations

__all__ = [
    "BASE_RECORD",
    "BUNDLE_MANIFEST",
    "LINKED",
    "Bundle",
    "manifest_text",
    "write_bundle",
]

import hashlib
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import PublishError
from ..files import check_wheel_filename, sha256_file, write_atomic
from ..index.manifest import MANIFEST_NAME, read_manifest

BUNDLE_MANIFEST = "MANIFEST.sha256"
LINKED = "linked.tsv"
BASE_RECORD = "base-record"
RECORD_FILE = "record"
# what the signing job's script accepts as a path in the bundle: nothing a shell, a
# `sha256sum` line or a URL could read as anything else
_SAFE_PATH = re.compile(r"[A-Za-z0-9._+-]+(/[A-Za-z0-9._+-]+)*")
_ASSET_ID = re.compile(r"none|[0-9]{1,20}")


@dataclass(frozen=True, kw_only=True)
class Bundle:
    """What `write_bundle` made: its directory, its manifest's digest, what it holds."""

    root: Path
    digest: str  # sha256 of MANIFEST.sha256: the prepare job's output
    wheels: tuple[str, ...]
    linked: int
    files: int


def _check_path(rel: str) -> str:
    if not _SAFE_PATH.fullmatch(rel) or any(part in (".", "..") for part in rel.split("/")):
        raise PublishError(
            f"{rel!r}: not a path the release bundle may hold (letters, digits, `._+-` "
            "and `/` only); nothing is published"
        )
    return rel


def manifest_text(root: Path) -> str:
    """`sha256  path` of every file under `root` but the manifest itself, sorted by path
    (what `sha256sum --check` reads); anything but a regular file or a directory is refused."""
    lines = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise PublishError(f"{rel}: not a regular file; the release bundle holds files only")
        if path.is_dir() or rel == BUNDLE_MANIFEST:
            continue
        lines.append((_check_path(rel), sha256_file(path)))
    return "".join(f"{sha}  {rel}\n" for rel, sha in sorted(lines))


def _copy_tree(src: Path, dest: Path) -> int:
    count = 0
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src).as_posix()
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise PublishError(f"{src}/{rel}: not a regular file; the site holds files only")
        _check_path(rel)
        if path.is_dir():
            (dest / rel).mkdir(parents=True, exist_ok=True)
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest / rel)
        count += 1
    return count


def write_bundle(
    out: Path,
    *,
    wheels: Sequence[Path],
    site: Path,
    record: Path,
    attest: Path,
    url_prefix: str,
    base_record: str,
) -> Bundle:
    """Make the bundle in `out` (emptied first) from the prepare job's results.

    `site`: the pages root; `record`: its index.json (under `site`); `attest`: the
    directory `ci release-subjects` wrote; `url_prefix`: this tag's release downloads;
    `base_record`: the asset id of the record the site was merged into, or `none`.
    """
    if not _ASSET_ID.fullmatch(base_record):
        raise PublishError(f"--base-record {base_record!r}: an asset id or `none`")
    try:
        record_rel = record.resolve().relative_to(site.resolve()).as_posix()
    except ValueError:
        raise PublishError(f"{record}: the record is not inside the site {site}") from None
    if record.name != MANIFEST_NAME:
        raise PublishError(f"{record}: the record is the site's {MANIFEST_NAME}")
    if out.exists():
        shutil.rmtree(out)
    (out / "wheels").mkdir(parents=True)
    names = []
    for wheel in sorted(wheels, key=lambda p: p.name):
        check_wheel_filename(wheel.name, what=f"selected wheel {wheel}")
        if wheel.is_symlink() or not wheel.is_file():
            raise PublishError(f"{wheel}: not a regular file; nothing is published")
        if (out / "wheels" / wheel.name).exists():
            raise PublishError(f"{wheel.name}: selected twice; nothing is published")
        shutil.copyfile(wheel, out / "wheels" / _check_path(wheel.name))
        names.append(wheel.name)
    files = _copy_tree(site, out / "site")
    for name in ("subjects.sha256", "predicate.json"):
        if not (attest / name).is_file():
            raise PublishError(f"{attest / name}: missing (run `buildtools ci release-subjects`)")
        (out / "attest").mkdir(exist_ok=True)
        shutil.copyfile(attest / name, out / "attest" / name)
    manifest = read_manifest(record.parent)
    linked = sorted(
        (w.filename, w.sha256, w.size)
        for w in manifest.wheels
        if w.url is not None and w.url.startswith(url_prefix)
    )
    write_atomic(out / LINKED, "".join(f"{sha} {size} {name}\n" for name, sha, size in linked))
    write_atomic(out / BASE_RECORD, base_record + "\n")
    write_atomic(out / RECORD_FILE, _check_path(f"site/{record_rel}") + "\n")
    text = manifest_text(out)
    write_atomic(out / BUNDLE_MANIFEST, text)
    return Bundle(
        root=out,
        digest=hashlib.sha256(text.encode()).hexdigest(),
        wheels=tuple(names),
        linked=len(linked),
        files=files,
    )
