"""A merge into a large site touches what changed: the same site, fewer file operations.

A merge starts from the previous generation (`.NAME.prev`) and keeps every page the live
site already holds with the right bytes; what it gives must be exactly what a publish of
the same wheels into a new site gives, whatever the previous generation or the live
pages hold.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from buildtools.index import links, transaction
from buildtools.index.manifest import read_manifest
from buildtools.index.publish import PublishOptions, publish
from buildtools.index.transaction import SiteTransaction
from buildtools.index.wheels import read_wheel

from .test_index import KB, REL, snapshot, wheel


@pytest.fixture(params=["inline", "forked", "by-path"], autouse=True)
def linking(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test three ways: the old site's `wheels/` linked by the publisher, by a forked
    process (what a site of 2,000 wheels or more gets), and by path (where links relative
    to an open directory are missing: Windows)."""
    if request.param == "forked":
        monkeypatch.setattr(links, "PRELINK_FROM", 1)
    if request.param == "by-path":
        monkeypatch.setattr(os, "supports_dir_fd", set())
    return str(request.param)


def tree(root: Path) -> tuple[dict[str, bytes], list[str]]:
    """Files (with their bytes) and directories of a site."""
    dirs = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_dir())
    return snapshot(root), dirs


def wheels(tmp_path: Path) -> list[Path]:
    """Wheels on several pages: two torch releases (one patch-aliased), two accelerators."""
    wh = tmp_path / "wh"
    return [
        wheel(wh, version="0.1.0+pt213cpu"),
        wheel(wh, version="0.1.0+pt213cu130", torch="2.13.0+cu130", accelerator="cu130"),
        wheel(
            wh,
            version="0.1.0+pt211cpu",
            torch="2.11.0+cpu",
            torch_spec="torch==2.11.*",
        ),
        wheel(wh, version="0.2.0+pt213cpu", tag="cp312-cp312-manylinux_2_28_x86_64"),
        wheel(wh, version="0.3.0+pt213cu130", torch="2.13.0+cu130", accelerator="cu130"),
    ]


def publish_paths(site: Path, paths: list[Path], *, keep_previous: bool = True) -> None:
    publish(site, [read_wheel(p) for p in paths], REL, KB)
    if not keep_previous:
        shutil.rmtree(site.parent / f".{site.name}.prev", ignore_errors=True)


def test_merges_one_by_one_give_exactly_the_site_one_publish_gives(tmp_path: Path) -> None:
    paths = wheels(tmp_path)
    whole = tmp_path / "whole"
    publish_paths(whole, paths)
    site = tmp_path / "site"
    for path in paths:  # the second merge on starts from the previous generation
        publish_paths(site, [path])
        assert read_manifest(site).wheels
    assert (tmp_path / ".site.prev").is_dir()
    assert tree(site) == tree(whole)


def test_a_merge_writes_only_the_pages_that_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adding a cu130 wheel leaves the pages of torch 2.11 and of cpu as they are: the new
    site holds the live site's very files (same inode), and they were not written."""
    paths = wheels(tmp_path)
    site = tmp_path / "site"
    publish_paths(site, paths[:3])
    publish_paths(site, paths[3:4])
    before = {p.relative_to(site).as_posix(): p.stat().st_ino for p in site.rglob("*.html")}
    written: list[str] = []
    real_write = SiteTransaction.write

    def write(self: SiteTransaction, rel: str, data: bytes) -> None:
        written.append(rel)
        real_write(self, rel, data)

    monkeypatch.setattr(SiteTransaction, "write", write)
    publish_paths(site, paths[4:])
    untouched = [rel for rel in before if "cpu" in rel or "2.11" in rel]
    assert untouched and not set(untouched) & set(written)
    for rel in untouched:
        assert (site / rel).stat().st_ino == before[rel]
    assert "torch-2.13.0+cu130.html" in written and "index.json" in written
    assert "index.html" in written  # the landing page counts every wheel


def test_a_tampered_live_page_is_rendered_again(tmp_path: Path) -> None:
    """A page is kept only with exactly the bytes the renderer gives; an edited page (or
    one replaced by a symbolic link) is written again."""
    paths = wheels(tmp_path)
    whole = tmp_path / "whole"
    publish_paths(whole, paths)
    site = tmp_path / "site"
    publish_paths(site, paths[:3])
    page = site / "torch-2.11.0+cpu.html"
    page.write_bytes(page.read_bytes().replace(b"</body>", b"<script>x</script></body>"))
    other = site / "torch-2.13.0+cpu.html"
    other.unlink()
    other.symlink_to("index.json")  # inside the site (a link out is refused, see test_index)
    publish_paths(site, paths[3:])
    assert tree(site) == tree(whole)
    assert not any(p.is_symlink() for p in site.rglob("*"))


