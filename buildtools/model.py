"""The shared vocabulary: Accelerator, Cell, BuildJob, BuildRecord, Finding (frozen records).

Values cross stage boundaries as these records, parsed once: an accelerator name is an
`Accelerator`, a job's repair settings one `RepairPolicy`, a wheel's `buildtools.json` a
`BuildRecord`. Each record that is written as JSON has one `to_json` and a `from_json`
that refuses bad input with the key path and what was expected.
"""

from __future__ import annotations

__all__ = [
    "ABI_MODES",
    "BUILD_RECORD_SCHEMA",
    "COMPILER_CACHES",
    "PLATFORMS",
    "RUNNER_ACCELERATOR_ENV",
    "AbiMode",
    "Accelerator",
    "BuildJob",
    "BuildRecord",
    "BuildRecordError",
    "Cell",
    "CompilerCacheTool",
    "Finding",
    "RepairPolicy",
    "Severity",
    "Toolkit",
    "build_record_problems",
]

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from .jsonfields import MISSING, Fields, json_type

AbiMode = Literal["per-python", "abi3", "stable"]
ABI_MODES: tuple[AbiMode, ...] = ("per-python", "abi3", "stable")
# the programs that can wrap a job's compilers as its compiler cache (the first: the default,
# measured in docs/performance.md)
CompilerCacheTool = Literal["ccache", "sccache"]
COMPILER_CACHES: tuple[CompilerCacheTool, ...] = ("ccache", "sccache")
PLATFORMS: tuple[str, ...] = ("linux_x86_64", "linux_aarch64")
DEFAULT_PLATFORM = "linux_x86_64"

_ACCEL_RE = re.compile(r"^(?:(?P<cpu>cpu)|cu(?P<cuda>\d{3,4})|rocm(?P<rocm>\d+\.\d+(?:\.\d+)?))$")

# What a workflow declares its smoke runner to have (cpu, cuda, rocm): the generated smoke
# jobs set it, and `smoke --accelerator auto` on a runner declared cuda is cuda whatever the
# machine shows, so a GPU runner that lost its device is refused (no-device) instead of
# silently testing as a CPU runner.
RUNNER_ACCELERATOR_ENV = "BUILDTOOLS_RUNNER_ACCELERATOR"


@dataclass(frozen=True, kw_only=True, order=True)
class Accelerator:
    """`cpu`, `cuXYZ` (CUDA X.YZ → e.g. cu130 is 13.0, cu126 is 12.6) or `rocmX.Y`."""

    name: str
    kind: Literal["cpu", "cuda", "rocm"]
    version: str | None

    @classmethod
    def parse(cls, name: str) -> Accelerator:
        """Parse an accelerator name; raises ValueError with the allowed forms."""
        m = _ACCEL_RE.match(name)
        if m is None:
            raise ValueError(
                f"{name!r} is not an accelerator; allowed: 'cpu', 'cuXYZ' (e.g. cu126, cu130), "
                "'rocmX.Y' (e.g. rocm6.4)"
            )
        if m["cpu"]:
            return cls(name="cpu", kind="cpu", version=None)
        if m["cuda"]:
            digits = m["cuda"]
            return cls(name=name, kind="cuda", version=f"{digits[:-1]}.{digits[-1]}")
        return cls(name=name, kind="rocm", version=m["rocm"])

    @property
    def is_device(self) -> bool:
        return self.kind != "cpu"


def _accelerator(fields: Fields, key: str) -> Accelerator:
    name = fields.text(key)
    try:
        return Accelerator.parse(name)
    except ValueError as exc:
        raise ValueError(f"{fields.path}.{key}: {exc}") from None


def python_tag(python: str) -> str:
    """'3.12' → 'cp312'."""
    return "cp" + python.replace(".", "")


