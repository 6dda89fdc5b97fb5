"""Facts about the world around torch that several stages share, read from data/ecosystem.json.

The PyTorch wheel index, the glibc behind the legacy manylinux tags, the variables a child
Python must not inherit, the CUDA/ROCm programs and variables a CPU cell's build must not
see, the default runner labels (x86 and ARM), the ELF machine of each
wheel arch, the CUDA version each nvcc option buildtools adds appeared in and the arch-list variable of each accelerator kind used to be constants repeated in the modules that use them, or were missing; they live in one data file, each with why and its source. The file is
JSON and this module uses the standard library only: the docker backend's in-container steps
(repair, the toolchain links) reach its readers, and the builder image's tools venv has
neither pydantic nor a YAML parser.
"""

from __future__ import annotations

__all__ = ["ECOSYSTEM_FILE", "Ecosystem", "load_ecosystem"]

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .errors import KnowledgeError

ECOSYSTEM_FILE = Path(__file__).parent / "data" / "ecosystem.json"
# section → the key that holds its value; every section also has "why" and "source"
_SECTIONS = {
    "pytorch_index": "url",
    "package_index": "url",
    "size_limits": "bytes",
    "manylinux_aliases": "tags",
    "child_env": "drop",
    "default_runner": "label",
    "arm_runner": "label",
    "elf_machines": "machines",
    "arch_variables": "variables",
    "device_programs": "names",
    "device_env": "drop",
    "nvcc_options_since": "versions",
}
_URL_RE = re.compile(r"^https://\S+[^/\s]$")
_TAG_RE = re.compile(r"^manylinux\d+$")
_GLIBC_RE = re.compile(r"^2\.\d+$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_PROGRAM_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")


@dataclass(frozen=True, kw_only=True)
class Ecosystem:
    """The validated facts, in the shapes their readers use."""

    pytorch_index: str  # append '/<accelerator>' for one variant
    package_index: str  # the PEP 691 simple index torch's releases are read from (PyPI)
    size_limits: Mapping[str, int]  # 'pypi_upload' / 'github_release_asset' → bytes
    manylinux_aliases: Mapping[str, tuple[int, int]]  # 'manylinux2014' → (2, 17), newest first
    dropped_env: tuple[str, ...]  # variables a child Python must not inherit
    default_runner: str  # the build runner of a family matrix.yaml names none for
    arm_runner: str  # the same for linux_aarch64 jobs: a native ARM runner
    elf_machines: Mapping[str, str]  # wheel arch ('aarch64') → ELF e_machine ('EM_AARCH64')
    arch_variables: Mapping[str, str]  # accelerator kind ('cuda') → 'TORCH_CUDA_ARCH_LIST'
    device_programs: tuple[str, ...]  # CUDA/ROCm programs a CPU cell's build must not find
    device_env: tuple[str, ...]  # CUDA/ROCm variables removed from a CPU cell's build
    # an nvcc option buildtools adds → the first CUDA version whose nvcc has it ('13.0')
    nvcc_options_since: Mapping[str, str]
    sources: Mapping[str, str]  # section → where its fact was read


