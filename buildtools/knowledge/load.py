"""Reading buildtools/data: YAML with line numbers, rows validated, facts cross-checked.

Every problem names the file, line and key (`locate` does the same for a fact another
stage found wrong, e.g. `buildtools knowledge --check-index`).
"""

from __future__ import annotations

__all__ = ["DATA_DIR", "FILES", "DataRows", "load_data", "release_locator"]

import fnmatch
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from ..errors import KnowledgeError
from .rows import CudaRelease, ImageRule, NeverBundle, RocmRelease, TorchRelease

DATA_DIR = Path(__file__).parent.parent / "data"

# -- loading ---------------------------------------------------------------------------------
# file name → (top-level key, validator of its rows)
FILES: dict[str, tuple[str, TypeAdapter[Any]]] = {
    "torch.yaml": ("releases", TypeAdapter(tuple[TorchRelease, ...])),
    "cuda.yaml": ("releases", TypeAdapter(tuple[CudaRelease, ...])),
    "rocm.yaml": ("releases", TypeAdapter(tuple[RocmRelease, ...])),
    "images.yaml": ("images", TypeAdapter(tuple[ImageRule, ...])),
    "never_bundle.yaml": ("patterns", TypeAdapter(tuple[NeverBundle, ...])),
}
_ROW_KEYS = ("minor", "version", "pattern", "image")


def _where(raw: Any, loc: Sequence[int | str]) -> tuple[int | None, str]:
    """(line, 'releases[3] (minor 2.3): cxx11_abi') for an error location inside a data file."""
    line: int | None = None
    tokens: list[str] = []
    node = raw
    for step in loc:
        if isinstance(node, CommentedSeq) and isinstance(step, int) and step < len(node):
            line = node.lc.item(step)[0] + 1
            node = node[step]
            key = next((k for k in _ROW_KEYS if isinstance(node, Mapping) and k in node), None)
            label = f"[{step}]" + (f" ({key} {node[key]})" if key and not tokens[1:] else "")
            tokens[-1:] = [(tokens[-1] if tokens else "") + label]
            continue
        if isinstance(node, CommentedMap) and step in node:
            line = node.lc.key(step)[0] + 1
            node = node[step]
        else:
            node = None
        tokens.append(str(step))
    row, fields = (tokens[0], tokens[1:]) if tokens else ("", [])
    return line, row + (": " + ".".join(fields) if fields else "")


def _problem(path: Path, raw: Any, loc: Sequence[int | str], msg: str) -> str:
    msg = msg.removeprefix("Value error, ")
    # Row validators prefix their message with the field they are about; point at that field.
    field, _, rest = msg.partition(": ")
    if rest and re.fullmatch(r"\w+", field):
        loc, msg = (*loc, field), rest
    line, where = _where(raw, loc)
    return f"{path}:{line or 1}: {where}: {msg}"


def _parse(path: Path, text: str, typ: str) -> Any:
    try:
        return YAML(typ=typ).load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise KnowledgeError(f"{path}{line}: not valid YAML: {exc}") from None


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise KnowledgeError(f"{path}: cannot read knowledge data: {exc.strerror}") from None


def _read(path: Path) -> tuple[Any, Any]:
    """(round-trip tree with line numbers, plain Python data) of one YAML file."""
    text = _text(path)
    return _parse(path, text, "rt"), _parse(path, text, "safe")


class _Trees(dict[str, Any]):
    """File name → round-trip tree (line numbers), parsed only when a problem is located:
    the round-trip parse costs as much as the plain one, and every command start paid it."""

    def __init__(self, data_dir: Path, texts: Mapping[str, str]) -> None:
        super().__init__()
        self._dir, self._texts = data_dir, texts

    def __missing__(self, name: str) -> Any:
        tree = self[name] = _parse(self._dir / name, self._texts[name], "rt")
        return tree