@dataclass(frozen=True, kw_only=True, order=True)
class Cell:
    """One point of the support matrix."""

    torch: str
    accelerator: str
    python: str
    platform: str = DEFAULT_PLATFORM
    # `torch: current`: the torch of the running environment (`torch` is its exact
    # torch.__version__, e.g. "2.13.0+cpu" or "2.13.0a0+git1a2b3c4"), not an index release.
    current: bool = False

    @property
    def id(self) -> str:
        """Stable, readable id: torch2.11.0-cu130-cp312 (platform suffix when not x86_64).

        A `torch: current` cell says so: torch2.13.0+cpu-current-cpu-cp311.
        """
        marker = "-current" if self.current else ""
        base = f"torch{self.torch}{marker}-{self.accelerator}-{python_tag(self.python)}"
        if self.platform != DEFAULT_PLATFORM:
            base += "-" + self.platform.removeprefix("linux_")
        return base

    def to_json(self) -> dict[str, Any]:
        return {
            "torch": self.torch,
            "accelerator": self.accelerator,
            "python": self.python,
            "platform": self.platform,
            "current": self.current,
        }

    @classmethod
    def _read(cls, r: Fields) -> Cell:
        return cls(
            torch=r.text("torch"),
            accelerator=r.text("accelerator"),
            python=r.text("python"),
            platform=r.text("platform", DEFAULT_PLATFORM),
            current=r.flag("current", False),
        )


@dataclass(frozen=True, kw_only=True)
class Toolkit:
    """What compiles device code: CUDA/ROCm version, PyPI packages pinned, arch list."""

    kind: Literal["cuda", "rocm"]
    version: str
    arch_list: str
    pip_packages: tuple[str, ...] = ()
    # "enforce": the compiler wrapper replaces the project's own arch flags with arch_list
    arch_flags: Literal["keep", "enforce"] = "keep"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "version": self.version,
            "arch_list": self.arch_list,
            "pip_packages": list(self.pip_packages),
        }
        if self.arch_flags != "keep":  # plans and fingerprints of the default stay as they were
            out["arch_flags"] = self.arch_flags
        return out

    @classmethod
    def _read(cls, r: Fields) -> Toolkit:
        return cls(
            kind=r.choice("kind", ("cuda", "rocm")),
            version=r.text("version"),
            arch_list=r.text("arch_list"),
            pip_packages=r.texts("pip_packages", ()),
            arch_flags=r.choice("arch_flags", ("keep", "enforce"), "keep"),
        )


RepairMode = Literal["auto", "skip", "command"]
REPAIR_MODES: tuple[RepairMode, ...] = ("auto", "skip", "command")


@dataclass(frozen=True, kw_only=True)
class RepairPolicy:
    """How a job's raw wheel is repaired: `auto` (auditwheel against the job's torch), `skip`,
    or `command` (the project's argv, with {wheel}, {dest_dir}, {plat}); `excludes` are
    library globs never grafted, on top of the knowledge base's."""

    mode: RepairMode = "auto"
    command: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.mode == "command") != bool(self.command):
            raise ValueError("a repair command is given exactly when the mode is 'command'")

    @property
    def policy(self) -> str | tuple[str, ...]:
        """The mode, or the command's argv when the mode is `command`."""
        return self.command if self.mode == "command" else self.mode


