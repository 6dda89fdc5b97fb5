"""BuildJobs from cells: grouped per ABI mode, each job's fields derived from its torch.

A job builds against one torch: an index release (its facts from the knowledge base,
the builder image, a pinned wheel) or the running environment's torch (`torch: current`,
its facts probed by the caller, the local backend only). What differs between the two
is gathered in `_BuildTorch`; the rest of a job (environment, runners, repair) comes from
the matrix the same way for both.
"""

from __future__ import annotations

__all__ = ["group_jobs", "torch_index_for"]

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from packaging.version import Version

from ..ecosystem import load_ecosystem
from ..errors import ConfigError
from ..knowledge import Knowledge
from ..matrix.config import AcceleratorOverride, MatrixFile, is_glob
from ..matrix.yamlsource import Loc
from ..model import AbiMode, Accelerator, BuildJob, Cell, RepairPolicy, Toolkit, python_tag
from ..torchinstall import TorchInstall
from .cells import cell_key, python_key
from .derive import (
    arch_list_from_torch,
    current_local_version,
    local_version,
    requires_dist,
    target_version_hex,
)


def _override_for(mf: MatrixFile, accelerator: Accelerator) -> AcceleratorOverride:
    """Merge `accelerators:` entries: family < glob < exact name (later wins per key)."""
    entries = mf.matrix.accelerators
    ranked: list[tuple[int, str]] = []
    for key in entries:
        if key == accelerator.kind:
            ranked.append((0, key))
        elif is_glob(key) and fnmatch.fnmatchcase(accelerator.name, key):
            ranked.append((1, key))
        elif key == accelerator.name:
            ranked.append((2, key))
    merged: dict[str, Any] = {}
    for _, key in sorted(ranked):
        entry = entries[key]
        for name in entry.model_fields_set:
            merged[name] = getattr(entry, name)
    return AcceleratorOverride.model_validate(merged)


def torch_index_for(mf: MatrixFile, accelerator: Accelerator) -> str | None:
    """The index `accelerators:` names for torch of this accelerator (None: not set)."""
    index = _override_for(mf, accelerator).torch_index
    return index.replace("{accelerator}", accelerator.name) if index is not None else None


def _repair_policy(override: AcceleratorOverride) -> RepairPolicy:
    repair = override.repair
    excludes = tuple(override.exclude_libs)
    if isinstance(repair, str):
        return RepairPolicy(mode=repair, excludes=excludes)
    return RepairPolicy(mode="command", command=tuple(repair.command), excludes=excludes)


def _arch_var(accel: Accelerator) -> str:
    """The variable cpp_extension reads the arch list from."""
    return load_ecosystem().arch_variables[accel.kind]


def _arch_loc(mf: MatrixFile, accelerator: Accelerator) -> Loc:
    for key in (accelerator.name, *sorted(mf.matrix.accelerators), accelerator.kind):
        entry = mf.matrix.accelerators.get(key)
        applies = key in (accelerator.name, accelerator.kind) or fnmatch.fnmatchcase(
            accelerator.name, key
        )
        if entry is not None and "arch_list" in entry.model_fields_set and applies:
            return ("accelerators", key, "arch_list")
    return ("accelerators",)


def _current_arch_list(
    mf: MatrixFile, kb: Knowledge, current: TorchInstall, accel: Accelerator, platform: str
) -> str:
    try:
        return kb.default_arch_list(current.public_version, accel, platform)
    except (LookupError, ValueError):
        pass
    from_torch = arch_list_from_torch(current.arch_list, accel.kind)
    if from_torch:
        return from_torch
    raise ConfigError(
        mf.error(
            ("accelerators",),
            f"torch: current is torch {current.version} ({accel.name}), which the knowledge "
            "base does not know, and it reported no arch list (torch.cuda.get_arch_list() is "
            f"empty without a GPU); set accelerators.{accel.name}.arch_list ({_arch_var(accel)})",
        )
    )


def _label(value: str | list[str] | None) -> str | tuple[str, ...] | None:
    if isinstance(value, list):
        return tuple(value)
    return value


def _runner(value: str | list[str]) -> str | tuple[str, ...]:
    return tuple(value) if isinstance(value, list) else value


def _toolkit(
    accel: Accelerator,
    arch_list: str,
    pip_packages: tuple[str, ...],
    override: AcceleratorOverride,
) -> Toolkit:
    assert accel.version is not None  # a device accelerator has a version
    return Toolkit(
        kind="cuda" if accel.kind == "cuda" else "rocm",
        version=accel.version,
        arch_list=arch_list,
        pip_packages=pip_packages,
        arch_flags=override.arch_flags,
    )


@dataclass(frozen=True, kw_only=True)
class _BuildTorch:
    """The torch a job builds against, and every field of the job that follows from it."""

    torch: str
    torch_versions: tuple[str, ...]
    pythons: tuple[str, ...]
    toolkit: Toolkit | None
    requires_dist: str
    image: str
    platform_tag: str
    local_version: str
    cxx11_abi: bool
    torch_index: str | None = None
    torch_source: Literal["index", "current"] = "index"
    current_python: str | None = None


