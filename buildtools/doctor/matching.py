"""Which wheel matches a torch: what an installed package was built for, and how to get one.

An installed extension says what it was built for in one of three ways: our build record
in its dist-info, an exact `Requires-Dist: torch==X` (torchvision, xformers, vLLM: R18, R19
in docs/sources.md), or a local version label (`+pt211cu130` ours and PyG's,
`+cu12torch2.6cxx11abiFALSE` flash-attn's: R22, R35; `+cu130` torchvision's, accelerator only).
Going the other way, the wheel that matches an installed torch is named by the same
label template the planner uses and served from the find-links page of that torch
(`<base>/torch-2.11.0+cu130.html`); where no such wheel can exist (a source, nightly or
vendor torch) or none is known, the fix is a build from source against it.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_LABEL",
    "BuiltFor",
    "Fix",
    "IndexSettings",
    "ProjectRef",
    "built_for",
    "fix_for",
    "page_url",
    "parse_local_label",
]

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..ecosystem import load_ecosystem
from ..matrix.config import DEFAULT_LOCAL_VERSION
from ..model import BuildRecord
from ..planner import current_local_version, local_version
from ..probe.hostenv import BUILD_WORDS, DistInfo, EnvSnapshot
from ..wheel.meta import parse_build_record

DEFAULT_LABEL = DEFAULT_LOCAL_VERSION
BuiltForSource = Literal["build-record", "requires-dist", "local-version", "unknown"]
_LABEL_TORCH_RES = (
    re.compile(r"(?:^|[^a-z])pt(?P<major>\d)(?P<minor>\d{1,2})(?![0-9])"),
    re.compile(r"torch(?P<major>\d)\.?(?P<minor>\d{1,2})(?![0-9])"),
)
_LABEL_ACCEL_RE = re.compile(r"(?:^|[^a-z])(?P<accel>cpu|cu\d{3,4}|rocm\d+\.\d+)(?![0-9])")


# --- inputs --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class IndexSettings:
    """Where the project's find-links pages are and how its wheels are labelled."""

    base_url: str | None = None
    local_version: str = DEFAULT_LABEL


@dataclass(frozen=True, kw_only=True)
class ProjectRef:
    """The project matrix.yaml builds: packages of this name are ours, built from `path`."""

    name: str | None = None
    path: Path | None = None


@dataclass(frozen=True, kw_only=True)
class BuiltFor:
    """The torch a package says it was built for, and where it says so."""

    torch: str | None = None  # exact '2.11.0+cu130', or '2.11' from a label
    accelerator: str | None = None
    source: BuiltForSource = "unknown"
    abi: str | None = None  # per-python / abi3 / stable (build record)
    label: str | None = None

    @property
    def known(self) -> bool:
        return self.torch is not None

    def describe(self) -> str:
        if not self.known and self.accelerator is None:
            return "unknown (no build record, no torch pin, no label that names a torch)"
        what = f"torch {self.torch}" if self.torch else "torch ?"
        if self.accelerator and not (self.torch and self.accelerator in self.torch):
            what += f" ({self.accelerator})"
        where = {
            "build-record": "build record",
            "requires-dist": "Requires-Dist pin",
            "local-version": f"local version label +{self.label}",
            "unknown": "guess",
        }[self.source]
        if self.abi == "stable":
            what += " or newer (stable ABI)"
        return f"{what} ({where})"

    def to_json(self) -> dict[str, Any]:
        return {
            "torch": self.torch,
            "accelerator": self.accelerator,
            "source": self.source,
            "abi": self.abi,
            "label": self.label,
        }


@dataclass(frozen=True, kw_only=True)
class Fix:
    """What to run, in order, and one line on why."""

    summary: str
    commands: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"summary": self.summary, "commands": list(self.commands)}


# --- what an installed package was built for ----------------------------------------------------------


def parse_local_label(label: str) -> tuple[str | None, str | None]:
    """A local version label → (torch 'X.Y' or None, accelerator or None).

    Reads the common conventions: 'pt211cu130' (ours, PyG), 'cu12torch2.6cxx11abiFALSE'
    (flash-attn), 'cu130' (torchvision: the accelerator only), 'pt213cpu.local'.
    """
    label = label.lower()
    torch: str | None = None
    for pattern in _LABEL_TORCH_RES:
        m = pattern.search(label)
        if m:
            torch = f"{m['major']}.{int(m['minor'])}"
            break
    accel_match = _LABEL_ACCEL_RE.search(label)
    return torch, accel_match["accel"] if accel_match else None


def _exact_torch_pin(requires: Iterable[str]) -> str | None:
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) != "torch":
            continue
        if req.marker is not None and "extra" in str(req.marker):
            continue
        specs = list(req.specifier)
        if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
            return specs[0].version
    return None


