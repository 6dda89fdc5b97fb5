"""matrix.yaml: the model, its validation, and errors that point at file:line."""

from __future__ import annotations

__all__ = [
    "DEFAULT_LOCAL_VERSION",
    "AcceleratorOverride",
    "Axes",
    "CellRule",
    "CiConfig",
    "IndexConfig",
    "Matrix",
    "MatrixFile",
    "Profile",
    "ProjectConfig",
    "RepairCommand",
    "Runners",
    "is_range",
    "json_schema",
    "load_matrix",
    "parse_matrix",
]

import difflib
import keyword
import re
import string
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..errors import ConfigError
from ..knowledge import Knowledge, load_knowledge
from ..model import PLATFORMS, AbiMode, Accelerator
from .ciconfig import CiConfig
from .fields import ByteSize, Strict, check_url
from .indexconfig import DEFAULT_LOCAL_VERSION, IndexConfig
from .runners import Runners
from .yamlsource import Loc, SourceMap, load_yaml

FAMILIES = ("cpu", "cuda", "rocm")
CELL_KEYS = ("torch", "accelerator", "python", "platform")
HOST = "host"
CURRENT = "current"  # axes.torch: the torch of the running environment
_PY_RE = re.compile(r"^3\.\d{1,2}t?$")  # '3.14t': free-threaded CPython
_TORCH_RE = re.compile(r"^\d+\.\d+\.\d+$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _no_number(kind: str, example: str) -> Any:
    """Reject YAML numbers where a version string is expected (3.10 would load as 3.1)."""

    def check(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return value
        raise ValueError(
            f"{value!r} is a number, so YAML may have changed it (3.10 loads as 3.1); "
            f'write {kind} versions as quoted strings, e.g. "{example}"'
        )

    return BeforeValidator(check)


def _kb(info: ValidationInfo) -> Knowledge:
    ctx = info.context
    kb = ctx.get("knowledge") if isinstance(ctx, dict) else None
    return kb if isinstance(kb, Knowledge) else load_knowledge()


def is_range(value: str) -> bool:
    """A version specifier ('>=2.10', '~=2.13.0', '>=2.10,<2.14'), not a release or glob."""
    return value.startswith(("<", ">", "=", "!", "~"))


def _check_torch_range(value: str, info: ValidationInfo) -> str:
    try:
        spec = SpecifierSet(value)
    except InvalidSpecifier:
        raise ValueError(
            f"{value!r} is not a version range; write a specifier such as '>=2.10' or "
            "'>=2.10,<2.15'"
        ) from None
    known = _kb(info).torch_versions()
    if not any(spec.contains(v) for v in known):
        raise ValueError(
            f"{value!r} matches no torch release the knowledge base knows ({known[0]} … "
            f"{known[-1]}; `buildtools knowledge` lists them)"
        )
    return value


def _check_torch_version(value: str, info: ValidationInfo) -> str:
    if value == CURRENT:
        return value
    if is_range(value):
        return _check_torch_range(value, info)
    if not _TORCH_RE.match(value):
        raise ValueError(
            f"{value!r} is not a torch release; write MAJOR.MINOR.PATCH, e.g. 2.11.0, a range "
            "such as '>=2.10' (every release the index serves, newest patch per minor), or "
            "'current' for the torch of the running environment"
        )
    known = _kb(info).torch_versions()
    if value not in known:
        close = difflib.get_close_matches(value, known, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ValueError(
            f"torch {value} is not a known release; allowed: {known[0]} … {known[-1]} "
            f"(`buildtools knowledge` lists them){hint}"
        )
    return value


def _check_python(value: str) -> str:
    if value != HOST and not _PY_RE.match(value):
        raise ValueError(
            f"{value!r} is not a Python version; allowed: '3.X' (e.g. \"3.12\"), '3.Xt' for "
            "free-threaded CPython (\"3.14t\") or 'host'"
        )
    return value


def _check_accelerator(value: str) -> str:
    Accelerator.parse(value)
    return value


def _check_platform(value: str) -> str:
    if value not in PLATFORMS:
        raise ValueError(f"{value!r} is not a platform; allowed: {', '.join(PLATFORMS)}")
    return value


TorchVersion = Annotated[str, _no_number("torch", "2.11.0")]
PythonVersion = Annotated[str, _no_number("Python", "3.12")]


def _check_glob(pattern: str) -> str:
    """Reject globs fnmatch would silently read as literals (unbalanced brackets)."""
    depth = 0
    for ch in pattern:
        if ch == "[":
            if depth:
                raise ValueError(f"{pattern!r} is not a valid glob: nested '['")
            depth = 1
        elif ch == "]" and depth:
            depth = 0
    if depth:
        raise ValueError(
            f"{pattern!r} is not a valid glob: '[' is never closed; allowed: * ? [seq]"
        )
    if "]" in pattern.replace("[]", "") and "[" not in pattern:
        raise ValueError(f"{pattern!r} is not a valid glob: ']' without '['")
    return pattern


def is_glob(value: str) -> bool:
    return any(ch in value for ch in "*?[")


class CellRule(Strict):
    """A partial cell: each key is a value or a glob; missing keys match everything."""

    torch: TorchVersion | None = None
    accelerator: str | None = None
    python: PythonVersion | None = None
    platform: str | None = None

    @field_validator("torch", "accelerator", "python", "platform")
    @classmethod
    def _glob(cls, value: str | None) -> str | None:
        if value is not None and is_range(value):
            raise ValueError(
                f"{value!r}: a torch range belongs in axes.torch; a rule names a release or "
                "a glob (e.g. '2.14.*')"
            )
        return _check_glob(value) if value is not None else None

    @model_validator(mode="after")
    def _not_empty(self) -> CellRule:
        if all(getattr(self, k) is None for k in CELL_KEYS):
            raise ValueError(f"a rule needs at least one of: {', '.join(CELL_KEYS)}")
        return self

    def values(self) -> dict[str, str]:
        return {k: v for k in CELL_KEYS if (v := getattr(self, k)) is not None}


class RepairCommand(Strict):
    """A custom repair command: argv with {wheel}, {dest_dir}, {plat} placeholders."""

    command: list[str] = Field(min_length=1)

    @field_validator("command")
    @classmethod
    def _placeholders(cls, argv: list[str]) -> list[str]:
        allowed = {"wheel", "dest_dir", "plat"}
        for arg in argv:
            for _, name, _, _ in string.Formatter().parse(arg):
                if name is not None and name not in allowed:
                    raise ValueError(
                        f"unknown placeholder {{{name}}}; allowed: {{wheel}}, {{dest_dir}}, {{plat}}"
                    )
        if not any("{wheel}" in a for a in argv):
            raise ValueError("the command must use {wheel} (the raw wheel to repair)")
        return argv


_MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def _check_env(env: dict[str, str]) -> dict[str, str]:
    for name in env:
        if not _ENV_NAME_RE.match(name):
            raise ValueError(f"{name!r} is not an environment variable name")
    return env


class AcceleratorOverride(Strict):
    """Per-accelerator settings; keys of `accelerators:` are names, families or globs."""

    arch_list: str | None = None
    # keep: the project's own arch flags stand (checks report what they produced); enforce:
    # the compiler wrapper replaces them with the cell's arch_list (docs/matrix.md)
    arch_flags: Literal["keep", "enforce"] = "keep"
    repair: Literal["auto", "skip"] | RepairCommand = "auto"
    exclude_libs: list[str] = Field(default_factory=list)
    torch_index: str | None = None
    image: str | None = None
    build_env: dict[str, str] = Field(default_factory=dict)

    _env = field_validator("build_env")(classmethod(lambda cls, v: _check_env(v)))

    @field_validator("torch_index")
    @classmethod
    def _torch_index(cls, value: str | None) -> str | None:
        return check_url(value, schemes=("https", "http", "file")) if value else value

    @field_validator("arch_list")
    @classmethod
    def _arch(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9.+_]+(;[A-Za-z0-9.+_]+)*", value):
            raise ValueError(
                f"{value!r} is not an arch list; write it as TORCH_CUDA_ARCH_LIST does, "
                'e.g. "8.0;9.0+PTX" (CUDA) or "gfx90a;gfx942" (ROCm)'
            )
        return value


# the local version label of a wheel when matrix.yaml's index.local_version is not set
class Profile(Strict):
    """A named subset of the matrix: cells matching any `select` rule (all when empty)."""

    description: str = ""
    select: list[CellRule] = Field(default_factory=list)


class BuildSettings(Strict):
    max_jobs: int | None = Field(default=None, ge=1)
    # the compiler cache in front of the host compiler and nvcc (when it is installed):
    # ccache (the default: it measured better here, docs/performance.md), sccache (its
    # GitHub Actions backend in the generated workflows; sccache-dist), or none
    compiler_cache: Literal["ccache", "sccache", "none"] = "ccache"
    # false: no compiler cache at all (kept from before `compiler_cache`; wins over it)
    ccache: bool = True

    @property
    def cache_tool(self) -> Literal["ccache", "sccache"] | None:
        """The tool that wraps the compilers, None for no compiler cache."""
        if not self.ccache or self.compiler_cache == "none":
            return None
        return self.compiler_cache

    # wheel-size check: warning and error thresholds (default: PyPI's 100 MiB upload limit,
    # GitHub's 2 GiB release-asset limit, data/ecosystem.json)
    size_warning: ByteSize = None
    size_error: ByteSize = None
    # nvcc --compress-mode for the fatbins of CUDA >= 12.8 jobs (None: nvcc's default)
    cuda_compress: Literal["default", "size", "speed", "balance", "none"] | None = None
    # an sccache-dist scheduler URL: compile units on its build servers (--distribute; the
    # client token comes from $BUILDTOOLS_DIST_TOKEN, never from this file)
    distribute: str | None = Field(default=None, pattern=r"^https?://[^\s/?#@]+/?$")


class ProjectConfig(Strict):
    path: str = "examples/scatter"
    name: str | None = None
    abi: AbiMode = "per-python"
    smoke: str | None = None
    # what the smoke command needs besides the wheel and torch (e.g. pytest), pip-installed
    # into each wheel's smoke env before it runs
    smoke_requires: list[str] = Field(default_factory=list)
    build_env: dict[str, str] = Field(default_factory=dict)
    # compiled modules (dotted names, as `import` takes them) that may fail to load where
    # their library or device is absent: `buildtools smoke` reports them instead of failing
    optional_modules: list[str] = Field(default_factory=list)

    _env = field_validator("build_env")(classmethod(lambda cls, v: _check_env(v)))

    @field_validator("optional_modules")
    @classmethod
    def _modules(cls, value: list[str]) -> list[str]:
        seen: set[str] = set()
        for name in value:
            if not _MODULE_RE.fullmatch(name) or any(
                keyword.iskeyword(part) for part in name.split(".")
            ):
                raise ValueError(
                    f"{name!r} is not a module name; write it as `import` takes it, dotted, "
                    "e.g. 'my_ext._cuda'"
                )
            if name in seen:
                raise ValueError(f"{name!r} is listed twice")
            seen.add(name)
        return value


class Axes(Strict):
    torch: list[Annotated[TorchVersion, AfterValidator(_check_torch_version)]] = Field(min_length=1)
    accelerator: list[Annotated[str, AfterValidator(_check_accelerator)]] = Field(min_length=1)
    python: list[Annotated[PythonVersion, AfterValidator(_check_python)]] = Field(min_length=1)
    platform: list[Annotated[str, AfterValidator(_check_platform)]] = Field(
        default_factory=lambda: ["linux_x86_64"], min_length=1
    )


class Matrix(Strict):
    """The validated content of matrix.yaml."""

    version: Literal[1] = 1
    project: ProjectConfig = Field(default_factory=ProjectConfig)
    axes: Axes
    include: list[CellRule] = Field(default_factory=list)
    exclude: list[CellRule] = Field(default_factory=list)
    accelerators: dict[str, AcceleratorOverride] = Field(default_factory=dict)
    runners: Runners = Field(default_factory=Runners)
    profiles: dict[str, Profile] = Field(default_factory=dict)
    default_profile: str | None = None
    index: IndexConfig = Field(default_factory=IndexConfig)
    build: BuildSettings = Field(default_factory=BuildSettings)
    ci: CiConfig = Field(default_factory=CiConfig)

    @field_validator("accelerators")
    @classmethod
    def _accel_keys(cls, value: dict[str, AcceleratorOverride]) -> dict[str, AcceleratorOverride]:
        for key in value:
            if key in FAMILIES or is_glob(key):
                _check_glob(key)
                continue
            try:
                Accelerator.parse(key)
            except ValueError:
                raise ValueError(
                    f"{key!r} is not an accelerator, family or glob; allowed: cpu, cuda, rocm, "
                    "an accelerator name (cu130, rocm6.4) or a glob (cu12*)"
                ) from None
        return value

    @field_validator("default_profile")
    @classmethod
    def _profile_exists(cls, value: str | None, info: ValidationInfo) -> str | None:
        profiles = info.data.get("profiles")
        if value is not None and isinstance(profiles, dict) and value not in profiles:
            names = sorted(profiles)
            close = difflib.get_close_matches(value, names, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise ValueError(
                f"{value!r} is not a profile; defined: {', '.join(names) or '(none)'}{hint}"
            )
        return value

    @field_validator("ci")
    @classmethod
    def _pypi_variant(cls, value: CiConfig, info: ValidationInfo) -> CiConfig:
        axes = info.data.get("axes")
        if value.pypi is None or not isinstance(axes, Axes):
            return value
        for key, chosen, axis in (
            ("torch", value.pypi.torch, axes.torch),
            ("accelerator", value.pypi.accelerator, axes.accelerator),
        ):
            in_range = key == "torch" and any(
                is_range(a) and SpecifierSet(a).contains(chosen) for a in axis
            )
            if chosen not in axis and not in_range:
                raise ValueError(
                    f"pypi.{key}: {chosen!r} is not in axes.{key} ({', '.join(axis)}); "
                    "the PyPI variant must be one the matrix builds"
                )
        return value


@dataclass(frozen=True)
class MatrixFile:
    """A Matrix plus where it came from, so later stages can point at lines too."""

    matrix: Matrix
    source: SourceMap

    @property
    def path(self) -> Path:
        return self.source.path

    @property
    def project_dir(self) -> Path:
        return (self.path.parent / self.matrix.project.path).resolve()

    def error(self, loc: Loc, message: str) -> str:
        return f"{self.source.where(loc)}: {_dotted(loc)}: {message}"


def _dotted(loc: Sequence[str | int]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _unwrap(annotation: Any) -> list[Any]:
    """The model classes an annotation may hold (through Optional, list, dict, Annotated)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _unwrap(arg)]
    if origin in (list, tuple, dict):
        args = typing.get_args(annotation)
        return _unwrap(args[-1]) if args else []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return []


def _model_at(loc: Sequence[str | int]) -> type[BaseModel] | None:
    """The model class whose fields live at `loc` (ignoring list indexes and dict keys)."""
    model: type[BaseModel] = Matrix
    i = 0
    while i < len(loc):
        part = loc[i]
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        candidates = _unwrap(field.annotation)
        if not candidates:
            return None
        model = candidates[0]
        i += 1
        # skip list indexes and dict keys between a field and its model's fields
        origin = typing.get_origin(field.annotation)
        while i < len(loc) and (isinstance(loc[i], int) or origin is dict):
            i += 1
            origin = None
    return model


def _describe(err: Mapping[str, Any], source: SourceMap) -> tuple[int, str]:
    loc: Loc = tuple(
        p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))
    )
    # pydantic adds union member names ('str', 'list[str]') into loc; drop them
    loc = tuple(
        p for p in loc if not (isinstance(p, str) and ("[" in p or p in {"str", "RepairCommand"}))
    )
    kind = err["type"]
    if kind == "extra_forbidden" and err["loc"] and (not loc or loc[-1] != err["loc"][-1]):
        loc = (*loc, err["loc"][-1])  # the unknown key itself, even one like '0[' (hypothesis)
    where = source.where(loc)
    line = source.line(loc) or 0
    path = _dotted(loc)
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        allowed = sorted(parent.model_fields) if parent is not None else []
        key = str(loc[-1])
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return line, f"{where}: {path}: unknown key; allowed: {', '.join(allowed)}{hint}"
    if kind == "missing":
        return line, f"{where}: {path}: required key is missing"
    msg = str(err["msg"])
    msg = msg.removeprefix("Value error, ")
    if kind in {"string_type", "list_type", "dict_type", "int_type", "model_type", "int_parsing"}:
        got = type(err.get("input")).__name__
        got = {
            "str": "a string",
            "list": "a list",
            "dict": "a mapping",
            "int": "a number",
            "float": "a number",
            "NoneType": "nothing",
            "bool": "a boolean",
        }.get(got, got)
        want = {
            "string_type": "a string",
            "list_type": "a list",
            "dict_type": "a mapping",
            "int_type": "an integer",
            "int_parsing": "an integer",
            "model_type": "a mapping",
        }[kind]
        return line, f"{where}: {path}: expected {want}, got {got}"
    if kind in {"literal_error", "enum"}:
        expected = err.get("ctx", {}).get("expected", "")
        value = err.get("input")
        options = re.findall(r"'([^']*)'", str(expected))
        close = difflib.get_close_matches(str(value), options, n=1, cutoff=0.5)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return line, f"{where}: {path}: {value!r} is not allowed; allowed: {expected}{hint}"
    return line, f"{where}: {path}: {msg}"


def parse_matrix(data: Any, source: SourceMap, *, knowledge: Knowledge | None = None) -> MatrixFile:
    """Validate already-loaded YAML data; every problem is reported with its line."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source.where(())}: (top level): expected a mapping of keys, got {type(data).__name__}"
        )
    try:
        matrix = Matrix.model_validate(data, context={"knowledge": knowledge or load_knowledge()})
    except ValidationError as exc:
        seen: set[str] = set()
        described = []
        for err in exc.errors():
            line, text = _describe(err, source)
            if text not in seen:
                seen.add(text)
                described.append((line, text))
        described.sort(key=lambda t: t[0])
        raise ConfigError("\n".join(text for _, text in described)) from None
    return MatrixFile(matrix=matrix, source=source)


def load_matrix(path: Path, *, knowledge: Knowledge | None = None) -> MatrixFile:
    """Load and validate matrix.yaml (raises ConfigError with file:line messages)."""
    doc = load_yaml(path)
    return parse_matrix(doc.data, doc.source, knowledge=knowledge)


def json_schema() -> dict[str, Any]:
    """JSON Schema for editors, generated from the same model that validates."""
    schema = Matrix.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "torch-buildtools matrix.yaml"
    return schema
