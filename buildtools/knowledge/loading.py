"""Loading the knowledge base: the YAML files under buildtools/data, validated row by row.

A problem names the file, the line and the key path of the row (`_where`), so a bad edit
of the data says where it is; the files are also checked against each other
(`_cross_check`: every CUDA a torch release names is described, …).
"""

from __future__ import annotations

__all__ = ["load_knowledge"]

import fnmatch
import functools
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from ..errors import KnowledgeError
from .base import (
    DATA_DIR,
    CudaRelease,
    ImageRule,
    Knowledge,
    NeverBundle,
    RocmRelease,
    TorchRelease,
)

# file name → (top-level key, validator of its rows)
_FILES: dict[str, tuple[str, TypeAdapter[Any]]] = {
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


def _read(path: Path) -> tuple[Any, Any]:
    """(round-trip tree with line numbers, plain Python data) of one YAML file."""
    try:
        text = path.read_text(encoding="utf-8")
        return YAML(typ="rt").load(text), YAML(typ="safe").load(text)
    except OSError as exc:
        raise KnowledgeError(f"{path}: cannot read knowledge data: {exc.strerror}") from None
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise KnowledgeError(f"{path}{line}: not valid YAML: {exc}") from None


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


def _load(data_dir: Path) -> Knowledge:
    rows: dict[str, Any] = {}
    raws: dict[str, Any] = {}
    problems: list[str] = []
    for name, (key, adapter) in _FILES.items():
        path = data_dir / name
        raw, plain = _read(path)
        raws[name] = raw
        if not isinstance(plain, dict) or list(plain) != [key] or not plain[key]:
            problems.append(f"{path}:1: expected one top-level key {key!r} with a list of rows")
            continue
        try:
            rows[name] = adapter.validate_python(plain[key])
        except ValidationError as exc:
            problems += [_problem(path, raw, (key, *e["loc"]), e["msg"]) for e in exc.errors()]
    if not problems:
        problems = _cross_check(rows, raws, data_dir)
    if problems:
        raise KnowledgeError(
            "invalid knowledge data (a bug in torch-buildtools' data files):\n  "
            + "\n  ".join(problems)
        )
    return Knowledge(
        torch=rows["torch.yaml"],
        cuda=rows["cuda.yaml"],
        rocm=rows["rocm.yaml"],
        images=rows["images.yaml"],
        never_bundle=rows["never_bundle.yaml"],
    )


@functools.cache
def _load_default() -> Knowledge:
    return _load(DATA_DIR)


def load_knowledge(data_dir: Path | None = None) -> Knowledge:
    """Load and validate the knowledge base (cached for the packaged data directory)."""
    return _load_default() if data_dir is None else _load(data_dir)
