"""Publishing reuses hashes it can trust and links wheels into the site (no timings here)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from buildtools.cli.main import main
from buildtools.errors import PublishError
from buildtools.index.hashes import KnownHash, manifest_hashes, report_hashes, trusted_sha256
from buildtools.index.manifest import read_manifest
from buildtools.index.publish import PublishOptions, publish
from buildtools.index.transaction import site_transaction
from buildtools.index.wheels import read_wheel, read_wheels

from .test_index import KB, REL, wheel

SHA = "a" * 64


def stat_of(size: int, mtime_ns: int) -> os.stat_result:
    fields = (0o100644, 0, 0, 1, 0, 0, size, 0, 0, 0, 0.0, 0.0, 0.0, 0, mtime_ns, 0)
    return os.stat_result(fields)


@pytest.mark.parametrize(
    ("known", "size", "mtime", "verify", "expected"),
    [
        (KnownHash(sha256=SHA, size=10, mtime_ns=5, source="report"), 10, 5, False, SHA),
        (KnownHash(sha256=SHA, size=10, mtime_ns=5, source="report"), 11, 5, False, None),
        (KnownHash(sha256=SHA, size=10, mtime_ns=5, source="report"), 10, 6, False, None),
        (KnownHash(sha256=SHA, size=10, mtime_ns=5, source="manifest"), 10, 5, True, None),
        (None, 10, 5, False, None),
    ],
    ids=["unchanged", "size-changed", "touched", "verify", "unknown"],
)
def test_a_known_hash_is_taken_only_for_the_file_as_it_was_hashed(
    known: KnownHash | None, size: int, mtime: int, verify: bool, expected: str | None
) -> None:
    assert trusted_sha256(known, stat_of(size, mtime), verify=verify) == expected


def write_report(directory: Path, *wheels: Path, sha: str | None = None, **extra: object) -> None:
    cells = []
    for w in wheels:
        st = w.stat()
        cells.append(
            {
                "cell": w.name,
                "status": "built",
                "wheel": str(w),
                "sha256": sha or hashlib.sha256(w.read_bytes()).hexdigest(),
                "size": st.st_size,
                "mtime_ns": st.st_mtime_ns,
                **extra,
            }
        )
    data = {"schema": "torch-buildtools/run-report/v1", "cells": cells}
    (directory / "report.json").write_text(json.dumps(data))


def test_the_build_reports_hash_is_reused_while_the_wheel_is_unchanged(tmp_path: Path) -> None:
    path = wheel(tmp_path)
    write_report(tmp_path, path, sha=SHA)  # a recorded hash the file does not have
    assert report_hashes(tmp_path)[path.name].sha256 == SHA
    (src,) = read_wheels([path])
    assert src.wheel.sha256 == SHA  # taken, not recomputed: the record is trusted
    (verified,) = read_wheels([path], verify=True)
    assert verified.wheel.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    os.utime(path, ns=(0, path.stat().st_mtime_ns + 1))  # touched since the build
    (again,) = read_wheels([path])
    assert again.wheel.sha256 == verified.wheel.sha256


def test_reports_that_cannot_be_trusted_give_nothing(tmp_path: Path) -> None:
    path = wheel(tmp_path)
    (tmp_path / "report.json").write_text("{broken")
    assert report_hashes(tmp_path) == {}
    write_report(tmp_path, path, mtime_ns=None)  # an older report: no mtime
    assert report_hashes(tmp_path) == {}
    other = tmp_path / "other"
    other.mkdir()
    write_report(other, path)  # a report about wheels of another directory
    assert report_hashes(other) == {}


def test_a_wheel_the_site_hosts_as_this_file_is_unchanged_without_being_read(
    tmp_path: Path,
) -> None:
    wh, site = tmp_path / "wh", tmp_path / "site"
    wh.mkdir()
    path = wheel(wh)
    publish(site, [read_wheel(path)], REL, KB)
    published = read_manifest(site).wheels
    known = manifest_hashes(site, published, [path.name])
    assert known[path.name].source == "manifest"
    assert (site / "wheels" / path.name).stat().st_mtime_ns == path.stat().st_mtime_ns
    (src,) = read_wheels([path], site=site)
    assert src.metadata == b"" and src.wheel == published[0]  # from the manifest
    result = publish(site, [src], REL, KB)
    assert result.unchanged == (path.name,) and result.added == ()
    # a rebuilt file with the same name is read (and refused: published wheels are immutable)
    rebuilt = wheel(tmp_path, payload=b"other bytes")
    rebuilt.replace(path)
    (fresh,) = read_wheels([path], site=site)
    assert fresh.metadata != b"" and fresh.wheel.sha256 != published[0].sha256


def test_new_wheels_are_linked_into_the_site_and_checked_first(tmp_path: Path) -> None:
    wh, site = tmp_path / "wh", tmp_path / "site"
    wh.mkdir()
    path = wheel(wh)
    publish(site, read_wheels([path]), REL, KB)
    hosted = site / "wheels" / path.name
    assert hosted.read_bytes() == path.read_bytes()
    # same filesystem: a reflink or a hard link, never a second copy's write
    assert hosted.stat().st_mtime_ns == path.stat().st_mtime_ns
    copied_site = tmp_path / "copied"
    publish(copied_site, read_wheels([path]), REL, KB, options=PublishOptions(link=False))
    assert not (copied_site / "wheels" / path.name).samefile(path)


def test_a_wheel_that_changed_after_it_was_read_is_not_published(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    wh.mkdir()
    path = wheel(wh)
    (src,) = read_wheels([path])
    os.utime(path, ns=(0, path.stat().st_mtime_ns + 10))
    with site_transaction(tmp_path / "site") as txn, pytest.raises(PublishError, match="changed"):
        txn.link_in(
            "wheels/x.whl", path, sha256=src.wheel.sha256, size=src.size, mtime_ns=src.mtime_ns
        )
    (src,) = read_wheels([path])
    with site_transaction(tmp_path / "site") as txn, pytest.raises(PublishError, match="changed"):
        txn.link_in(  # --verify: the bytes are hashed, a wrong recorded sha256 is caught
            "wheels/x.whl", path, sha256=SHA, size=src.size, mtime_ns=src.mtime_ns, verify=True
        )


def test_the_cli_takes_verify_and_copy(tmp_path: Path) -> None:
    wh, site = tmp_path / "wh", tmp_path / "site"
    wh.mkdir()
    path = wheel(wh)
    write_report(wh, path, sha=SHA)  # a wrong recorded hash: only --verify sees through it
    out = io.StringIO()
    assert main(["index", str(wh), "--site", str(site), "--no-matrix", "--verify"], out=out) == 0
    manifest = read_manifest(site)
    assert manifest.wheels[0].sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    write_report(wh, path)
    other = tmp_path / "other"
    assert main(["index", str(wh), "--site", str(other), "--no-matrix", "--copy"], out=out) == 0
    assert not (other / "wheels" / path.name).samefile(path)


def test_a_large_wheelhouse_is_read_in_processes_with_the_same_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thousands of wheels are read by forked processes, chunk by chunk: the result is the
    sequential one, in the same order, and a bad wheel fails it as it would sequentially."""
    from buildtools.index import wheels as wheels_mod

    paths = [
        wheel(tmp_path / "wh", version=f"0.1.{i}+pt213cpu", payload=str(i).encode())
        for i in range(7)
    ]
    sequential = read_wheels(paths)
    pids = tmp_path / "pids"
    real_read = wheels_mod.read_wheel

    def read(path: Path, **kwargs: Any) -> wheels_mod.WheelSource:
        with pids.open("a") as fh:  # the children inherit this function through fork
            fh.write(f"{os.getpid()}\n")
        return real_read(path, **kwargs)

    monkeypatch.setattr(wheels_mod, "PARALLEL_FROM", 2)
    monkeypatch.setattr(wheels_mod, "_CHUNK", 2)
    monkeypatch.setattr(wheels_mod, "_workers", lambda: 2)
    monkeypatch.setattr(wheels_mod, "read_wheel", read)
    parallel = read_wheels(paths)
    assert [s.wheel for s in parallel] == [s.wheel for s in sequential]
    assert [s.metadata for s in parallel] == [s.metadata for s in sequential]
    assert [s.path for s in parallel] == paths
    readers = set(pids.read_text().split())
    assert readers and str(os.getpid()) not in readers  # every read ran in another process

    (tmp_path / "wh" / paths[5].name).write_bytes(b"not a zip")
    (tmp_path / "wh" / paths[3].name).write_bytes(b"not a zip either")
    with pytest.raises(PublishError, match=re.escape(paths[3].name)):
        read_wheels(paths)


