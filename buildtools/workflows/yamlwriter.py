"""A small, deterministic YAML writer for the generated workflows.

Workflows are written from plain Python data (dicts keep their order), so the same input
always gives the same bytes: block style only, a string is plain where YAML (1.1 and 1.2)
reads it back as the same string and quoted otherwise, a multi-line string is a literal
block (`run:` scripts stay readable), and a `Pinned` value carries its version comment
(`uses: actions/checkout@<sha> # v7.0.1`). The tests read every file back and compare.
Comments are kept on their line: a control character in one is written escaped, so no
value can end a comment and start a key.
"""

from __future__ import annotations

__all__ = ["Pinned", "dump"]

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_KEY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
# Scalars YAML 1.1 or 1.2 would read as something other than a string.
_SPECIAL = re.compile(
    r"^(?:~|null|Null|NULL|true|True|TRUE|false|False|FALSE|yes|Yes|YES|no|No|NO"
    r"|on|On|ON|off|Off|OFF|y|Y|n|N|=|<<)$"
)
_NUMBER = re.compile(
    r"^[-+]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$"
    r"|^[-+]?0[xob][0-9a-fA-F_]+$|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$"
    r"|^\d+(?::[0-5]?\d)+(?:\.\d*)?$|^\d{4}-\d\d?-\d\d?"
)
_INDICATORS = set("-?:,[]{}#&*!|>'\"%@`")


@dataclass(frozen=True)
class Pinned:
    """A scalar written with an end-of-line comment (an action pinned by SHA + its version)."""

    value: str
    comment: str


def _plain_ok(text: str) -> bool:
    if not text or text != text.strip() or _SPECIAL.match(text) or _NUMBER.match(text):
        return False
    if text[0] in _INDICATORS and not (text[0] in "-?:" and len(text) > 1 and text[1] != " "):
        return False
    if ": " in text or " #" in text or text.endswith(":") or "\t" in text:
        return False
    return all(ch.isprintable() for ch in text)


_BREAKS = {"\x85": "\\N", "\u2028": "\\L", "\u2029": "\\P"}


def _yaml_printable(ch: str) -> bool:
    """YAML's printable set (1.2, 5.1): a character outside it may not appear even quoted."""
    n = ord(ch)
    return (
        n in (0x09, 0x0A, 0x0D)
        or 0x20 <= n <= 0x7E
        or n == 0x85
        or 0xA0 <= n <= 0xD7FF
        or 0xE000 <= n <= 0xFFFD
        or 0x10000 <= n <= 0x10FFFF
    )


def _quoted(text: str) -> str:
    """A double-quoted scalar with JSON escapes (plus YAML's for its own line breaks, and an
    escape for what YAML does not allow written: U+FFFE, U+FFFF, lone surrogates)."""
    body = json.dumps(text, ensure_ascii=False)
    for char, escape in _BREAKS.items():
        body = body.replace(char, escape)
    return "".join(ch if _yaml_printable(ch) else f"\\u{ord(ch):04x}" for ch in body)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        raise TypeError(f"cannot write {type(value).__name__} {value!r} as YAML")
    if _plain_ok(value):
        return value
    if not all(ch.isprintable() and ch not in _BREAKS for ch in value):
        return _quoted(value)
    if "'" not in value or '"' in value or "\\" in value:
        return "'" + value.replace("'", "''") + "'"
    return '"' + value + '"'


def _literal_ok(text: str) -> bool:
    """A literal block reads back exactly: printable lines, no trailing spaces, one end."""
    lines = text.removesuffix("\n").split("\n")
    return (
        bool(text.strip())
        and not text.endswith("\n\n")
        and not next(line for line in lines if line).startswith(" ")
        and all(line == line.rstrip() for line in lines)
        and all(ch.isprintable() and ch not in _BREAKS for line in lines for ch in line)
    )


def _literal(text: str, indent: str) -> list[str]:
    body = text.removesuffix("\n").split("\n")
    head = "|" if text.endswith("\n") else "|-"
    return [head, *[(indent + line) if line else "" for line in body]]


def _key(key: Any) -> str:
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise ValueError(f"unsupported mapping key {key!r}")
    if key != "on" and (_SPECIAL.match(key) or _NUMBER.match(key)):
        return "'" + key + "'"  # `y:` is a boolean key in YAML 1.1
    # `on:` stays plain, as every workflow writes it: GitHub reads keys as strings
    return key


def _is_block(value: Any) -> bool:
    return (isinstance(value, Mapping) and bool(value)) or (
        isinstance(value, Sequence) and not isinstance(value, str) and bool(value)
    )


def _inline_empty(value: Any) -> str | None:
    if isinstance(value, Mapping) and not value:
        return "{}"
    if isinstance(value, Sequence) and not isinstance(value, str) and not value:
        return "[]"
    return None


def _comment(text: str) -> str:
    """Comment text on one line: a line break (or any control character) cannot end the
    comment and start a key, whatever the caller passed."""
    return "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in text)


def _value_lines(value: Any, indent: str) -> tuple[str, list[str]]:
    """(text after `key:` or `- `, following lines) for a non-collection value."""
    if isinstance(value, Pinned):
        return f"{_scalar(value.value)} # {_comment(value.comment)}", []
    if isinstance(value, str) and "\n" in value and _literal_ok(value):
        head, *rest = _literal(value, indent)
        return head, rest
    empty = _inline_empty(value)
    return (empty if empty is not None else _scalar(value)), []


def _mapping(data: Mapping[str, Any], indent: str, *, gap: bool = False) -> list[str]:
    out: list[str] = []
    for i, (key, value) in enumerate(data.items()):
        if gap and i:
            out.append("")
        if _is_block(value):
            out.append(f"{indent}{_key(key)}:")
            out.extend(_node(value, indent + "  "))
        else:
            head, rest = _value_lines(value, indent + "  ")
            out.append(f"{indent}{_key(key)}: {head}")
            out.extend(rest)
    return out


def _sequence(items: Sequence[Any], indent: str) -> list[str]:
    out: list[str] = []
    for item in items:
        if isinstance(item, Mapping) and item:
            inner = _mapping(item, indent + "  ")
            out.append(f"{indent}- {inner[0][len(indent) + 2 :]}")
            out.extend(inner[1:])
        elif _is_block(item):
            raise ValueError("a list directly inside a list is not supported")
        else:
            head, rest = _value_lines(item, indent + "  ")
            out.append(f"{indent}- {head}")
            out.extend(rest)
    return out


def _node(value: Any, indent: str) -> list[str]:
    if isinstance(value, Mapping):
        return _mapping(value, indent)
    return _sequence(value, indent)


def dump(data: Mapping[str, Any], *, header: Sequence[str] = (), gaps: Sequence[str] = ()) -> str:
    """`data` as YAML text; `header` lines become `# …` comments, keys in `gaps` get blank
    lines between their entries (jobs), and top-level keys are separated by blank lines."""
    lines = [f"# {_comment(h)}".rstrip() for h in header]
    if lines:
        lines.append("")
    for i, (key, value) in enumerate(data.items()):
        if i:
            lines.append("")
        if _is_block(value):
            lines.append(f"{_key(key)}:")
            if isinstance(value, Mapping):
                lines.extend(_mapping(value, "  ", gap=key in gaps))
            else:
                lines.extend(_sequence(value, "  "))
        else:
            head, rest = _value_lines(value, "  ")
            lines.append(f"{_key(key)}: {head}")
            lines.extend(rest)
    return "\n".join(lines) + "\n"