@dataclass(frozen=True, kw_only=True)
class BuildJob:
    """One build that covers one or more cells; every field is derived by the planner."""

    id: str
    cells: tuple[Cell, ...]
    abi: AbiMode
    torch: str
    torch_versions: tuple[str, ...]
    accelerator: Accelerator
    pythons: tuple[str, ...]
    platform: str
    torch_requirement: str
    requires_dist: str
    toolkit: Toolkit | None
    image: str
    platform_tag: str
    local_version: str
    cxx11_abi: bool
    env: tuple[tuple[str, str], ...]
    runner: str | tuple[str, ...]
    smoke_runner: str | tuple[str, ...] | None
    repair: RepairPolicy
    torch_index: str | None = None
    smoke: str | None = None
    # "current": build against the torch of the environment of `current_python` (no torch
    # install; a venv that sees that environment's site-packages), see docs/matrix.md.
    torch_source: Literal["index", "current"] = "index"
    current_python: str | None = None
    # the compiler cache that wraps this job's compilers (matrix `build.compiler_cache`);
    # None: no compiler cache
    compiler_cache: CompilerCacheTool | None = "ccache"

    def __post_init__(self) -> None:
        # a name left where the value belongs fails here, not deep inside a backend
        if not isinstance(self.accelerator, Accelerator):
            raise TypeError(f"{self.id}: accelerator must be an Accelerator (Accelerator.parse)")
        if not isinstance(self.repair, RepairPolicy):
            raise TypeError(f"{self.id}: repair must be a RepairPolicy")

    @property
    def build_python(self) -> str:
        """The interpreter the job builds with (the oldest of its Pythons)."""
        return self.pythons[0]

    @property
    def cell_ids(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.cells)

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def to_json(self) -> dict[str, Any]:
        """Every field of the job as JSON data, read back by `from_json`.

        The layout is what job fingerprints hash (`build.fingerprint.job_config`): keep
        it, or every published wheel's fingerprint changes.
        """
        return {
            "id": self.id,
            "cells": [c.to_json() for c in self.cells],
            "abi": self.abi,
            "torch": self.torch,
            "torch_versions": list(self.torch_versions),
            "accelerator": self.accelerator.name,
            "pythons": list(self.pythons),
            "platform": self.platform,
            "torch_requirement": self.torch_requirement,
            "requires_dist": self.requires_dist,
            "toolkit": self.toolkit.to_json() if self.toolkit else None,
            "image": self.image,
            "platform_tag": self.platform_tag,
            "local_version": self.local_version,
            "cxx11_abi": self.cxx11_abi,
            "env": [[k, v] for k, v in self.env],
            "runner": _label_json(self.runner),
            "smoke_runner": _label_json(self.smoke_runner),
            "repair": self.repair.mode,
            "repair_command": list(self.repair.command),
            "repair_excludes": list(self.repair.excludes),
            "torch_index": self.torch_index,
            "smoke": self.smoke,
            "torch_source": self.torch_source,
            "current_python": self.current_python,
            "compiler_cache": self.compiler_cache,
        }

    @classmethod
    def from_json(cls, data: object, *, where: str = "job") -> BuildJob:
        """The job `to_json` wrote; ValueError naming the key path on malformed data."""
        r = Fields(data, where)
        env: list[tuple[str, str]] = []
        for i, pair in enumerate(r.items("env")):
            if not (
                isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)
            ):
                raise ValueError(f"{where}.env[{i}]: expected a [name, value] pair of strings")
            env.append((pair[0], pair[1]))
        toolkit = r.data.get("toolkit")
        try:
            repair = RepairPolicy(
                mode=r.choice("repair", REPAIR_MODES, "auto"),
                command=r.texts("repair_command", ()),
                excludes=r.texts("repair_excludes", ()),
            )
        except ValueError as exc:
            raise ValueError(f"{where}.repair_command: {exc}") from None
        return cls(
            id=r.text("id"),
            cells=tuple(Cell._read(c) for c in r.objects("cells")),
            abi=r.choice("abi", ABI_MODES),
            torch=r.text("torch"),
            torch_versions=r.texts("torch_versions"),
            accelerator=_accelerator(r, "accelerator"),
            pythons=r.texts("pythons"),
            platform=r.text("platform"),
            torch_requirement=r.text("torch_requirement"),
            requires_dist=r.text("requires_dist"),
            toolkit=None if toolkit is None else Toolkit._read(Fields(toolkit, f"{where}.toolkit")),
            image=r.text("image"),
            platform_tag=r.text("platform_tag"),
            local_version=r.text("local_version"),
            cxx11_abi=r.flag("cxx11_abi"),
            env=tuple(env),
            runner=cast("str | tuple[str, ...]", r.label("runner", MISSING)),
            smoke_runner=r.label("smoke_runner"),
            repair=repair,
            torch_index=r.opt_text("torch_index"),
            smoke=r.opt_text("smoke"),
            torch_source=r.choice("torch_source", ("index", "current"), "index"),
            current_python=r.opt_text("current_python"),
            compiler_cache=_compiler_cache(r),
        )

    def to_plan_json(self) -> dict[str, Any]:
        """The job as GitHub Actions' matrix consumes it (`buildtools plan --format json`):
        flat, with the values a workflow step reads; not read back."""
        return {
            "id": self.id,
            "cells": list(self.cell_ids),
            "abi": self.abi,
            "torch": self.torch,
            "torch_versions": list(self.torch_versions),
            "accelerator": self.accelerator.name,
            "python": self.build_python,
            "pythons": list(self.pythons),
            "platform": self.platform,
            "platform_tag": self.platform_tag,
            "image": self.image,
            "runner": _label_json(self.runner),
            "smoke_runner": _label_json(self.smoke_runner),
            "torch_requirement": self.torch_requirement,
            "torch_source": self.torch_source,
            "requires_dist": self.requires_dist,
            "local_version": self.local_version,
            "arch_list": self.toolkit.arch_list if self.toolkit else None,
            "toolkit": list(self.toolkit.pip_packages) if self.toolkit else [],
            "env": dict(self.env),
            "repair": self.repair.mode,
            # the tool that wraps the job's compilers (null: none)
            "compiler_cache": self.compiler_cache,
            # a ccache job's cache is $BUILDTOOLS_CCACHE_DIR/<ccache_key> (else
            # <cache dir>/ccache/<ccache_key>): what a CI job restores and saves; null: none
            "ccache_key": self.id if self.compiler_cache == "ccache" else None,
        }


