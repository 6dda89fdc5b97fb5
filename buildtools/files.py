"""File operations every stage shares: safe joins, reading inputs, atomic writes, hashes.

Every path that comes from an artefact buildtools did not make (a wheel's zip members, a
published site's manifest, a RECORD, a build record) goes through `safe_join`: an absolute
path, a drive letter, a `..` component, a NUL or a symlink that leads out of the root is
refused with `UnsafeArtefactError` (exit code 15), never joined.

Every file a user or an artefact names as an input (a matrix, a wheel, a smoke report, a
setup.py) is opened by `open_regular`: its type is checked before it is opened and again
on the open descriptor, so a FIFO (which blocks forever), a device (`/dev/zero` never
ends), a socket or a directory is refused with one line (`NotRegularFileError`, an
OSError naming the path) instead of hanging or filling memory. A file read from a
directory someone else controls (a repository `init` adopts) is opened by `open_within`,
which also refuses a symbolic link leading out of that directory.
"""

from __future__ import annotations

__all__ = [
    "NotRegularFileError",
    "check_member_names",
    "check_wheel_filename",
    "copy_atomic",
    "describe_os_error",
    "file_kind",
    "fsync_dir",
    "naming_path",
    "open_regular",
    "open_within",
    "private_dir",
    "read_private",
    "read_regular",
    "read_within",
    "safe_join",
    "sha256_file",
    "write_atomic",
]

import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from .errors import UnsafeArtefactError

_DRIVE_RE = re.compile(r"^[A-Za-z]:")
_SAFE_TEXT_RE = re.compile(r"[^\x00-\x1f\x7f]*")  # no control character


def safe_join(root: Path, member: str, *, what: str = "path") -> Path:
    """`root / member`, or UnsafeArtefactError when `member` could land outside `root`.

    Refused: empty names, NUL and other control characters, absolute paths (`/x`, `\\x`),
    drive letters (`C:x`), backslashes, `..` components, and names that resolve outside
    `root` through a symlink already inside it.
    """
    problem = _lexical_problem(member)
    if problem is None:
        target = root / member
        base = root.resolve()
        if not target.resolve().is_relative_to(base):
            problem = "leads out of its directory through a symbolic link"
        else:
            return target
    raise UnsafeArtefactError(f"{what} {member!r} {problem}; refusing to write or read it")


def _lexical_problem(member: str) -> str | None:
    """What makes `member` unsafe by its text alone, or None."""
    if not member or member in (".", "./"):
        return "is empty"
    if not _SAFE_TEXT_RE.fullmatch(member):
        return "contains a control character"
    if member.startswith(("/", "\\")) or _DRIVE_RE.match(member):
        return "is absolute"
    if "\\" in member:
        return "contains a backslash"
    if ".." in member and ".." in PurePosixPath(member).parts:
        return "climbs out with '..'"
    return None


def check_member_names(names: Iterable[str], *, what: str) -> None:
    """UnsafeArtefactError when any archive member name could land outside its root (what a
    zip-slip wheel holds): one bad member makes the whole archive untrusted.

    The names are judged by their text (as `safe_join` judges them): nothing is on disk
    yet for a symbolic link to lead out through, so no path is resolved (a wheel with
    thousands of members is checked in microseconds).
    """
    for name in names:
        member = name.removesuffix("/") or name
        problem = _lexical_problem(member)
        if problem is not None:
            shown = repr(member) if len(member) <= 100 else repr(member[:60]) + "…"
            raise UnsafeArtefactError(
                f"{what}: member {shown} {problem}; refusing to write or read it"
            )


# The wheel file names tools write (`pip wheel`, `build`, `buildtools build`): an escaped
# project name, a PEP 440 version without epoch or alternative spellings, an optional build
# tag, identifier interpreter tags, non-empty ABI and platform tags; ASCII only. Every name
# it takes, packaging's `parse_wheel_filename` takes with the same fields (checked by
# tests/unit/test_wheel_filename.py). It exists because a site's manifest lists thousands
# of names and packaging builds a Version and a set of Tags for each, which nothing here
# needs. Anything else goes to packaging, which decides and words the error.
_CANONICAL_WHEEL_RE = re.compile(
    r"(?P<name>[A-Za-z0-9]+(?:[._][A-Za-z0-9]+)*)"
    r"-(?P<version>[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc)[0-9]+)?(?:\.post[0-9]+)?(?:\.dev[0-9]+)?"
    r"(?:\+[a-z0-9]+(?:\.[a-z0-9]+)*)?)"
    r"(?:-(?P<build>[0-9]+[A-Za-z0-9_.]*))?"
    r"-(?P<python>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)"
    r"-(?P<abi>[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*)"
    r"-(?P<platform>[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*)"
    r"\.whl",
    re.ASCII,
)


_NAME_MAX = 255  # bytes of one file name (NAME_MAX of Linux, macOS and Windows)


