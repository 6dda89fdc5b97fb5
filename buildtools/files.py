"""File operations every stage shares: safe joins, atomic writes, content hashes.

Every path that comes from an artefact buildtools did not make (a wheel's zip members, a
published site's manifest, a RECORD, a build record) goes through `safe_join`: an absolute
path, a drive letter, a `..` component, a NUL or a symlink that leads out of the root is
refused with `UnsafeArtefactError` (exit code 15), never joined.
"""

from __future__ import annotations

__all__ = ["check_wheel_filename", "safe_join", "sha256_file", "write_atomic"]

import hashlib
import os
import re
import tempfile
from pathlib import Path, PurePosixPath

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from .errors import UnsafeArtefactError

_DRIVE_RE = re.compile(r"^[A-Za-z]:")


def safe_join(root: Path, member: str, *, what: str = "path") -> Path:
    """`root / member`, or UnsafeArtefactError when `member` could land outside `root`.

    Refused: empty names, NUL and other control characters, absolute paths (`/x`, `\\x`),
    drive letters (`C:x`), backslashes, `..` components, and names that resolve outside
    `root` through a symlink already inside it.
    """
    problem = None
    if not member or member in (".", "./"):
        problem = "is empty"
    elif any(ord(ch) < 32 or ord(ch) == 127 for ch in member):
        problem = "contains a control character"
    elif member.startswith(("/", "\\")) or _DRIVE_RE.match(member):
        problem = "is absolute"
    elif "\\" in member:
        problem = "contains a backslash"
    elif ".." in PurePosixPath(member).parts:
        problem = "climbs out with '..'"
    if problem is None:
        target = root / member
        base = root.resolve()
        if not target.resolve().is_relative_to(base):
            problem = "leads out of its directory through a symbolic link"
        else:
            return target
    raise UnsafeArtefactError(f"{what} {member!r} {problem}; refusing to write or read it")


def check_wheel_filename(name: str, *, what: str = "wheel") -> str:
    """`name` when it is a bare wheel file name (PEP 427), else UnsafeArtefactError."""
    if "/" in name or "\\" in name or not name.endswith(".whl"):
        raise UnsafeArtefactError(f"{what} {name!r} is not a wheel file name")
    try:
        parse_wheel_filename(name)
    except InvalidWheelFilename as exc:
        raise UnsafeArtefactError(f"{what} {name!r} is not a wheel file name ({exc})") from None
    safe_join(Path("/nonexistent-root"), name, what=what)
    return name


def write_atomic(path: Path, text: str) -> None:
    """Write text to path via a temporary file and rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sha256_file(path: Path, *, chunk: int = 1 << 20) -> str:
    """The hex sha256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()