@pytest.mark.skipif(sys.platform != "linux", reason="syncfs is Linux's")
def test_a_large_publish_flushes_its_own_filesystem_not_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thousands of new files are made durable by one flush of the site's filesystem
    (syncfs): a global sync() would wait for every other process's writes."""
    from buildtools.index import transaction

    def global_sync() -> None:
        raise AssertionError("sync() of every filesystem")

    monkeypatch.setattr(os, "sync", global_sync)
    site = tmp_path / "site"
    with site_transaction(site) as txn:
        for i in range(transaction._FSYNC_EACH_UP_TO + 1):
            txn.write(f"f{i}.txt", b"x")
        txn.commit()
    assert len(list(site.iterdir())) == transaction._FSYNC_EACH_UP_TO + 1


def _three_generations(tmp_path: Path) -> tuple[Path, list[Path]]:
    """A site published twice (so a previous generation exists), and a third wheel."""
    wh = tmp_path / "wh"
    paths = [wheel(wh, version=f"0.1.{i}+pt213cpu", payload=str(i).encode()) for i in range(3)]
    site = tmp_path / "site"
    publish(site, [read_wheel(paths[0])], REL, KB)
    publish(site, [read_wheel(paths[1])], REL, KB)
    assert (tmp_path / ".site.prev").is_dir()  # the replaced generation, kept
    return site, paths