def published_twice(tmp_path: Path) -> tuple[list[Path], Path, Path]:
    """(the wheels, a site of all of them published at once, a site published into twice:
    two wheels, then one, so it has a previous generation) of the same wheels."""
    paths = wheels(tmp_path)
    whole = tmp_path / "whole"
    publish_paths(whole, paths)
    site = tmp_path / "site"
    publish_paths(site, paths[:2])
    publish_paths(site, paths[2:3])
    return paths, whole, site


def test_a_previous_generation_with_links_where_directories_were_is_made_safe(
    tmp_path: Path,
) -> None:
    """The previous generation's `wheels/` replaced by a link to a directory outside and a
    page directory replaced by a file: nothing is written outside, the site is whole."""
    paths, whole, site = published_twice(tmp_path)
    prev = tmp_path / ".site.prev"
    outside = tmp_path / "outside"
    outside.mkdir()
    for p in (prev / "wheels").iterdir():
        p.unlink()
    (prev / "wheels").rmdir()
    (prev / "wheels").symlink_to(outside)
    victim = prev / "torch-2.13.0+cpu"
    for p in sorted(victim.rglob("*"), key=lambda p: -len(p.parts)):
        p.rmdir() if p.is_dir() else p.unlink()
    victim.rmdir()
    victim.write_bytes(b"not a directory")
    (prev / "stray").mkdir()
    (prev / "stray" / "x.html").write_bytes(b"x")
    publish_paths(site, paths[3:])
    assert list(outside.iterdir()) == []
    assert tree(site) == tree(whole)


def test_a_crash_before_the_swap_of_a_reused_generation_leaves_the_site(
    tmp_path: Path,
) -> None:
    """Killed after the previous generation was turned into the new site's pages, the
    publisher leaves the live site byte-identical; the next run gives the whole site."""

    class Crash(Exception):
        pass

    def fault(at: str) -> None:
        if at == "pages-written":
            raise Crash(at)

    paths, whole, site = published_twice(tmp_path)
    before = tree(site)
    with pytest.raises(Crash):
        publish(
            site, [read_wheel(p) for p in paths[3:]], REL, KB, options=PublishOptions(fault=fault)
        )
    assert tree(site) == before
    publish_paths(site, paths[3:])
    assert tree(site) == tree(whole)


@pytest.mark.parametrize("previous", [False, True])
@pytest.mark.parametrize("child_fails", [False, True])
def test_wheels_linked_by_a_forked_process_give_the_same_site(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    child_fails: bool,
    previous: bool,
    linking: str,
) -> None:
    """A large `wheels/` is linked by a forked process while the pages are rendered; the
    site is the same as without it, and the same when that process fails (the publisher
    links everything itself)."""
    paths = wheels(tmp_path)
    whole = tmp_path / "whole"
    publish_paths(whole, paths)
    started: list[bool] = []
    real_start = links.start_prelink

    def start(*args: Any, **kwargs: Any) -> Any:
        prelink = real_start(*args, **kwargs)
        started.append(prelink is not None)
        return prelink

    monkeypatch.setattr(transaction, "start_prelink", start)
    # the publisher forks only from a single-threaded process; a daemon thread an earlier
    # test of the session left running (an HTTP server, a watchdog) must not turn this
    # test's fork off
    monkeypatch.setattr(links.threading, "active_count", lambda: 1)
    if child_fails:

        def fail(*args: Any) -> None:
            raise OSError("no links today")

        monkeypatch.setattr(links, "link_all", fail)  # the child's, not the publisher's
        monkeypatch.setattr(links, "sync_from", fail)
    site = tmp_path / "site"
    publish_paths(site, paths[:2])  # into a new site: nothing to link
    if previous:  # a second publish: the merge starts from the previous generation
        publish_paths(site, paths[2:3])
        prev = tmp_path / ".site.prev"
        (prev / "wheels" / paths[0].name).unlink()  # not the live site's file any more
        (prev / "wheels" / paths[0].name).write_bytes(b"tampered")
        (prev / "wheels" / "x.whl").symlink_to("/etc/passwd")
        (prev / "wheels" / "evil-1.0-py3-none-any.whl").write_bytes(b"not published")
        (prev / "wheels" / "sub").mkdir()  # a directory the site does not have
    else:
        publish_paths(site, paths[2:3], keep_previous=False)
    started.clear()
    publish_paths(site, paths[3:])
    assert started == [linking == "forked"]
    assert tree(site) == tree(whole)
    assert not any(p.is_symlink() for p in site.rglob("*"))