def _index_torch(
    mf: MatrixFile,
    kb: Knowledge,
    cells: Sequence[Cell],
    accel: Accelerator,
    override: AcceleratorOverride,
) -> _BuildTorch:
    """An index torch: the job's oldest, with the knowledge base's facts about it."""
    abi = mf.matrix.project.abi
    platform = cells[0].platform
    torches = sorted({c.torch for c in cells}, key=Version)
    build_torch = torches[0]
    toolkit: Toolkit | None = None
    if accel.is_device:
        arch_list = override.arch_list or kb.default_arch_list(build_torch, accel, platform)
        if override.arch_list:
            for torch in torches:
                bad = kb.unaccepted_archs(torch, override.arch_list)
                if bad:
                    raise ConfigError(
                        mf.error(
                            _arch_loc(mf, accel),
                            f"torch {torch} does not accept arch {', '.join(bad)} "
                            f"(cpp_extension raises 'Unknown CUDA arch'); allowed: "
                            f"{', '.join(kb.torch_release(torch).cuda_archs)}",
                        )
                    )
        toolkit = _toolkit(accel, arch_list, kb.toolkit_requirements(build_torch, accel), override)
    index = torch_index_for(mf, accel)
    return _BuildTorch(
        torch=build_torch,
        torch_versions=tuple(torches),
        pythons=tuple(sorted({c.python for c in cells}, key=python_key)),
        toolkit=toolkit,
        requires_dist=requires_dist(abi, build_torch, newest=torches[-1]),
        image=override.image or kb.builder_image(build_torch, accel, platform),
        platform_tag=kb.wheel_platform_tag(build_torch, accel, platform),
        local_version=local_version(
            mf.matrix.index.local_version, torch=build_torch, accelerator=accel.name, abi=abi
        ),
        cxx11_abi=kb.cxx11_abi(build_torch, accel, platform),
        torch_index=index,
    )


def _current_torch(
    mf: MatrixFile,
    kb: Knowledge,
    cells: Sequence[Cell],
    current: TorchInstall,
    accel: Accelerator,
    override: AcceleratorOverride,
) -> _BuildTorch:
    """The running torch: facts from the environment, data only where it knows them."""
    abi = mf.matrix.project.abi
    first = cells[0]
    v = Version(current.version)
    known = f"{v.major}.{v.minor}" in kb.torch
    release = current.build == "release"
    toolkit: Toolkit | None = None
    if accel.is_device:
        arch_list = override.arch_list or _current_arch_list(mf, kb, current, accel, first.platform)
        if override.arch_list and known:
            bad = kb.unaccepted_archs(current.public_version, override.arch_list)
            if bad:
                raise ConfigError(
                    mf.error(
                        _arch_loc(mf, accel),
                        f"torch {current.version} does not accept arch {', '.join(bad)}",
                    )
                )
        try:
            pip_packages = kb.toolkit_requirements(current.public_version, accel)
        except LookupError:
            pip_packages = ()  # the toolchain derives them from torch's own requirements
        toolkit = _toolkit(accel, arch_list, pip_packages, override)
    # the tag a release wheel of that minor promises (the newest known one's for a torch
    # the data does not know); a local build reaching less gets the best tag its host
    # allows and a platform-tag warning, like any local build
    facts_of = current.public_version if known else kb.torch_versions()[-1]
    return _BuildTorch(
        torch=current.version,
        torch_versions=(current.version,),
        pythons=(first.python,),
        toolkit=toolkit,
        requires_dist=requires_dist(abi, current.version, exact=not release),
        image="",  # the running environment is on this host: local backend only
        platform_tag=kb.wheel_platform_tag(facts_of, accel, first.platform),
        local_version=current_local_version(
            mf.matrix.index.local_version,
            torch=current.version,
            accelerator=accel.name,
            abi=abi,
            release=release,
            git_short=current.git_short,
        ),
        cxx11_abi=current.cxx11_abi is not False,  # unknown: C++11, as every torch >= 2.7
        torch_source="current",
        current_python=str(current.python) if current.python else None,
    )


def _compress_flag(mode: str | None, toolkit: Toolkit | None) -> str | None:
    """`--compress-mode=MODE` for a CUDA >= 12.8 job when build.cuda_compress asks for it."""
    if mode is None or toolkit is None or toolkit.kind != "cuda":
        return None
    since = Version(load_ecosystem().nvcc_options_since["--compress-mode"])  # older: rejected
    return f"--compress-mode={mode}" if Version(toolkit.version) >= since else None


