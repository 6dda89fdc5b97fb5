"""Hard-linking the old site's files into the staged one, a directory at a time.

A merge into a site of 10,000 wheels links 20,000 files of its `wheels/` (10 µs each on
ext4: most of the merge), and nothing about them depends on the manifest or the pages.
So a large `wheels/` is linked by a forked process while the publisher reads
`index.json` and renders the pages, on another core. Where it cannot be forked safely
(another thread runs, not Linux) or fails, the publisher links everything itself, as it
would without it: the staged site is the same either way.
"""

from __future__ import annotations

__all__ = ["PRELINK_FROM", "Prelink", "link_all", "start_prelink", "sync_from"]

import multiprocessing
import os
import shutil
import stat
import sys
import threading
from collections.abc import Collection
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path

PRELINK_FROM = 2000
"""Files in the directory before linking them in a forked process pays: forking costs
a few milliseconds, linking 2,000 files ~20 ms on ext4."""

_TIMEOUT_S = 600.0


def link_all(site: Path, staging: Path, directory: str, names: Collection[str]) -> None:
    """Hard-link (or copy) `names` of the site's `directory` into the staged one: relative
    to open directories (a site's `wheels/` holds 20,000 names: no path walked twice)."""
    source = site / directory if directory else site
    dest = staging / directory if directory else staging
    if os.link not in os.supports_dir_fd or not hasattr(os, "O_DIRECTORY"):  # Windows
        for name in names:
            try:
                os.link(source / name, dest / name)
            except OSError:
                shutil.copyfile(source / name, dest / name)
        return
    flags = os.O_RDONLY | os.O_DIRECTORY
    src_fd = os.open(source, flags)  # the site itself may be a link to its directory
    try:
        dest_fd = os.open(dest, flags | os.O_NOFOLLOW)  # a real directory, made or cleared
        try:
            for name in names:
                try:
                    os.link(name, name, src_dir_fd=src_fd, dst_dir_fd=dest_fd)
                except OSError:  # another filesystem, no hard links
                    shutil.copyfile(source / name, dest / name)
        finally:
            os.close(dest_fd)
    finally:
        os.close(src_fd)


@dataclass(kw_only=True)
class Prelink:
    """A forked process linking the regular files `names` of the site's `directory`."""

    directory: str
    names: frozenset[str]
    process: BaseProcess

    def finish(self) -> bool:
        """Wait for it; whether every name was linked (else the caller removes the
        directory it was linking into and links it again itself)."""
        self.process.join(_TIMEOUT_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        return self.process.exitcode == 0


def sync_from(site: Path, staging: Path, directory: str, names: Collection[str]) -> None:
    """Make the staged `directory` (the previous generation's) hold, as its regular files,
    the site's very files `names` and nothing else: a file that is already the site's
    (same device and inode) stays, another is replaced, the rest removed; anything but
    regular files and directories is removed. OSError where a name is no longer a
    regular file of the site (the caller then does it all itself)."""
    source, dest = site / directory, staging / directory
    try:
        if not stat.S_ISDIR(os.lstat(dest).st_mode):
            dest.unlink()  # a file or a link where the directory must be
            dest.mkdir()
    except FileNotFoundError:
        dest.mkdir()
    have: dict[str, tuple[int, int]] = {}
    with os.scandir(dest) as entries:
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                st = entry.stat(follow_symlinks=False)
                have[entry.name] = (st.st_dev, st.st_ino)
            elif not entry.is_dir(follow_symlinks=False):
                Path(entry.path).unlink()  # a link, a socket, a device, a fifo
    src_fd = os.open(source, os.O_RDONLY | os.O_DIRECTORY)
    try:
        dest_fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            for name in names:
                st = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode):
                    raise OSError(f"{source / name} is no longer a regular file")
                if have.pop(name, None) == (st.st_dev, st.st_ino):
                    continue  # this very file
                if (dest / name).is_dir() and not (dest / name).is_symlink():
                    shutil.rmtree(dest / name)
                else:
                    (dest / name).unlink(missing_ok=True)
                os.link(name, name, src_dir_fd=src_fd, dst_dir_fd=dest_fd)
        finally:
            os.close(dest_fd)
    finally:
        os.close(src_fd)
    for name in have:
        (dest / name).unlink()


def _child(site: Path, staging: Path, directory: str, names: Collection[str], reused: bool) -> None:
    try:
        if reused:
            sync_from(site, staging, directory, names)
        else:
            link_all(site, staging, directory, names)
    except BaseException:
        os._exit(1)  # the publisher links them itself; no traceback of the child
    os._exit(0)  # not multiprocessing's exit: it would flush the parent's stdout again


def start_prelink(
    site: Path, staging: Path, directory: str, skip: Collection[str], *, reused: bool
) -> Prelink | None:
    """Start linking the regular files of the site's `directory` but `skip` into
    `staging/directory`: a new directory, or with `reused` the previous generation's
    (`sync_from`). None where the directory is small, missing, or forking unsafe
    (forking is only safe from a single-threaded process)."""
    if sys.platform != "linux" or threading.active_count() > 1:
        return None
    try:
        with os.scandir(site / directory) as entries:
            names = frozenset(
                e.name for e in entries if e.is_file(follow_symlinks=False) and e.name not in skip
            )
    except OSError:
        return None
    if len(names) < PRELINK_FROM:
        return None
    if not reused:
        (staging / directory).mkdir()
    context = multiprocessing.get_context("fork")
    args = (site, staging, directory, names, reused)
    process = context.Process(target=_child, args=args, daemon=True)
    try:
        process.start()
    except (AssertionError, OSError):  # a daemonic process may not fork one; no memory
        return None
    return Prelink(directory=directory, names=names, process=process)