def check_wheel_filename(name: str, *, what: str = "wheel") -> str:
    """`name` when it is a bare wheel file name (PEP 427), else UnsafeArtefactError. At most
    255 bytes, as any file name: a longer one (a tag of 5,000 digits) names no file."""
    if len(name.encode("utf-8", "surrogatepass")) > _NAME_MAX:
        raise UnsafeArtefactError(
            f"{what} {name[:60]!r}… is not a wheel file name (longer than the {_NAME_MAX} bytes "
            "a file name may have)"
        )
    if _CANONICAL_WHEEL_RE.fullmatch(name):
        return name  # no '/', '\\', control character or '..': nothing lexical to refuse
    if "/" in name or "\\" in name or not name.endswith(".whl"):
        raise UnsafeArtefactError(f"{what} {name!r} is not a wheel file name")
    try:
        parse_wheel_filename(name)
    except InvalidWheelFilename as exc:
        raise UnsafeArtefactError(f"{what} {name!r} is not a wheel file name ({exc})") from None
    problem = _lexical_problem(name)
    if problem is not None:
        raise UnsafeArtefactError(f"{what} {name!r} {problem}; refusing to write or read it")
    return name


_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


class NotRegularFileError(OSError):
    """An input path is not a regular file (a FIFO, a device, a socket, a directory)."""

    def __init__(self, path: Path | str, kind: str) -> None:
        super().__init__(errno.EINVAL, f"{kind}, not a regular file", os.fspath(path))
        self.kind = kind


def file_kind(mode: int) -> str:
    """What a file of `mode` is, in words ('a FIFO (named pipe)', 'a regular file')."""
    return _kind(mode) or "a regular file"


def _kind(mode: int) -> str | None:
    """What a file of `mode` is when it is not a regular file; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: Path) -> BinaryIO:
    """`path` opened for binary reading when it is a regular file (or a link to one).

    Its type is checked by `stat` before it is opened (opening some devices acts), then on
    the descriptor, which is opened without blocking (a FIFO put there in between cannot
    stall the open): anything but a regular file raises NotRegularFileError.
    """
    kind = _kind(os.stat(path).st_mode)  # noqa: PTH116 (the fast call: index opens 10,000)
    if kind is not None:
        raise NotRegularFileError(path, kind)
    # O_NONBLOCK: a FIFO swapped in since the stat cannot stall the open (for a regular
    # file it changes nothing, so the descriptor is used as it is)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        kind = _kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise NotRegularFileError(path, kind)
        return open(fd, "rb")  # noqa: PTH123 (a descriptor, returned open)
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, *, max_bytes: int) -> bytes:
    """The bytes of the regular file `path` (`open_regular`), at most `max_bytes`; a larger
    file raises OSError(EFBIG) naming it, before it is read."""
    with open_regular(path) as fh:
        return _read_capped(fh, path, max_bytes)


def _read_capped(fh: BinaryIO, path: Path, max_bytes: int) -> bytes:
    size = os.fstat(fh.fileno()).st_size
    data = fh.read(max_bytes + 1) if size <= max_bytes else b""
    if size > max_bytes or len(data) > max_bytes:
        raise OSError(
            errno.EFBIG,
            f"larger than {max_bytes:,} bytes, the most this input may be",
            os.fspath(path),
        )
    return data


def open_within(root: Path, member: str) -> BinaryIO:
    """`root / member` opened as `open_regular` opens it, when no symbolic link on its way
    leads out of `root` (a checkout's setup.py linked to a file elsewhere is refused with
    UnsafeArtefactError, not read). A link that stays inside `root` is followed.

    The resolved path is then opened one component at a time, each with O_NOFOLLOW from the
    directory before it: a link swapped in after the resolution is refused, never followed.
    FileNotFoundError (and other OSErrors) propagate as they are.
    """
    problem = _lexical_problem(member)
    if problem is not None:
        raise UnsafeArtefactError(f"{member!r} {problem}; refusing to read it")
    base = root.resolve()
    real = Path(os.path.realpath(base / member))
    if not real.is_relative_to(base):
        raise UnsafeArtefactError(
            f"{base / member}: a symbolic link leads out of {base} (to {real}); refusing to "
            "read it: make it a regular file inside the directory"
        )
    parts = real.relative_to(base).parts
    if not parts:
        raise NotRegularFileError(base / member, "a directory")
    nofollow = os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | nofollow, dir_fd=fd)
            os.close(fd)
            fd = inner
        mode = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            raise OSError(errno.ELOOP, "a symbolic link appeared", os.fspath(real))
        kind = _kind(mode)
        if kind is not None:
            raise NotRegularFileError(base / member, kind)
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | nofollow
        inner = os.open(parts[-1], flags, dir_fd=fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeArtefactError(
                f"{base / member}: a symbolic link was put on its way while it was read; "
                "refusing to read it"
            ) from None
        if isinstance(exc, NotRegularFileError):
            raise
        raise OSError(exc.errno, exc.strerror, os.fspath(base / member)) from None
    finally:
        os.close(fd)
    try:
        kind = _kind(os.fstat(inner).st_mode)
        if kind is not None:
            raise NotRegularFileError(base / member, kind)
        return open(inner, "rb")  # noqa: PTH123 (a descriptor, returned open)
    except BaseException:
        os.close(inner)
        raise


def read_within(root: Path, member: str, *, max_bytes: int) -> bytes:
    """The bytes of `root / member` (`open_within`: no link out of `root`), at most
    `max_bytes`; a larger file raises OSError(EFBIG) naming it, before it is read."""
    with open_within(root, member) as fh:
        return _read_capped(fh, root / member, max_bytes)


def private_dir(path: Path) -> Path:
    """`path`, a directory only this user controls: made (0700) when missing, else refused
    with UnsafeArtefactError when it is a symbolic link, not a directory, another user's or
    writable by others. For state directories (tokens, pids, locks): files there are then
    this user's own, and nothing in them is followed out.

    The check is made on the directory opened with O_NOFOLLOW, not on its name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            what = "a symbolic link" if path.is_symlink() else "not a directory"
            raise UnsafeArtefactError(
                f"{path}: {what}; a state directory must be a real directory of this user's "
                "(refusing to follow it or write through it)"
            ) from None
        raise
    try:
        _check_owner(os.fstat(fd), path, "directory")
    finally:
        os.close(fd)
    return path