def _make_job(
    mf: MatrixFile,
    kb: Knowledge,
    cells: Sequence[Cell],
    *,
    job_id: str,
    current: TorchInstall | None = None,
    abi: AbiMode | None = None,
) -> BuildJob:
    """The job of `cells`: against `current` when given, else against an index torch;
    `abi` overrides the matrix's mode (a free-threaded cell is always per-python)."""
    m = mf.matrix
    if abi is not None and abi != m.project.abi:
        mf = _with_abi(mf, abi)
        m = mf.matrix
    abi = m.project.abi
    first = cells[0]
    accel = Accelerator.parse(first.accelerator)
    override = _override_for(mf, accel)
    if current is None:
        built = _index_torch(mf, kb, cells, accel, override)
    else:
        built = _current_torch(mf, kb, cells, current, accel, override)
    env: dict[str, str] = {}
    if built.toolkit is not None:
        env["FORCE_CUDA"] = "1"
        env[_arch_var(accel)] = built.toolkit.arch_list
    env["BUILDTOOLS_ABI"] = abi
    if abi in ("abi3", "stable"):
        env["BUILDTOOLS_PY_LIMITED_API"] = python_tag(built.pythons[0])
    if abi == "stable":
        env["BUILDTOOLS_TORCH_TARGET_VERSION"] = target_version_hex(built.torch)
    if m.build.max_jobs is not None:
        env["MAX_JOBS"] = str(m.build.max_jobs)
    env.update(m.project.build_env)
    env.update(override.build_env)
    compress = _compress_flag(m.build.cuda_compress, built.toolkit)
    if compress:
        env["NVCC_APPEND_FLAGS"] = f"{env.get('NVCC_APPEND_FLAGS', '')} {compress}".strip()
    return BuildJob(
        id=job_id,
        cells=tuple(cells),
        abi=abi,
        torch=built.torch,
        torch_versions=built.torch_versions,
        accelerator=accel,
        pythons=built.pythons,
        platform=first.platform,
        torch_requirement=f"torch=={built.torch}",
        requires_dist=built.requires_dist,
        toolkit=built.toolkit,
        image=built.image,
        platform_tag=built.platform_tag,
        local_version=built.local_version,
        cxx11_abi=built.cxx11_abi,
        env=tuple(sorted(env.items())),
        runner=_runner(m.runners.build_runner(accel.kind, first.platform)),
        smoke_runner=_label(m.runners.smoke_runner(accel.kind, first.platform)),
        repair=_repair_policy(override),
        torch_index=built.torch_index,
        smoke=m.project.smoke,
        torch_source=built.torch_source,
        current_python=built.current_python,
        compiler_cache=m.build.cache_tool,
    )


def _with_abi(mf: MatrixFile, abi: AbiMode) -> MatrixFile:
    project = mf.matrix.project.model_copy(update={"abi": abi})
    return MatrixFile(matrix=mf.matrix.model_copy(update={"project": project}), source=mf.source)


def _free_threaded(cell: Cell) -> bool:
    """A free-threaded CPython (3.14t) has no limited API: never folded into abi3/stable."""
    return cell.python.endswith("t")


def group_jobs(
    mf: MatrixFile, kb: Knowledge, cells: Sequence[Cell], current: TorchInstall | None = None
) -> list[BuildJob]:
    """One job per unit of the ABI mode: a cell (per-python), a torch × accelerator ×
    platform (abi3: one wheel for every Python), an accelerator × platform (stable: one
    wheel for every torch). A `torch: current` cell never shares a job with index torches.
    """
    abi = mf.matrix.project.abi
    groups: dict[tuple[str, ...], list[Cell]] = {}
    for cell in cells:
        if abi == "per-python" or _free_threaded(cell):
            key: tuple[str, ...] = (cell.id,)
        elif abi == "abi3":
            key = (cell.torch, cell.accelerator, cell.platform)
        else:
            key = (cell.accelerator, cell.platform)
        if cell.current:
            key = ("current", *key)  # never shares a job with index torches
        groups.setdefault(key, []).append(cell)
    jobs = []
    for group in groups.values():
        group.sort(key=cell_key)
        first = group[0]
        suffix = (
            "" if first.platform == "linux_x86_64" else "-" + first.platform.removeprefix("linux_")
        )
        marker = "-current" if first.current else ""
        own_abi: AbiMode | None = "per-python" if _free_threaded(first) else None
        if abi == "per-python" or own_abi:
            job_id = first.id
        elif abi == "abi3":
            low = min((c.python for c in group), key=python_key)
            job_id = (
                f"torch{first.torch}{marker}-{first.accelerator}-{python_tag(low)}-abi3{suffix}"
            )
        else:
            torches = sorted({c.torch for c in group}, key=Version)
            span = torches[0] if len(torches) == 1 else f"{torches[0]}-{torches[-1]}"
            job_id = f"torch{span}{marker}-{first.accelerator}-stable{suffix}"
        if first.current:
            assert current is not None
            jobs.append(_make_job(mf, kb, group, job_id=job_id, current=current, abi=own_abi))
        else:
            jobs.append(_make_job(mf, kb, group, job_id=job_id, abi=own_abi))
    jobs.sort(key=lambda j: cell_key(j.cells[0]))
    return jobs
