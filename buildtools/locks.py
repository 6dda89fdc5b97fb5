"""One inter-process file lock, shared by every cache that parallel jobs or runs may touch."""

from __future__ import annotations

__all__ = ["file_lock"]

import contextlib
import errno
import fcntl
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def file_lock(path: Path, *, waiting: str | None = None) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created with its parents) for the with-block.

    With `waiting`, that sentence goes to stderr when another process holds the lock. A
    symbolic link (or anything but a regular file) where the lock belongs is refused with an
    OSError naming it, never followed: opening it would create or truncate its target.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags | os.O_NOCTTY | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENXIO):  # ENXIO: a FIFO no one reads
            raise
        raise OSError(
            exc.errno, "a symbolic link or FIFO where a lock file belongs (not followed)", str(path)
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file where a lock file belongs", str(path))
    with open(fd, "a") as handle:  # noqa: PTH123 (a descriptor)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting:
                sys.stderr.write(waiting + "\n")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