def _compiler_cache(r: Fields) -> CompilerCacheTool | None:
    """`compiler_cache` of a job's JSON (a writer before it had `ccache`: true/false)."""
    if "compiler_cache" not in r.data and "ccache" in r.data:
        return "ccache" if r.flag("ccache") else None
    value = r.data.get("compiler_cache", "ccache")
    if value is None:
        return None
    return r.choice("compiler_cache", COMPILER_CACHES, "ccache")


def _opt_list(values: tuple[str, ...] | None) -> list[str] | None:
    return None if values is None else list(values)


def _label_json(label: str | tuple[str, ...] | None) -> str | list[str] | None:
    return list(label) if isinstance(label, tuple) else label


# ------------------------------------------------------------------------ build records

BUILD_RECORD_SCHEMA = 1
# key → the JSON types it may hold (None: null). Unknown keys are allowed (newer writers).
_RECORD_TYPES: dict[str, tuple[type, ...]] = {
    "schema": (int,),
    "torch": (str,),
    "accelerator": (str,),
    "cxx11_abi": (bool,),
    "cuda": (str, type(None)),
    "hip": (str, type(None)),
    "arch_list": (str, type(None)),
    "python": (str, type(None)),
    "abi": (str, type(None)),
    "torch_requirement": (str, type(None)),
    "fingerprint": (str, type(None)),
    "cells": (list,),
    "buildtools": (str,),
    "job": (str, type(None)),
    "source_fingerprint": (str, type(None)),
    "torch_versions": (list, type(None)),
    "platform": (str, type(None)),
    "promised_platform_tag": (str, type(None)),
    "arch_flags_replaced": (list, type(None)),
}
_RECORD_REQUIRED = ("schema", "torch", "accelerator", "cxx11_abi")


def build_record_problems(record: object) -> list[str]:
    """Problems with a build record, as phrases ('torch: missing'); empty when valid.

    Schema 1: the required keys (`_RECORD_REQUIRED`) and every key's types
    (`_RECORD_TYPES`; the fields of `BuildRecord`); unknown keys are allowed (newer writers).
    """
    if not isinstance(record, Mapping):
        return [f"expected a JSON object, got {json_type(record)}"]
    problems: list[str] = []
    for key in _RECORD_REQUIRED:
        if key not in record:
            problems.append(f"{key}: missing")
    for key, types in _RECORD_TYPES.items():
        value = record.get(key)
        if key not in record:
            continue
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            problems.append(f"{key}: expected {names}, got {type(value).__name__}")
        elif isinstance(value, list) and not all(isinstance(v, str) for v in value):
            problems.append(f"{key}: expected a list of strings")
    schema = record.get("schema")
    if isinstance(schema, int) and not isinstance(schema, bool) and schema != BUILD_RECORD_SCHEMA:
        problems.append(f"schema: {schema} is not supported (this buildtools reads 1)")
    accelerator = record.get("accelerator")
    if isinstance(accelerator, str):
        try:
            Accelerator.parse(accelerator)
        except ValueError as exc:
            problems.append(f"accelerator: {exc}")
    return problems


class BuildRecordError(ValueError):
    """A build record that is not valid schema 1; `problems` lists what is wrong."""

    def __init__(self, problems: Sequence[str], *, where: str | None = None) -> None:
        joined = "; ".join(problems)
        super().__init__(f"{where}: {joined}" if where else joined)
        self.problems = tuple(problems)


