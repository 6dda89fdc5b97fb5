"""YAML loading that remembers where every key and item came from."""

from __future__ import annotations

__all__ = ["Loc", "SourceMap", "YamlDocument", "load_yaml"]

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError

from ..errors import ConfigError

Loc = tuple[str | int, ...]


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


def _plain(node: Any, loc: Loc, lines: dict[Loc, int]) -> Any:
    if isinstance(node, CommentedMap):
        out: dict[Any, Any] = {}
        for key, value in node.items():
            child = (*loc, str(key))
            line, _col = node.lc.key(key)
            lines[child] = line + 1
            out[str(key) if not isinstance(key, (int, float, bool)) else key] = _plain(
                value, child, lines
            )
        return out
    if isinstance(node, CommentedSeq):
        items = []
        for i, value in enumerate(node):
            child = (*loc, i)
            line, _col = node.lc.item(i)
            lines[child] = line + 1
            items.append(_plain(value, child, lines))
        return items
    if isinstance(node, str):
        return str(node)
    if isinstance(node, bool):
        return bool(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    return node


def load_yaml(path: Path) -> YamlDocument:
    """Load `path` into plain Python data plus a line map; syntax errors become ConfigError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such file; pass --matrix PATH or create matrix.yaml (see docs/matrix.md)"
        ) from None
    yaml = YAML(typ="rt")
    try:
        node = yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 0
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"{path.name}:{line}: invalid YAML: {problem}") from None
    lines: dict[Loc, int] = {(): 1}
    data = _plain(node, (), lines) if node is not None else {}
    return YamlDocument(data=data, source=SourceMap(path=path, lines=lines))