def _cross_check(files: Mapping[str, Any], raws: Mapping[str, Any], data_dir: Path) -> list[str]:
    """Facts across rows and files: torch rows name known CUDA/ROCm; no shadowed never_bundle."""
    problems: list[str] = []
    cuda = {c.version for c in files["cuda.yaml"]}
    rocm = {r.version for r in files["rocm.yaml"]}
    minors: set[str] = set()
    for i, rel in enumerate(files["torch.yaml"]):
        missing_cuda = "no row in cuda.yaml for CUDA"
        checks = [
            ("minor", [rel.minor] if rel.minor in minors else [], "duplicate release"),
            ("cuda", [c for c in rel.cuda if c not in cuda], missing_cuda),
            ("aarch64", [c for c in rel.aarch64.cuda if c not in cuda], missing_cuda),
            ("rocm", [r for r in rel.rocm if r not in rocm], "no row in rocm.yaml for ROCm"),
        ]
        minors.add(rel.minor)
        for field, bad, what in checks:
            if bad:
                line, where = _where(raws["torch.yaml"], ("releases", i, field))
                problems.append(
                    f"{data_dir / 'torch.yaml'}:{line}: {where}: {what} {', '.join(bad)}"
                )
    # never_bundle_rule takes the first match: 'libtorch_cuda*.so*' must precede 'libtorch*.so*'
    rules = files["never_bundle.yaml"]
    for i, rule in enumerate(rules):
        broader = [r.pattern for r in rules[:i] if fnmatch.fnmatchcase(rule.pattern, r.pattern)]
        if broader:
            line, where = _where(raws["never_bundle.yaml"], ("patterns", i, "pattern"))
            problems.append(
                f"{data_dir / 'never_bundle.yaml'}:{line}: {where}: shadowed by the earlier "
                f"{broader[0]!r}; list the narrower pattern first"
            )
    return problems


@dataclass(frozen=True, kw_only=True)
class DataRows:
    """The validated rows of every data file, in file order."""

    torch: tuple[TorchRelease, ...]
    cuda: tuple[CudaRelease, ...]
    rocm: tuple[RocmRelease, ...]
    images: tuple[ImageRule, ...]
    never_bundle: tuple[NeverBundle, ...]


def load_data(data_dir: Path) -> DataRows:
    """Read and validate every file of `data_dir`; KnowledgeError lists every problem."""
    rows: dict[str, Any] = {}
    texts = {name: _text(data_dir / name) for name in FILES}
    raws = _Trees(data_dir, texts)
    problems: list[str] = []
    for name, (key, adapter) in FILES.items():
        path = data_dir / name
        plain = _parse(path, texts[name], "safe")
        if not isinstance(plain, dict) or list(plain) != [key] or not plain[key]:
            problems.append(f"{path}:1: expected one top-level key {key!r} with a list of rows")
            continue
        try:
            rows[name] = adapter.validate_python(plain[key])
        except ValidationError as exc:
            raw = raws[name]
            problems += [_problem(path, raw, (key, *e["loc"]), e["msg"]) for e in exc.errors()]
    if not problems:
        problems = _cross_check(rows, raws, data_dir)
    if problems:
        raise KnowledgeError(
            "invalid knowledge data (a bug in torch-buildtools' data files):\n  "
            + "\n  ".join(problems)
        )
    return DataRows(
        torch=rows["torch.yaml"],
        cuda=rows["cuda.yaml"],
        rocm=rows["rocm.yaml"],
        images=rows["images.yaml"],
        never_bundle=rows["never_bundle.yaml"],
    )


def release_locator(data_dir: Path) -> Callable[[str | None, tuple[str, ...]], str]:
    """A function naming where a key of torch.yaml's row for a minor is (file:line: key).

    `(minor, ("free_threaded",))` → '…/torch.yaml:412: releases[14] (minor 2.14):
    free_threaded'; `(None, ())` → the releases list itself (where a new row goes).
    """
    path = data_dir / "torch.yaml"
    raw, _ = _read(path)
    rows = raw.get("releases") if isinstance(raw, CommentedMap) else None
    index = {
        str(row.get("minor")): i
        for i, row in enumerate(rows if isinstance(rows, CommentedSeq) else [])
        if isinstance(row, CommentedMap)
    }

    def locate(minor: str | None, key: tuple[str, ...]) -> str:
        loc: tuple[int | str, ...] = ("releases",)
        if minor is not None and minor in index:
            loc = ("releases", index[minor], *key)
        line, where = _where(raw, loc)
        return f"{path}:{line or 1}: {where}"

    return locate
