"""One inter-process file lock, shared by every cache that parallel jobs or runs may touch."""

from __future__ import annotations

__all__ = ["file_lock"]

import contextlib
import fcntl
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def file_lock(path: Path, *, waiting: str | None = None) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created with its parents) for the with-block.

    With `waiting`, that sentence goes to stderr when another process holds the lock.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
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
