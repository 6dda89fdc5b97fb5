"""Replace a static site directory all at once: stage next to it, then swap.

A published site is what users' `pip install -f …` reads; it must never be seen half
written, and a crash must leave the old site in place. So a new site is built in a
staging directory next to the target (same filesystem, so renames are atomic), the
old site's files that stay are hard-linked into it (wheels can be GBs; their content
is immutable, so sharing inodes is safe), new wheels are reflinked or hard-linked in
where the filesystem allows (`link_in`), and then the two directories are swapped:

- on Linux with `renameat2(RENAME_EXCHANGE)` (kernel ≥ 3.15, glibc ≥ 2.28): one atomic
  system call; at every instant the target path holds either the complete old or the
  complete new site;
- elsewhere with two renames (old → `.NAME.old-*`, staged → NAME): between them the
  target path is briefly missing; a crash right there is recovered by the next run,
  which moves the old site back before doing anything else.

A lock file next to the site (`.NAME.lock`, `flock`) serialises publishers, so two CI
jobs publishing at once cannot lose each other's wheels.

The replaced generation is not deleted (20,000 unlinks) but kept as `.NAME.prev`, and
the next publish starts its staging directory from it: it holds nearly every file the
next site will, as the very same inodes, so a merge costs what changed since. It is
taken only after it is reduced to regular files and real directories, and only a file
that is the live site's own (same device and inode) stays; a crash while it is being
reused leaves a staging directory, removed by the next run, and the old site as it was.
"""

from __future__ import annotations

__all__ = [
    "Exchange",
    "Fault",
    "SiteTransaction",
    "exchange_dirs",
    "site_transaction",
]

import contextlib
import ctypes
import errno
import hashlib
import os
import shutil
import stat
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PublishError, note_cleanup
from ..files import fsync_dir, naming_path, open_regular, sha256_file
from ..locks import file_lock
from .links import Prelink, link_all, start_prelink

Fault = Callable[[str], None]
"""Called with a stage name at each step of a publish; tests raise (or exit) there."""