def _record(dist: DistInfo) -> BuildRecord | None:
    if dist.build_record is None:
        return None
    try:
        return parse_build_record(dist.build_record)
    except ValueError:  # not ours, or damaged: the pin and the label still tell
        return None


def built_for(dist: DistInfo) -> BuiltFor:
    """What `dist` says it was built for: build record > exact torch pin > local label."""
    try:
        local = Version(dist.version).local
    except InvalidVersion:
        local = None
    label_torch, label_accel = parse_local_label(local) if local else (None, None)
    record = _record(dist)
    if record is not None:
        return BuiltFor(
            torch=record.torch,
            accelerator=record.accelerator.name,
            source="build-record",
            abi=record.abi,
            label=local,
        )
    pin = _exact_torch_pin(dist.requires)
    if pin is not None:
        return BuiltFor(torch=pin, accelerator=label_accel, source="requires-dist", label=local)
    if label_torch is not None or label_accel is not None:
        return BuiltFor(
            torch=label_torch, accelerator=label_accel, source="local-version", label=local
        )
    return BuiltFor(label=local)


def page_url(base_url: str, torch_version: str, accelerator: str) -> str:
    """The find-links page of one torch: '<base>/torch-2.11.0+cu130.html'."""
    public = Version(torch_version).public
    return f"{base_url.rstrip('/')}/torch-{public}+{accelerator}.html"


def _q(text: str | Path) -> str:
    return shlex.quote(str(text))


def _req(spec: str) -> str:
    """A requirement, always quoted ('x==1.0+pt213cpu'): safe to paste into any shell."""
    return f"'{spec}'" if "'" not in spec else shlex.quote(spec)


def fix_for(
    dist: DistInfo,
    bf: BuiltFor,
    *,
    ours: bool,
    snapshot: EnvSnapshot,
    pip: str,
    index: IndexSettings,
    project: ProjectRef | None,
) -> Fix:
    name = dist.name
    try:
        public = Version(dist.version).public
    except InvalidVersion:
        public = dist.version
    torch = snapshot.torch
    if torch is None:
        if bf.torch:
            spec = f"torch=={bf.torch}" if bf.torch.count(".") >= 2 else f"torch=={bf.torch}.*"
            torch_index = load_ecosystem().pytorch_index
            accel = (
                f" --index-url {_q(f'{torch_index}/{bf.accelerator}')}" if bf.accelerator else ""
            )
            return Fix(
                summary=f"install the torch {name} was built for",
                commands=(f"{pip} install {_req(spec)}{accel}",),
            )
        return Fix(
            summary=f"install torch (which {name} needs); check which torch it was built for",
            commands=(f"{pip} install torch",),
        )
    abi = bf.abi or "per-python"
    src = dist.source_dir
    if dist.editable and src is not None:
        return Fix(
            summary=f"rebuild the editable install of {name} against this torch",
            commands=(f"{pip} install --no-build-isolation -e {_q(src)}",),
        )
    release = torch.build == "release"
    if ours and release and index.base_url:
        label = local_version(
            index.local_version, torch=torch.version, accelerator=torch.accelerator, abi=abi
        )
        wanted = f"{public}+{label}"
        force = " --force-reinstall --no-deps" if _same_version(dist.version, wanted) else ""
        page = page_url(index.base_url, torch.version, torch.accelerator)
        return Fix(
            summary=(
                f"install the {name} wheel built for torch {torch.public_version} "
                f"({torch.accelerator}) from the project's index"
            ),
            commands=(f"{pip} install{force} {_req(f'{name}=={wanted}')} -f {_q(page)}",),
        )
    source = project.path if ours and project is not None and project.path else None
    if source is None and src is not None and src.is_dir():
        source = src
    why = (
        f"this torch is a {BUILD_WORDS[torch.build]}, which no index serves"
        if not release
        else "no index with a matching wheel is configured (--index URL or matrix.yaml "
        "index.base_url)"
        if ours
        else "it is not this project's package, so no index of ours has it"
    )
    if source is not None:
        label = current_local_version(
            index.local_version,
            torch=torch.version,
            accelerator=torch.accelerator,
            abi=abi,
            release=release,
            git_short=torch.git_short,
        )
        return Fix(
            summary=f"build {name} from source against this torch ({why})",
            commands=(
                f"nox -s build -- --torch current --torch-python {_q(snapshot.python)} "
                f"--project {_q(source)}",
                f"{pip} install --no-deps --no-index -f wheelhouse {_req(f'{name}=={public}+{label}')}",
            ),
        )
    return Fix(
        summary=f"rebuild {name} from its source distribution against this torch ({why})",
        commands=(
            f"{pip} install --force-reinstall --no-deps --no-build-isolation "
            f"--no-binary {_q(name)} {_req(f'{name}=={public}')}",
        ),
    )


def _same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return False
