"""What a wheel's name and dist-info say: PEP 508 project names, versions, METADATA fields.

The archive reader (`archive`) checks a wheel's file name against its dist-info with these;
they are pure and cached (the index reads thousands of names).
"""

from __future__ import annotations

__all__ = ["ESCAPED_NAME_RE", "metadata_fields", "project_name_problem"]

import functools
import re

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

# PEP 508's name: ASCII letters and digits, with `._-` inside (packaging takes any \w)
_PROJECT_RE = re.compile(r"[A-Z0-9](?:[A-Z0-9._-]*[A-Z0-9])?", re.IGNORECASE | re.ASCII)
# in a wheel's file name, runs of separators are one '_' (what packaging takes there)
ESCAPED_NAME_RE = re.compile(r"[A-Za-z0-9]+(?:[._][A-Za-z0-9]+)*", re.ASCII)


def project_name_problem(name: str) -> str | None:
    """Why `name` is not a project name by PEP 508 (ASCII only), or None."""
    if len(name) > 200:
        return f"a project name of {len(name)} characters (at most 200)"
    if not _PROJECT_RE.fullmatch(name):
        return (
            f"{name!r} is not a project name by PEP 508 (ASCII letters, digits and '._-', "
            "starting and ending with a letter or digit)"
        )
    return None


@functools.lru_cache(maxsize=4096)
def _canonical(name: str) -> str:
    return canonicalize_name(name)


@functools.lru_cache(maxsize=4096)
def _version(text: str) -> Version:
    return Version(text)


def _same_version(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return _version(a.replace("_", "-")) == _version(b.replace("_", "-"))
    except InvalidVersion:
        return False


def metadata_fields(metadata: bytes) -> dict[str, list[str]]:
    """METADATA's header fields (RFC 822 style, as `email.parser` reads them), by lower-cased
    name; continuation lines joined. Only the header block: the body is the description."""
    text = metadata.decode("utf-8", errors="surrogateescape")
    fields: dict[str, list[str]] = {}
    last: list[str] | None = None
    for raw in text.split("\n"):
        line = raw.rstrip("\r")
        if not line:
            break
        if line[0] in " \t" and last is not None:
            last[-1] += "\n" + line
            continue
        name, sep, value = line.partition(":")
        if not sep:
            last = None
            continue
        last = fields.setdefault(name.strip().lower(), [])
        last.append(value.strip())
    return fields