Exchange = Callable[[Path, Path], bool]
"""Atomically swap two directories; return False when the system cannot."""

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange_dirs(a: Path, b: Path) -> bool:
    """Swap directories `a` and `b` in one atomic step (Linux renameat2); False if unsupported."""
    if sys.platform != "linux":
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
    renameat2.argtypes += [ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    rc = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False  # old kernel, or a filesystem without RENAME_EXCHANGE
    raise OSError(err, os.strerror(err), f"{a} <-> {b}")


def _no_fault(stage: str) -> None:
    return None


_FSYNC_EACH_UP_TO = 256


@dataclass(kw_only=True)
class SiteTransaction:
    """A staged copy of a site; `commit()` swaps it in, leaving the context discards it."""

    site: Path
    staging: Path
    exchange: Exchange
    fault: Fault
    committed: bool = False
    written: list[Path] = field(default_factory=list)  # new files, made durable at commit
    reflinks: bool = True  # until a reflink fails (the staging dir is on one filesystem)
    reused: bool = False  # staging started as the previous generation (`.NAME.prev`)
    _dirs: set[str] = field(default_factory=set)  # directories made in the staged site
    _prelink: Prelink | None = None

    def prelink(self, directory: str, skip: Collection[str]) -> None:
        """Start linking the old site's `directory` (its regular files but `skip`) in the
        background, for `carry_over` to take; a staged site started from the previous
        generation has them already."""
        if self.site.is_dir() and self._prelink is None:
            prelink = start_prelink(self.site, self.staging, directory, skip, reused=self.reused)
            self._prelink = prelink
            if prelink is not None and not self.reused:
                self._dirs.add(directory)

    def _take_prelinked(self) -> tuple[set[str], str | None]:
        """What the background linking linked (waited for), and its directory; nothing if
        it failed: then `carry_over` links that directory again (a new one is removed
        first; the previous generation's is taken as it is, as any other part of it)."""
        prelink, self._prelink = self._prelink, None
        if prelink is None:
            return set(), None
        if prelink.finish():
            return {f"{prelink.directory}/{n}" for n in prelink.names}, prelink.directory
        if not self.reused:
            shutil.rmtree(self.staging / prelink.directory, ignore_errors=True)
            self._dirs.discard(prelink.directory)
        return set(), None

    def carry_over(self, keep: Callable[[str], bool]) -> list[str]:
        """Hard-link (or copy) the old site's regular files for which `keep(relpath)` holds
        into the staged site; sorted.

        Started from the previous generation (`reused`), the staged site already holds most
        of them as the very same files (same device and inode): those cost nothing. Before
        anything is linked, the previous generation is reduced to regular files and real
        directories (it is a directory anyone who can write the site's parent can change):
        nothing is ever created through a symbolic link in it, and a file of it that is not
        the live site's own is replaced or removed. A directory `prelink` started is taken
        from the process that linked it (or done here if that failed).
        """
        kept: list[str] = []
        prelinked, done = self._take_prelinked()  # `done`: its files are in place
        have: dict[str, tuple[int, int] | None] = {}
        dirs: list[str] = []
        if self.reused:
            have, dirs = _scan(str(self.staging), inodes=True, sanitize=True, done=done)
        # the live site's inodes matter only against the previous generation's
        live: dict[str, tuple[int, int] | None] = {}
        if self.site.is_dir():
            live = _scan(str(self.site), inodes=self.reused, done=done)[0]
        staging = str(self.staging)
        to_link: dict[str, list[str]] = defaultdict(list)  # directory → names to link there
        for rel in sorted(live):
            if not keep(rel):
                continue
            kept.append(rel)
            if rel in prelinked:
                prelinked.discard(rel)
                continue
            inode = live[rel]
            if inode is not None and have.pop(rel, None) == inode:
                continue  # the previous generation holds this very file already
            self._parent(rel)
            if self.reused:
                _remove(f"{staging}/{rel}")
            directory, _, name = rel.rpartition("/")
            to_link[directory].append(name)
        for directory, names in to_link.items():
            link_all(self.site, self.staging, directory, names)
        for rel in prelinked:  # linked early, but not kept (or gone from the site since)
            (self.staging / rel).unlink()
        for rel, inode in have.items():  # not in the new site
            _unlink_if(f"{staging}/{rel}", inode)
        needed = set()  # the directories of kept files and their ancestors
        for directory in {rel.rpartition("/")[0] for rel in kept}:
            ancestor = directory
            while ancestor and ancestor not in needed:
                needed.add(ancestor)
                ancestor = ancestor.rpartition("/")[0]
        for rel_dir in sorted(dirs, key=lambda d: d.count("/"), reverse=True):
            if rel_dir not in needed:
                _remove(f"{staging}/{rel_dir}")  # holds nothing the new site keeps
        return kept

    def write(self, rel: str, data: bytes) -> None:
        """Write one file of the new site (the staging directory is private: no temp files)."""
        dest = self.staging / rel
        self._parent(rel)
        if self.reused:
            _remove(str(dest))  # a leftover of the previous generation may share an inode
        with naming_path(dest):  # a full disk names the file it could not write
            dest.write_bytes(data)
        self.written.append(dest)

    def _parent(self, rel: str) -> None:
        """Create the directory of `rel` in the staged site, once (a site has few of them
        and tens of thousands of files)."""
        parent = rel.rpartition("/")[0]
        if parent and parent not in self._dirs:
            if self.reused:
                _clear_way(self.staging, parent)
            (self.staging / parent).mkdir(parents=True, exist_ok=True)
            self._dirs.add(parent)

    def copy_in(self, rel: str, source: Path, *, sha256: str) -> None:
        """Copy a file into the new site, checking it still has the sha256 it was published with.

        A copy, not a link: the source may change later. The check catches a file that
        changed between being read and being copied (a build writing into the wheelhouse).
        """
        dest = self.staging / rel
        self._parent(rel)
        if self.reused:
            _remove(str(dest))
        digest = hashlib.sha256()
        with naming_path(dest), open_regular(source) as src, dest.open("wb") as out:
            while chunk := src.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        self.written.append(dest)
        if digest.hexdigest() != sha256:
            raise PublishError(
                f"{source} changed while publishing (sha256 {digest.hexdigest()}, read as "
                f"{sha256}); nothing was published, run again"
            )

    def _make_durable(self) -> None:
        """Everything the new site holds is on disk before it is swapped in: a crash (power
        loss) after the swap cannot leave a site whose pages point at empty files. Few new
        files are fsynced one by one; many (a first publish of thousands) by one sync()."""
        if len(self.written) > _FSYNC_EACH_UP_TO:
            _sync_filesystem(self.staging)
        else:
            for path in self.written:
                with path.open("rb") as fh:
                    os.fsync(fh.fileno())
        for dirpath, _dirs, _names in os.walk(self.staging):
            fsync_dir(Path(dirpath))

    def link_in(
        self,
        rel: str,
        source: Path,
        *,
        sha256: str,
        size: int | None,
        mtime_ns: int | None,
        verify: bool = False,
    ) -> str:
        """Put `source` into the new site without copying its bytes where the filesystem
        allows; returns how: "reflink", "hardlink" or "copy".

        A reflink (a copy-on-write clone: Btrfs, XFS, …) is a copy that shares blocks; a
        hard link shares the file itself, which is safe because buildtools never rewrites
        a wheel in place (a rebuilt wheel is renamed over the old name, a new inode). The
        file must still be the one that was read: the same size and mtime (with `verify`,
        the same sha256), or PublishError. Without a size and mtime, or where neither
        works (another filesystem), it is copied and hashed as `copy_in` does.
        """
        if size is None or mtime_ns is None:
            self.copy_in(rel, source, sha256=sha256)
            return "copy"
        dest = self.staging / rel
        self._parent(rel)
        how = _reflink(source, dest) if self.reflinks else None
        if how is None:
            self.reflinks = False  # one filesystem: no need to try the next wheel
            try:
                os.link(source, dest)
                how = "hardlink"
            except OSError:  # another filesystem, protected_hardlinks, no links at all
                self.copy_in(rel, source, sha256=sha256)
                return "copy"
        self.written.append(dest)
        st = dest.stat() if how == "hardlink" else source.stat()
        changed = st.st_size != size or st.st_mtime_ns != mtime_ns
        if not changed and verify:
            changed = sha256_file(dest) != sha256
        if changed:
            raise PublishError(
                f"{source} changed while publishing (its size, mtime or sha256 is not what "
                "was read); nothing was published, run again"
            )
        return how

    def commit(self) -> None:
        """Swap the staged site in (after making it durable); the old one is removed after."""
        self.fault("commit")
        self._make_durable()
        if not self.site.exists():
            self.staging.rename(self.site)
            fsync_dir(self.site.parent)
            self.committed = True
            return
        if self.exchange(self.staging, self.site):
            fsync_dir(self.site.parent)
            self.committed = True
            self.fault("exchanged")
            _keep_as_previous(self.staging, self.site)
            return
        old = Path(tempfile.mkdtemp(prefix=f".{self.site.name}.old-", dir=self.site.parent))
        old.rmdir()
        self.site.rename(old)
        try:
            self.fault("between-renames")  # a hard crash here is recovered by the next run
            self.staging.rename(self.site)
            fsync_dir(self.site.parent)
        except BaseException:
            if not self.site.exists():
                old.rename(self.site)
            raise
        self.committed = True
        _keep_as_previous(old, self.site)


def _sync_filesystem(directory: Path) -> None:
    """Flush the filesystem holding `directory` (Linux `syncfs`), not every filesystem of
    the machine as `sync()` does: on a shared machine or CI runner, `sync()` waits for
    every other process's writes too (other builds, downloads) — seconds, for nothing."""
    if sys.platform == "linux":
        try:
            syncfs = ctypes.CDLL(None, use_errno=True).syncfs
        except (OSError, AttributeError):
            syncfs = None
        if syncfs is not None:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            try:
                if syncfs(fd) == 0:
                    return
            finally:
                os.close(fd)
    os.sync()


_FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)