def test_a_merge_starts_from_the_previous_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replaced generation is kept beside the site and the next publish starts from
    it: the files it shares with the live site (same inode) are not linked again, so a
    merge links only what changed since — not every file of the site."""
    site, paths = _three_generations(tmp_path)
    linked: list[str] = []
    real_link = os.link

    def link(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        linked.append(str(dst))
        real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "link", link)
    publish(site, [read_wheel(paths[2])], REL, KB)
    names = sorted(Path(p).name for p in linked)
    # the second generation's wheel + metadata (not in the kept first generation), and
    # the new wheel: the first wheel and its metadata were already there
    assert paths[0].name not in names and f"{paths[0].name}.metadata" not in names
    assert paths[1].name in names and paths[2].name in names
    assert len(read_manifest(site).wheels) == 3
    for w in read_manifest(site).wheels:
        assert hashlib.sha256((site / "wheels" / w.filename).read_bytes()).hexdigest() == w.sha256


def test_a_tampered_previous_generation_cannot_reach_the_site(tmp_path: Path) -> None:
    """The previous generation is a directory anyone with write access to the site's
    parent could change: a file that is not the live site's own (another inode), an
    extra wheel, a symlink, a stray directory — none of it reaches the new site."""
    site, paths = _three_generations(tmp_path)
    prev = tmp_path / ".site.prev"
    kept = prev / "wheels" / paths[0].name
    kept.unlink()
    kept.write_bytes(b"not the published wheel")  # same name, another inode
    (prev / "wheels" / "evil-1.0-py3-none-any.whl").write_bytes(b"x")
    (prev / "wheels" / "link.whl").symlink_to("/etc/passwd")
    (prev / "junk").mkdir()
    (prev / "junk" / "x").write_bytes(b"x")
    publish(site, [read_wheel(paths[2])], REL, KB)
    files = sorted(p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file())
    assert not any("evil" in f or "link.whl" in f or f.startswith("junk") for f in files)
    assert not any(p.is_symlink() for p in site.rglob("*"))
    for w in read_manifest(site).wheels:
        assert hashlib.sha256((site / "wheels" / w.filename).read_bytes()).hexdigest() == w.sha256


def test_a_crash_while_reusing_the_previous_generation_leaves_the_site(tmp_path: Path) -> None:
    """A publisher killed after taking the previous generation as its staging directory
    leaves the live site as it was; the next run starts from scratch and works."""

    class Crash(Exception):
        pass

    def fault(at: str) -> None:
        if at == "carried-over":
            raise Crash(at)

    site, paths = _three_generations(tmp_path)
    before = {
        p.relative_to(site).as_posix(): p.read_bytes() for p in site.rglob("*") if p.is_file()
    }
    with pytest.raises(Crash):
        publish(site, [read_wheel(paths[2])], REL, KB, options=PublishOptions(fault=fault))
    after = {p.relative_to(site).as_posix(): p.read_bytes() for p in site.rglob("*") if p.is_file()}
    assert after == before
    publish(site, [read_wheel(paths[2])], REL, KB)
    assert len(read_manifest(site).wheels) == 3