@dataclass(frozen=True, kw_only=True)
class BuildRecord:
    """What a wheel says it was built for: `<dist-info>/buildtools.json` (schema 1).

    `buildtools build` writes it from the job and its toolchain (`for_job`); doctor, smoke,
    `check`, the index and incremental builds read it back with `from_json`.
    """

    torch: str  # torch.__version__ built against, e.g. '2.11.0+cu130'
    accelerator: Accelerator
    cxx11_abi: bool
    buildtools: str | None = None  # the version that wrote it
    cuda: str | None = None
    hip: str | None = None
    arch_list: str | None = None
    python: str | None = None  # the full version of the build interpreter
    abi: str | None = None
    torch_requirement: str | None = None  # the wheel's Requires-Dist on torch
    fingerprint: str | None = None  # the job's (build.fingerprint); None: not reusable
    cells: tuple[str, ...] = ()
    # what `buildtools build` adds (None: the key is absent)
    job: str | None = None
    source_fingerprint: str | None = None
    torch_versions: tuple[str, ...] | None = None
    platform: str | None = None
    promised_platform_tag: str | None = None
    # "warning" or "error": how the build judged a tag weaker than promised
    weaker_platform_tag: str | None = None
    # arch_flags: enforce: the project's own arch flags the compiler wrapper replaced
    arch_flags_replaced: tuple[str, ...] | None = None

    @classmethod
    def for_job(
        cls,
        job: BuildJob,
        *,
        torch: str,
        cxx11_abi: bool,
        python: str,
        device_runtime: str | None,
        fingerprint: str | None,
        source_fingerprint: str,
    ) -> BuildRecord:
        """The record of `job`'s wheel; the rest are facts of the toolchain that built it.

        `device_runtime` is the torch's `torch.version.cuda` for a CUDA job, its
        `torch.version.hip` for a ROCm one (ignored for a CPU job).
        """
        kind = job.accelerator.kind
        from . import __version__

        return cls(
            buildtools=__version__,
            torch=torch,
            accelerator=job.accelerator,
            cxx11_abi=cxx11_abi,
            cuda=device_runtime if kind == "cuda" else None,
            hip=device_runtime if kind == "rocm" else None,
            arch_list=job.toolkit.arch_list if job.toolkit else None,
            python=python,
            abi=job.abi,
            torch_requirement=job.requires_dist,
            fingerprint=fingerprint,
            cells=job.cell_ids,
            job=job.id,
            source_fingerprint=source_fingerprint,
            torch_versions=job.torch_versions,
            platform=job.platform,
            promised_platform_tag=job.platform_tag,
        )

    @classmethod
    def from_json(cls, data: object) -> BuildRecord:
        """A record read from JSON; BuildRecordError lists every problem."""
        problems = build_record_problems(data)
        if problems:
            raise BuildRecordError(problems)
        r = Fields(data, "build record")
        return cls(
            torch=r.text("torch"),
            accelerator=_accelerator(r, "accelerator"),
            cxx11_abi=r.flag("cxx11_abi"),
            buildtools=r.opt_text("buildtools"),
            cuda=r.opt_text("cuda"),
            hip=r.opt_text("hip"),
            arch_list=r.opt_text("arch_list"),
            python=r.opt_text("python"),
            abi=r.opt_text("abi"),
            torch_requirement=r.opt_text("torch_requirement"),
            fingerprint=r.opt_text("fingerprint"),
            cells=r.texts("cells", ()),
            job=r.opt_text("job"),
            source_fingerprint=r.opt_text("source_fingerprint"),
            torch_versions=r.opt_texts("torch_versions"),
            platform=r.opt_text("platform"),
            promised_platform_tag=r.opt_text("promised_platform_tag"),
            weaker_platform_tag=r.opt_text("weaker_platform_tag"),
            arch_flags_replaced=r.opt_texts("arch_flags_replaced"),
        )

    def to_json(self) -> dict[str, object]:
        """The record as written into a wheel (`from_json(to_json())` is the same record)."""
        data: dict[str, object] = {
            "schema": BUILD_RECORD_SCHEMA,
            "buildtools": self.buildtools,
            "torch": self.torch,
            "accelerator": self.accelerator.name,
            "cxx11_abi": self.cxx11_abi,
            "cuda": self.cuda,
            "hip": self.hip,
            "arch_list": self.arch_list,
            "python": self.python,
            "abi": self.abi,
            "torch_requirement": self.torch_requirement,
            "fingerprint": self.fingerprint,
            "cells": list(self.cells),
        }
        extra: dict[str, object] = {
            "source_fingerprint": self.source_fingerprint,
            "job": self.job,
            "torch_versions": _opt_list(self.torch_versions),
            "platform": self.platform,
            "promised_platform_tag": self.promised_platform_tag,
            "weaker_platform_tag": self.weaker_platform_tag,
            "arch_flags_replaced": _opt_list(self.arch_flags_replaced),
        }
        data.update((k, v) for k, v in extra.items() if v is not None)
        return data


class Severity(enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One result of a check: a code, a severity and a sentence a maintainer can act on."""

    code: str
    severity: Severity
    message: str
    path: str | None = None
    details: tuple[str, ...] = field(default=())