def _reflink(source: Path, dest: Path) -> str | None:
    """Clone `source` into a new `dest` (FICLONE) with its mtime; None where unsupported."""
    if sys.platform != "linux":
        return None
    import fcntl

    try:
        with source.open("rb") as src, dest.open("xb") as out:
            try:
                fcntl.ioctl(out.fileno(), _FICLONE, src.fileno())
            except OSError:
                ok = False
            else:
                ok = True
        if ok:
            st = source.stat()
            os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))
            return "reflink"
    except OSError:
        pass
    dest.unlink(missing_ok=True)
    return None


def _previous(site: Path) -> Path:
    return site.parent / f".{site.name}.prev"


def _keep_as_previous(old: Path, site: Path) -> None:
    """Keep the replaced generation beside the site for the next publish to start from:
    it already holds (hard links to) nearly every file the next site will, so a merge
    costs its changes, not one link and one unlink per file of the site."""
    previous = _previous(site)
    if previous.is_symlink() or previous.exists():
        shutil.rmtree(old, ignore_errors=True)  # not ours to replace: stays as it is
        return
    try:
        old.rename(previous)
    except OSError:
        shutil.rmtree(old, ignore_errors=True)


def _scan(
    root: str, *, inodes: bool, sanitize: bool = False, done: str | None = None
) -> tuple[dict[str, tuple[int, int] | None], list[str]]:
    """The regular files under `root` (never following links): '/'-separated relative path
    → (device, inode), or None without `inodes` (a stat per file: only a previous
    generation is compared by inode); and its directories. Anything else (links, sockets,
    …) is left out, so never carried over; with `sanitize` (the previous generation: a
    directory anyone who can write the site's parent can change), removed. The regular
    files directly in `done` (linked in the background) are not stat'ed: left out with
    `sanitize`, else listed with None."""
    found: dict[str, tuple[int, int] | None] = {}
    dirs: list[str] = []
    stack = [("", root)]
    skip = f"{done}/" if done is not None else None
    while stack:
        prefix, directory = stack.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                rel = prefix + entry.name
                if entry.is_dir(follow_symlinks=False):
                    stack.append((rel + "/", entry.path))
                    dirs.append(rel)
                elif entry.is_file(follow_symlinks=False):
                    if prefix == skip:
                        if not sanitize:
                            found[rel] = None
                    elif inodes:
                        st = entry.stat(follow_symlinks=False)
                        found[rel] = (st.st_dev, st.st_ino)
                    else:
                        found[rel] = None
                elif sanitize:
                    Path(entry.path).unlink()  # a symbolic link, a socket, a device, a fifo
    return found, dirs


