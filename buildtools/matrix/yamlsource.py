"""YAML loading that remembers where every key and item came from.

matrix.yaml is input a pull request can change, so loading is bounded and strict before any
key is validated: UTF-8 only (a UTF-16 file or a stray byte is named with its line), no
control character in any string (each may reach a generated workflow, script or page), at
most `MAX_BYTES`, no explicit tags (`!!python/…`), no merge keys (`<<:`), and anchors/aliases may
expand to at most `MAX_NODES` nodes (a "billion laughs" document fails in milliseconds
instead of growing past gigabytes); an alias that contains itself is refused.
"""

from __future__ import annotations

__all__ = ["Loc", "SourceMap", "YamlDocument", "load_yaml"]

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from ..errors import ConfigError
from ..files import NotRegularFileError, open_regular

Loc = tuple[str | int, ...]

MAX_BYTES = 1 << 20  # 1 MiB: a matrix.yaml is a few KiB
MAX_NODES = 100_000  # keys + items + scalars after alias expansion

_BOMS = (
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\xfe\xff", "UTF-16"),
    (b"\xff\xfe", "UTF-16"),
)


@dataclass(frozen=True)
class SourceMap:
    """Maps a key path such as ('axes', 'torch', 1) to its 1-based line in `path`."""

    path: Path
    lines: dict[Loc, int]

    def line(self, loc: Sequence[str | int]) -> int | None:
        """Line of `loc`, or of its nearest ancestor that exists in the file."""
        key = tuple(loc)
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key[:-1]
        return self.lines.get((), None)

    def where(self, loc: Sequence[str | int]) -> str:
        """'matrix.yaml:12' (or just the file name when no line is known)."""
        line = self.line(loc)
        return f"{self.path.name}:{line}" if line is not None else self.path.name


@dataclass(frozen=True)
class YamlDocument:
    data: Any
    source: SourceMap


class _Expander:
    """Turns ruamel's round-trip nodes into plain data, bounded and with key locations."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: dict[Loc, int] = {(): 1}
        self.nodes = 0
        self.open: set[int] = set()  # ids of the containers being expanded (alias cycles)

    def _fail(self, loc: Loc, message: str) -> ConfigError:
        line = SourceMap(self.path, self.lines).line(loc)
        where = f"{self.path.name}:{line}" if line is not None else self.path.name
        key = ".".join(str(p) for p in loc) or "(top level)"
        return ConfigError(f"{where}: {key}: {message}")

    def _count(self, loc: Loc) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self._fail(
                loc,
                f"the document expands to more than {MAX_NODES:,} values (anchors and aliases "
                "nested inside each other?); write the values out or use fewer aliases",
            )

    def _tag(self, node: Any) -> str | None:
        tag = getattr(node, "tag", None)
        value = getattr(tag, "value", None) if tag is not None else None
        return value if isinstance(value, str) and value else None

    def plain(self, node: Any, loc: Loc) -> Any:
        self._count(loc)
        tag = self._tag(node)
        if tag is not None:
            raise self._fail(loc, f"YAML tags are not allowed (found {tag!r}); write a plain value")
        if isinstance(node, (CommentedMap, CommentedSeq)):
            if id(node) in self.open:
                raise self._fail(
                    loc, "an alias refers to a value that contains it; remove the cycle"
                )
            self.open.add(id(node))
            try:
                return self._container(node, loc)
            finally:
                self.open.discard(id(node))
        if isinstance(node, bool):
            return bool(node)
        if isinstance(node, int):
            return int(node)
        if isinstance(node, float):
            return float(node)
        if isinstance(node, str):
            return self._text(str(node), loc)
        if node is None:
            return None
        raise self._fail(
            loc, f"unsupported YAML value ({type(node).__name__}); write a plain value"
        )

    def _text(self, text: str, loc: Loc) -> str:
        # every string may end up in a generated workflow, shell line or HTML page
        bad = next((ch for ch in text if unicodedata.category(ch) in ("Cc", "Zl", "Zp")), None)
        if bad is not None:
            raise self._fail(
                loc,
                f"contains the control character U+{ord(bad):04X}; allowed: printable text on "
                "one line (a list for several values)",
            )
        return text

    def _container(self, node: CommentedMap | CommentedSeq, loc: Loc) -> Any:
        if isinstance(node, CommentedMap):
            if getattr(node, "merge", None):
                raise self._fail(
                    loc, "merge keys (`<<:`) are not supported; write the keys out in full"
                )
            out: dict[Any, Any] = {}
            for key, value in node.items():
                if not isinstance(key, (str, int, float, bool)):
                    raise self._fail(loc, f"a key must be a plain value, not {type(key).__name__}")
                child = (*loc, str(key))
                line, _col = node.lc.key(key)
                self.lines[child] = line + 1
                if isinstance(key, str):
                    self._text(key, child)
                out[str(key) if not isinstance(key, (int, float, bool)) else key] = self.plain(
                    value, child
                )
            return out
        items = []
        for i, value in enumerate(node):
            child = (*loc, i)
            line, _col = node.lc.item(i)
            self.lines[child] = line + 1
            items.append(self.plain(value, child))
        return items


def _decode(path: Path, raw: bytes) -> str:
    """UTF-8 text of `raw`, or a ConfigError naming the encoding or the line of the bad byte."""
    for bom, name in _BOMS:
        if raw.startswith(bom):
            raise ConfigError(f"{path}: the file is {name}; save it as UTF-8")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path.name}:{line}: not UTF-8 (byte 0x{raw[exc.start]:02x}); save the file as UTF-8"
        ) from None


def load_yaml(path: Path) -> YamlDocument:
    """Load `path` into plain Python data plus a line map; every problem becomes ConfigError."""
    try:
        with open_regular(path) as fh:  # a FIFO or device is refused before it is read
            raw = fh.read(MAX_BYTES + 1)
    except NotRegularFileError as exc:
        if exc.kind == "a directory":
            raise ConfigError(f"{path}: is a directory; pass the path of a YAML file") from None
        raise ConfigError(f"{path}: {exc.kind}, not a file; pass the path of a YAML file") from None
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such file; pass --matrix PATH or create matrix.yaml (see docs/matrix.md)"
        ) from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory; pass the path of a YAML file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_BYTES // 1024} KiB; is this a matrix.yaml?")
    text = _decode(path, raw)
    yaml = YAML(typ="rt")
    try:
        node = yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 0
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"{path.name}:{line}: invalid YAML: {problem}") from None
    except YAMLError as exc:  # the reader's errors (NUL, control characters) carry no mark
        position = getattr(exc, "position", None)
        line = text[:position].count("\n") + 1 if isinstance(position, int) else 0
        char = getattr(exc, "character", None)
        what = f"character U+{char:04X} is not allowed" if isinstance(char, int) else str(exc)
        raise ConfigError(f"{path.name}:{line}: invalid YAML: {what.splitlines()[0]}") from None
    except (ValueError, RecursionError) as exc:  # a 5,000-digit number, nesting too deep
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ConfigError(f"{path.name}: invalid YAML: {reason.splitlines()[0]}") from None
    expander = _Expander(path)
    try:
        data = expander.plain(node, ()) if node is not None else {}
    except RecursionError:
        raise ConfigError(f"{path.name}: invalid YAML: nested too deeply") from None
    return YamlDocument(data=data, source=SourceMap(path=path, lines=expander.lines))