def _check(section: str, value: Any) -> str | None:
    """What is wrong with one section's value, or None."""
    if section == "size_limits":
        counts = (
            isinstance(value, dict)
            and set(value) == {"pypi_upload", "github_release_asset"}
            and all(
                isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value.values()
            )
        )
        return None if counts else "expected byte counts for 'pypi_upload', 'github_release_asset'"
    if section in ("pytorch_index", "package_index"):
        ok = isinstance(value, str) and _URL_RE.match(value)
        return None if ok else "expected an https URL without a trailing slash"
    if section in ("default_runner", "arm_runner"):
        ok = isinstance(value, str) and _LABEL_RE.match(value)
        return None if ok else "expected a runner label such as 'ubuntu-24.04'"
    if not isinstance(value, dict) or not value:
        return "expected a non-empty object"
    if section == "elf_machines":
        bad = [
            k
            for k, v in value.items()
            if not re.fullmatch(r"[a-z0-9_]+", k)
            or not isinstance(v, str)
            or not v.startswith("EM_")
        ]
        return f"expected 'arch': 'EM_…' entries: {bad}" if bad else None
    if section == "nvcc_options_since":
        bad = [
            k
            for k, v in value.items()
            if not k.startswith("-") or not isinstance(v, str) or not re.fullmatch(r"\d+\.\d+", v)
        ]
        return f"expected '-option': 'X.Y' entries: {bad}" if bad else None
    if section == "arch_variables":
        named = set(value) == {"cuda", "rocm"} and all(
            isinstance(v, str) and _ENV_RE.match(v) for v in value.values()
        )
        return None if named else "expected the variable name of exactly 'cuda' and 'rocm'"
    if section in ("child_env", "device_env", "device_programs"):
        name = _PROGRAM_RE if section == "device_programs" else _ENV_RE
        bad = [k for k, v in value.items() if not name.match(k) or not isinstance(v, str) or not v]
        return f"each entry needs a name and a reason: {bad}" if bad else None
    bad = [
        k
        for k, v in value.items()
        if not isinstance(v, str) or not _TAG_RE.match(k) or not _GLIBC_RE.match(v)
    ]
    if bad:
        return f"expected 'manylinuxN': '2.Y' entries: {bad}"
    minors = [int(v.split(".")[1]) for v in value.values()]
    if minors != sorted(set(minors), reverse=True):
        return "list the tags newest glibc first, each glibc once"
    return None


def _parse(path: Path) -> Ecosystem:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise KnowledgeError(f"{path}: cannot read knowledge data: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise KnowledgeError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        data = {}
    problems = [f"{key}: unknown section" for key in data if key not in (*_SECTIONS, "about")]
    for section, key in _SECTIONS.items():
        row = data.get(section)
        if not isinstance(row, dict):
            problems.append(f"{section}: missing (an object with {key!r}, 'why' and 'source')")
            continue
        problems += [f"{section}.{k}: unknown key" for k in row if k not in (key, "why", "source")]
        for text in ("why", "source"):
            if not isinstance(row.get(text), str) or not row[text].strip():
                problems.append(f"{section}.{text}: required, a sentence")
        problem = _check(section, row.get(key))
        if problem:
            problems.append(f"{section}.{key}: {problem}")
    if problems:
        raise KnowledgeError(
            "invalid knowledge data (a bug in torch-buildtools' data files):\n  "
            + "\n  ".join(f"{path}: {p}" for p in problems)
        )
    aliases = data["manylinux_aliases"]["tags"]
    return Ecosystem(
        pytorch_index=data["pytorch_index"]["url"],
        package_index=data["package_index"]["url"],
        size_limits=MappingProxyType(dict(data["size_limits"]["bytes"])),
        manylinux_aliases=MappingProxyType(
            {tag: (2, int(glibc.split(".")[1])) for tag, glibc in aliases.items()}
        ),
        dropped_env=tuple(data["child_env"]["drop"]),
        default_runner=data["default_runner"]["label"],
        arm_runner=data["arm_runner"]["label"],
        elf_machines=MappingProxyType(dict(data["elf_machines"]["machines"])),
        arch_variables=MappingProxyType(dict(data["arch_variables"]["variables"])),
        device_programs=tuple(data["device_programs"]["names"]),
        device_env=tuple(data["device_env"]["drop"]),
        nvcc_options_since=MappingProxyType(dict(data["nvcc_options_since"]["versions"])),
        sources=MappingProxyType({s: data[s]["source"] for s in _SECTIONS}),
    )


@functools.cache
def _load_default() -> Ecosystem:
    return _parse(ECOSYSTEM_FILE)


def load_ecosystem(path: Path | None = None) -> Ecosystem:
    """Load and validate data/ecosystem.json (cached for the packaged file)."""
    return _load_default() if path is None else _parse(path)