def _check_owner(st: os.stat_result, path: Path, what: str) -> None:
    me = os.geteuid()
    if st.st_uid != me:
        raise UnsafeArtefactError(
            f"{path}: a {what} of user {st.st_uid}, not of this user ({me}); refusing to use "
            "another user's state (what it holds would be trusted, what it names written): "
            "choose another --state-dir"
        )
    if st.st_mode & 0o022:
        raise UnsafeArtefactError(
            f"{path}: a {what} others may write (mode {stat.S_IMODE(st.st_mode):o}); refusing "
            f"to trust it: chmod go-w {path}, or choose another --state-dir"
        )


def read_private(path: Path, *, max_bytes: int) -> bytes:
    """The bytes of `path`, a regular file of this user's that no one else may write (see
    `private_dir`), opened with O_NOFOLLOW (a symbolic link is refused, never followed);
    FileNotFoundError when it is missing."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeArtefactError(
                f"{path}: a symbolic link; refusing to follow it (state files are this "
                "user's own regular files)"
            ) from None
        raise
    with open(fd, "rb") as fh:  # noqa: PTH123 (a descriptor)
        st = os.fstat(fd)
        kind = _kind(st.st_mode)
        if kind is not None:
            raise NotRegularFileError(path, kind)
        _check_owner(st, path, "file")
        return _read_capped(fh, path, max_bytes)


@contextlib.contextmanager
def naming_path(path: Path) -> Iterator[None]:
    """Give an OSError raised inside the block the path it concerns, when it names none
    (a `write` that finds the disk full says only 'No space left on device')."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror or str(exc), os.fspath(path)) from exc
        raise


def fsync_dir(directory: Path) -> None:
    """Make a rename or new entry in `directory` durable (best effort where unsupported)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it (/proc), else by
    setting it back at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, text: str) -> None:
    """Write text to path via a unique temporary file, fsync, rename: readers never see half a
    file, a crash leaves the old or the new one, and a failure (a full disk) leaves nothing.

    The file gets the mode of the one it replaces, else what open() would give it (0o666
    less the umask), not mkstemp's private 0o600.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o7777
    except OSError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with naming_path(path), os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def copy_atomic(src: Path, dest: Path) -> None:
    """Copy src to dest the same way: unique temporary name, fsync, rename, or nothing."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with naming_path(dest), os.fdopen(fd, "wb") as out, open_regular(src) as inp:
            shutil.copyfileobj(inp, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        shutil.copystat(src, tmp)
        Path(tmp).replace(dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(dest.parent)


def sha256_file(path: Path, *, chunk: int = 1 << 20) -> str:
    """The hex sha256 of a regular file's bytes (`open_regular`), read in chunks."""
    digest = hashlib.sha256()
    with open_regular(path) as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


_REMEDIES = {
    errno.ENOSPC: "free some disk space (or point the option at another disk) and run again",
    errno.EDQUOT: "free some of your disk quota and run again",
    errno.EROFS: "the file system is read-only; choose a writable directory",
    errno.EACCES: "permission denied; choose a directory you can write, or fix its permissions",
    errno.EPERM: "not permitted; choose a directory you can write, or fix its permissions",
    errno.ENOTDIR: "a path component is a file, not a directory; choose a directory",
    errno.EISDIR: "it is a directory; name a file",
    errno.ENOENT: "no such file or directory; check the path",
    errno.EEXIST: "it exists already; remove it or choose another path",
    errno.EFBIG: "name the file it should be",
}


def describe_os_error(exc: OSError) -> str:
    """'PATH: what the OS said; what to do' for an error the file system raised."""
    where = exc.filename if exc.filename is not None else "(a file it did not name)"
    what = exc.strerror or str(exc)
    if isinstance(exc, NotRegularFileError):
        return f"{where}: {what}; name a regular file"
    remedy = _REMEDIES.get(exc.errno or 0, "check the path and the disk, then run again")
    return f"{where}: {what}; {remedy}"