def _unlink_if(path: str, inode: tuple[int, int] | None) -> None:
    """Remove the regular file at `path` if it is still the one scanned as `inode`."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) == inode:
        Path(path).unlink()


def _remove(path: str | Path) -> None:
    """Remove whatever `path` is (a file, a link, a directory tree); nothing if absent."""
    target = Path(path)
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target, ignore_errors=True)
    else:
        target.unlink(missing_ok=True)


def _clear_way(root: Path, rel_dir: str) -> None:
    """Remove what stands where a directory of the staged site must be (a file of the
    previous generation), so that `mkdir` makes it rather than failing."""
    parts = rel_dir.split("/")
    for i in range(1, len(parts) + 1):
        path = root.joinpath(*parts[:i])
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode):
            path.unlink()
            return


def _leftovers(site: Path, kind: str) -> Iterable[Path]:
    return sorted(site.parent.glob(f".{site.name}.{kind}-*"))


def _recover(site: Path) -> None:
    """Undo what a crashed publisher left: restore a moved-away site, drop staging dirs."""
    olds = list(_leftovers(site, "old"))
    if not site.exists() and olds:
        olds[-1].rename(site)  # the crash came between the two renames of a commit
        olds = olds[:-1]
    for path in [*olds, *_leftovers(site, "staging")]:
        shutil.rmtree(path, ignore_errors=True)


def _locked(site: Path) -> contextlib.AbstractContextManager[None]:
    lock = site.parent / f".{site.name}.lock"
    return file_lock(lock, waiting=f"waiting for another publisher of {site} ({lock})")


def _site_mode(site: Path) -> int:
    if site.is_dir():
        return site.stat().st_mode & 0o7777
    umask = os.umask(0)
    os.umask(umask)
    return 0o777 & ~umask


@contextlib.contextmanager
def site_transaction(
    site: Path, *, exchange: Exchange = exchange_dirs, fault: Fault | None = None
) -> Iterator[SiteTransaction]:
    """Lock `site`, recover from a crashed publisher, and stage a new site next to it.

    Leaving the block without `commit()` (an exception, a conflict found late) removes
    the staging directory; the old site is untouched either way.
    """
    site = site.absolute()
    if site.exists() and not site.is_dir():
        raise PublishError(f"{site} exists and is not a directory; --site must be a directory")
    try:
        site.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PublishError(f"cannot create {site.parent}: {exc.strerror}") from exc
    with _locked(site):
        _recover(site)
        staging = Path(tempfile.mkdtemp(prefix=f".{site.name}.staging-", dir=site.parent))
        previous = _previous(site)
        reused = site.is_dir() and previous.is_dir() and not previous.is_symlink()
        if not reused and (previous.is_symlink() or previous.exists()):
            _remove(previous)  # of a site that is gone, or not a directory: not ours to use
        if reused:
            staging.rmdir()
            previous.rename(staging)  # a crash from here on: _recover drops it
        staging.chmod(_site_mode(site))  # mkdtemp makes 0700; a web server must read it
        txn = SiteTransaction(
            site=site,
            staging=staging,
            exchange=exchange,
            fault=fault or _no_fault,
            reused=reused,
        )
        try:
            yield txn
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: say what is cleaned up
            if not txn.committed:
                note_cleanup(exc, f"removed {staging} ({site} is as it was)")
            raise
        finally:
            txn._take_prelinked()  # nothing may still be linking into a removed directory
            if not txn.committed:
                shutil.rmtree(staging, ignore_errors=True)
