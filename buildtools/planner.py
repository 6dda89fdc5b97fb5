"""The planner: Matrix → cells → BuildJobs. Pure: it never starts a process."""

from __future__ import annotations

__all__ = [
    "Plan",
    "RemovedCell",
    "arch_list_from_torch",
    "current_local_version",
    "local_version",
    "needs_current",
    "plan",
]

import difflib
import fnmatch
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from .ecosystem import load_ecosystem
from .errors import ConfigError, PlanError
from .knowledge import Knowledge
from .matrix.config import (
    CELL_KEYS,
    CURRENT,
    HOST,
    AcceleratorOverride,
    CellRule,
    MatrixFile,
    is_glob,
)
from .matrix.yamlsource import Loc
from .model import Accelerator, BuildJob, Cell, Toolkit, python_tag
from .probe.hostenv import CurrentTorch


@dataclass(frozen=True, kw_only=True)
class RemovedCell:
    """A requested cell that cannot exist, and why (from the knowledge base)."""

    cell: Cell
    reason: str


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What will be built: the cells, the jobs covering them, and what was dropped."""

    profile: str | None
    cells: tuple[Cell, ...]
    jobs: tuple[BuildJob, ...]
    removed: tuple[RemovedCell, ...]
    excluded: int

    @property
    def builds_saved(self) -> int:
        return len(self.cells) - len(self.jobs)

    def job_for(self, cell_id: str) -> BuildJob:
        for job in self.jobs:
            if cell_id in job.cell_ids:
                return job
        raise KeyError(cell_id)


def _cell_key(cell: Cell) -> tuple[Any, ...]:
    return (
        Version(cell.torch),
        cell.current,
        Accelerator.parse(cell.accelerator),
        tuple(int(p) for p in cell.python.split(".")),
        cell.platform,
    )


def _py_key(python: str) -> tuple[int, ...]:
    return tuple(int(p) for p in python.split("."))


def _torch_matches(cell: Cell, pattern: str) -> bool:
    """A current cell matches 'current', its exact version and its public version."""
    if not cell.current:
        return pattern != CURRENT and fnmatch.fnmatchcase(cell.torch, pattern)
    if pattern == CURRENT:
        return True
    public = Version(cell.torch).public
    return fnmatch.fnmatchcase(cell.torch, pattern) or fnmatch.fnmatchcase(public, pattern)


def _matches(cell: Cell, rule: CellRule) -> bool:
    for key, pattern in rule.values().items():
        value = getattr(cell, key)
        if pattern == HOST:
            return False  # resolved before matching; an unresolved 'host' matches nothing
        if key == "torch":
            if not _torch_matches(cell, pattern):
                return False
        elif not fnmatch.fnmatchcase(value, pattern):
            return False
    return True


def _current_cell(current: CurrentTorch) -> Cell:
    """The one cell `torch: current` stands for: the environment fixes all four keys."""
    return Cell(
        torch=current.version,
        accelerator=current.accelerator,
        python=current.python_xy,
        platform=current.platform,
        current=True,
    )


def local_version(template: str, *, torch: str, accelerator: str, abi: str) -> str:
    """The local version label of a wheel: 'pt{torch_major}{torch_minor}{accelerator}' → 'pt211cu130'."""
    v = Version(torch)
    return template.format(
        torch_major=v.major,
        torch_minor=v.minor,
        torch_patch=v.micro,
        accelerator=accelerator,
        abi=abi.replace("-", ""),
    )


def current_local_version(
    template: str,
    *,
    torch: str,
    accelerator: str,
    abi: str,
    release: bool,
    git_short: str | None,
) -> str:
    """The label of a wheel built against the running torch: the template's plus a suffix.

    '.local' for a release torch ('pt213cpu.local': built here, not the index's
    'pt213cpu' wheel), '.git<rev>' for a source, nightly or vendor build whose git
    revision is known ('pt213cpu.git1a2b3c4'), '.local' otherwise.
    """
    suffix = f"git{git_short}" if git_short and not release else "local"
    return f"{local_version(template, torch=torch, accelerator=accelerator, abi=abi)}.{suffix}"


def arch_list_from_torch(archs: Sequence[str], kind: str) -> str | None:
    """torch.cuda.get_arch_list() as an arch list: ['sm_80', 'sm_90', 'compute_90'] → '8.0;9.0+PTX'."""
    if kind == "rocm":
        gfx = [a.split(":", 1)[0] for a in archs if a.startswith("gfx")]
        return ";".join(dict.fromkeys(gfx)) or None
    entries: dict[str, bool] = {}
    for arch in archs:
        prefix, _, number = arch.partition("_")
        suffix = number[-1] if number[-1:] in ("a", "f") else ""
        digits = number.removesuffix(suffix)
        if prefix not in ("sm", "compute") or not digits.isdigit() or len(digits) < 2:
            continue
        name = f"{digits[:-1]}.{digits[-1]}{suffix}"
        entries[name] = entries.get(name, False) or prefix == "compute"
    return ";".join(f"{n}+PTX" if ptx else n for n, ptx in entries.items()) or None


def _resolve_host(rule: CellRule, host_python: str) -> CellRule:
    if rule.python == HOST:
        return rule.model_copy(update={"python": host_python})
    return rule


def _expand_include(
    mf: MatrixFile, index: int, rule: CellRule, axes: dict[str, list[str]]
) -> list[Cell]:
    choices: dict[str, list[str]] = {}
    for key in CELL_KEYS:
        value = getattr(rule, key)
        if value is None:
            choices[key] = axes[key]
        elif is_glob(value):
            hits = [v for v in axes[key] if fnmatch.fnmatchcase(v, value)]
            if not hits:
                raise ConfigError(
                    mf.error(
                        ("include", index, key),
                        f"{value!r} matches no value of axes.{key} ({', '.join(axes[key])}); "
                        "a glob in include only selects among the axes' values — "
                        "write the value itself to add a new one",
                    )
                )
            choices[key] = hits
        else:
            choices[key] = [value]
    return [
        Cell(torch=t, accelerator=a, python=p, platform=pl)
        for t, a, p, pl in itertools.product(
            choices["torch"], choices["accelerator"], choices["python"], choices["platform"]
        )
    ]


def _override_for(mf: MatrixFile, accelerator: Accelerator) -> tuple[AcceleratorOverride, Loc]:
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
    loc: Loc = ("accelerators",)
    for _, key in sorted(ranked):
        entry = entries[key]
        for name in entry.model_fields_set:
            merged[name] = getattr(entry, name)
        loc = ("accelerators", key)
    return AcceleratorOverride.model_validate(merged), loc


def _arch_loc(mf: MatrixFile, accelerator: Accelerator) -> Loc:
    for key in (accelerator.name, *sorted(mf.matrix.accelerators), accelerator.kind):
        entry = mf.matrix.accelerators.get(key)
        applies = key in (accelerator.name, accelerator.kind) or fnmatch.fnmatchcase(
            accelerator.name, key
        )
        if entry is not None and "arch_list" in entry.model_fields_set and applies:
            return ("accelerators", key, "arch_list")
    return ("accelerators",)


def _target_version_hex(torch: str) -> str:
    v = Version(torch)
    return f"0x{v.major:02x}{v.minor:02x}{v.micro:02x}0000000000"


def _current_arch_list(
    mf: MatrixFile, kb: Knowledge, current: CurrentTorch, accel: Accelerator, platform: str
) -> str:
    try:
        return kb.default_arch_list(current.public_version, accel, platform)
    except (LookupError, ValueError):
        pass
    from_torch = arch_list_from_torch(current.arch_list, accel.kind)
    if from_torch:
        return from_torch
    var = "TORCH_CUDA_ARCH_LIST" if accel.kind == "cuda" else "PYTORCH_ROCM_ARCH"
    raise ConfigError(
        mf.error(
            ("accelerators",),
            f"torch: current is torch {current.version} ({accel.name}), which the knowledge "
            "base does not know, and it reported no arch list (torch.cuda.get_arch_list() is "
            f"empty without a GPU); set accelerators.{accel.name}.arch_list ({var})",
        )
    )


def _make_current_job(
    mf: MatrixFile, kb: Knowledge, cells: Sequence[Cell], current: CurrentTorch, *, job_id: str
) -> BuildJob:
    """A job against the running torch: facts from the environment, data only where it knows."""
    m = mf.matrix
    abi = m.project.abi
    first = cells[0]
    accel = Accelerator.parse(first.accelerator)
    override, _ = _override_for(mf, accel)
    v = Version(current.version)
    known = f"{v.major}.{v.minor}" in kb.torch
    release = current.build == "release"
    toolkit: Toolkit | None = None
    env: dict[str, str] = {}
    if accel.is_device:
        assert accel.version is not None
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
        toolkit = Toolkit(
            kind="cuda" if accel.kind == "cuda" else "rocm",
            version=accel.version,
            arch_list=arch_list,
            pip_packages=pip_packages,
        )
        env["FORCE_CUDA"] = "1"
        env["TORCH_CUDA_ARCH_LIST" if accel.kind == "cuda" else "PYTORCH_ROCM_ARCH"] = arch_list
    env["BUILDTOOLS_ABI"] = abi
    if abi in ("abi3", "stable"):
        env["BUILDTOOLS_PY_LIMITED_API"] = python_tag(first.python)
    if abi == "stable":
        env["BUILDTOOLS_TORCH_TARGET_VERSION"] = _target_version_hex(current.version)
    if m.build.max_jobs is not None:
        env["MAX_JOBS"] = str(m.build.max_jobs)
    env.update(m.project.build_env)
    env.update(override.build_env)
    if abi == "stable":
        requires = f"torch>={v.major}.{v.minor}"
    elif release:
        requires = f"torch=={v.major}.{v.minor}.*"
    else:
        # a pre-release/source/vendor torch matches no `==X.Y.*` (pre-releases are
        # excluded); pin its exact public version instead
        requires = f"torch=={v.public}"
    # the tag a release wheel of that minor promises (the newest known one's for a torch
    # the data does not know); a local build reaching less gets the best tag its host
    # allows and a platform-tag warning, like any local build
    facts_of = current.public_version if known else kb.torch_versions()[-1]
    platform_tag = kb.wheel_platform_tag(facts_of, accel, first.platform)
    repair = override.repair
    return BuildJob(
        id=job_id,
        cells=tuple(cells),
        abi=abi,
        torch=current.version,
        torch_versions=(current.version,),
        accelerator=accel.name,
        pythons=(first.python,),
        platform=first.platform,
        torch_requirement=f"torch=={current.version}",
        requires_dist=requires,
        toolkit=toolkit,
        image="",  # the running environment is on this host: local backend only
        platform_tag=platform_tag,
        local_version=current_local_version(
            m.index.local_version,
            torch=current.version,
            accelerator=accel.name,
            abi=abi,
            release=release,
            git_short=current.git_short,
        ),
        cxx11_abi=current.cxx11_abi,
        env=tuple(sorted(env.items())),
        runner=_label(m.runners.build.get(accel.kind)) or load_ecosystem().default_runner,
        smoke_runner=_label(m.runners.smoke.get(accel.kind)),
        repair="command" if not isinstance(repair, str) else repair,
        repair_command=tuple(repair.command) if not isinstance(repair, str) else (),
        repair_excludes=tuple(override.exclude_libs),
        torch_index=None,
        smoke=m.project.smoke,
        torch_source="current",
        current_python=current.python,
        ccache=m.build.ccache,
    )


def _make_job(mf: MatrixFile, kb: Knowledge, cells: Sequence[Cell], *, job_id: str) -> BuildJob:
    m = mf.matrix
    abi = m.project.abi
    first = cells[0]
    accel = Accelerator.parse(first.accelerator)
    torches = sorted({c.torch for c in cells}, key=Version)
    pythons = sorted({c.python for c in cells}, key=_py_key)
    build_torch = torches[0]
    override, _ = _override_for(mf, accel)

    toolkit: Toolkit | None = None
    env: dict[str, str] = {}
    if accel.is_device:
        assert accel.version is not None
        arch_list = override.arch_list or kb.default_arch_list(build_torch, accel, first.platform)
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
        toolkit = Toolkit(
            kind="cuda" if accel.kind == "cuda" else "rocm",
            version=accel.version,
            arch_list=arch_list,
            pip_packages=kb.toolkit_requirements(build_torch, accel),
        )
        env["FORCE_CUDA"] = "1"
        env["TORCH_CUDA_ARCH_LIST" if accel.kind == "cuda" else "PYTORCH_ROCM_ARCH"] = arch_list
    env["BUILDTOOLS_ABI"] = abi
    if abi in ("abi3", "stable"):
        env["BUILDTOOLS_PY_LIMITED_API"] = python_tag(pythons[0])
    if abi == "stable":
        env["BUILDTOOLS_TORCH_TARGET_VERSION"] = _target_version_hex(build_torch)
    if m.build.max_jobs is not None:
        env["MAX_JOBS"] = str(m.build.max_jobs)
    env.update(m.project.build_env)
    env.update(override.build_env)

    v = Version(build_torch)
    local = local_version(m.index.local_version, torch=build_torch, accelerator=accel.name, abi=abi)
    # per-python and abi3 wheels hold torch's C++ ABI: pin the minor; stable-ABI wheels
    # run on the oldest torch and every later one.
    requires = f"torch>={v.major}.{v.minor}" if abi == "stable" else f"torch=={v.major}.{v.minor}.*"

    repair = override.repair
    index = override.torch_index
    if index is not None:
        index = index.replace("{accelerator}", accel.name)
    return BuildJob(
        id=job_id,
        cells=tuple(cells),
        abi=abi,
        torch=build_torch,
        torch_versions=tuple(torches),
        accelerator=accel.name,
        pythons=tuple(pythons),
        platform=first.platform,
        torch_requirement=f"torch=={build_torch}",
        requires_dist=requires,
        toolkit=toolkit,
        image=override.image or kb.builder_image(build_torch, accel, first.platform),
        platform_tag=kb.wheel_platform_tag(build_torch, accel, first.platform),
        local_version=local,
        cxx11_abi=kb.cxx11_abi(build_torch, accel, first.platform),
        env=tuple(sorted(env.items())),
        runner=_label(m.runners.build.get(accel.kind)) or load_ecosystem().default_runner,
        smoke_runner=_label(m.runners.smoke.get(accel.kind)),
        repair="command" if not isinstance(repair, str) else repair,
        repair_command=tuple(repair.command) if not isinstance(repair, str) else (),
        repair_excludes=tuple(override.exclude_libs),
        torch_index=index,
        smoke=m.project.smoke,
        ccache=m.build.ccache,
    )


def _label(value: str | list[str] | None) -> str | tuple[str, ...] | None:
    if isinstance(value, list):
        return tuple(value)
    return value


def _group(
    mf: MatrixFile, kb: Knowledge, cells: Sequence[Cell], current: CurrentTorch | None = None
) -> list[BuildJob]:
    abi = mf.matrix.project.abi
    groups: dict[tuple[str, ...], list[Cell]] = {}
    for cell in cells:
        if abi == "per-python":
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
        group.sort(key=_cell_key)
        first = group[0]
        suffix = (
            "" if first.platform == "linux_x86_64" else "-" + first.platform.removeprefix("linux_")
        )
        marker = "-current" if first.current else ""
        if abi == "per-python":
            job_id = first.id
        elif abi == "abi3":
            low = min((c.python for c in group), key=_py_key)
            job_id = (
                f"torch{first.torch}{marker}-{first.accelerator}-{python_tag(low)}-abi3{suffix}"
            )
        else:
            torches = sorted({c.torch for c in group}, key=Version)
            span = torches[0] if len(torches) == 1 else f"{torches[0]}-{torches[-1]}"
            job_id = f"torch{span}{marker}-{first.accelerator}-stable{suffix}"
        if first.current:
            assert current is not None
            jobs.append(_make_current_job(mf, kb, group, current, job_id=job_id))
        else:
            jobs.append(_make_job(mf, kb, group, job_id=job_id))
    jobs.sort(key=lambda j: _cell_key(j.cells[0]))
    return jobs


def _abi_reason(abi: str, cell: Cell) -> str | None:
    v = Version(cell.torch)
    if abi == "abi3" and v < Version("2.6"):
        return f"abi: abi3 needs torch >= 2.6 (py_limited_api support in cpp_extension); torch {cell.torch} is older"
    if abi == "stable" and v < Version("2.10"):
        return f"abi: stable needs torch >= 2.10 (LibTorch stable ABI with TORCH_TARGET_VERSION); torch {cell.torch} is older"
    return None


def _torch_axis(kb: Knowledge, values: Sequence[str]) -> list[str]:
    known = kb.torch_versions()
    for value in values:
        if value != CURRENT and value not in known:
            close = difflib.get_close_matches(value, known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise PlanError(
                f"--torch {value}: not a known torch release; allowed: 'current' (the torch of "
                f"the running environment) or {known[0]} … {known[-1]}{hint}"
            )
    return list(dict.fromkeys(values))


def _in_axis(pattern: str | None, values: Sequence[str]) -> bool:
    if pattern is None:
        return True
    return any(v == pattern or (v != CURRENT and fnmatch.fnmatchcase(v, pattern)) for v in values)


def needs_current(mf: MatrixFile, torch_axis: Sequence[str] | None) -> bool:
    """Whether planning this matrix needs the running environment's torch."""
    if torch_axis is not None:
        return CURRENT in torch_axis
    m = mf.matrix
    return CURRENT in m.axes.torch or any(r.torch == CURRENT for r in m.include)


def plan(
    mf: MatrixFile,
    kb: Knowledge,
    *,
    host_python: str,
    profile: str | None = None,
    only: Iterable[str] = (),
    strict: bool = False,
    current: CurrentTorch | None = None,
    torch_axis: Sequence[str] | None = None,
) -> Plan:
    """Expand axes, apply include/exclude/profile/--only, drop impossible cells, group into jobs.

    `current` is the torch of the running environment (host facts, probed by the caller),
    what `torch: current` stands for. `torch_axis` replaces `axes.torch` (`--torch`); then
    the default profile is not applied and include rules naming another torch are skipped.
    """
    m = mf.matrix
    torch_values = _torch_axis(kb, torch_axis) if torch_axis is not None else list(m.axes.torch)
    if needs_current(mf, torch_axis) and current is None:
        raise PlanError(
            f"{mf.source.where(('axes', 'torch'))}: axes.torch: 'current' needs the torch of "
            "the running environment, and none was given; run buildtools with that "
            "environment's interpreter or pass --torch-python PATH"
        )
    axes = {
        "torch": [t for t in torch_values if t != CURRENT],
        "accelerator": list(m.axes.accelerator),
        "python": [host_python if p == HOST else p for p in m.axes.python],
        "platform": list(m.axes.platform),
    }
    cells: dict[str, Cell] = {}
    for t, a, p, pl in itertools.product(
        axes["torch"], axes["accelerator"], axes["python"], axes["platform"]
    ):
        cell = Cell(torch=t, accelerator=a, python=p, platform=pl)
        cells[cell.id] = cell
    if CURRENT in torch_values and current is not None:
        cell = _current_cell(current)
        cells[cell.id] = cell
    before = len(cells)
    for raw_rule in m.exclude:
        rule = _resolve_host(raw_rule, host_python)
        for cid in [cid for cid, c in cells.items() if _matches(c, rule)]:
            del cells[cid]
    excluded = before - len(cells)

    for i, rule in enumerate(m.include):
        if torch_axis is not None and not _in_axis(rule.torch, torch_values):
            continue  # --torch replaced the axis this rule adds to
        if rule.torch == CURRENT:
            assert current is not None
            cell = _current_cell(current)
            if not _matches(cell, _resolve_host(rule, host_python)):
                raise ConfigError(
                    mf.error(
                        ("include", i),
                        f"impossible include: torch: current is {cell.id} (the running "
                        "environment fixes its accelerator, Python and platform); this rule "
                        "asks for another",
                    )
                )
            cells[cell.id] = cell
            continue
        for cell in _expand_include(mf, i, _resolve_host(rule, host_python), axes):
            reason = kb.cell_unavailable_reason(cell) or _abi_reason(m.project.abi, cell)
            if reason:
                raise ConfigError(
                    mf.error(("include", i), f"impossible include {cell.id}: {reason}")
                )
            cells[cell.id] = cell

    if profile is None and torch_axis is None:
        profile = m.default_profile
    if profile is not None:
        if profile not in m.profiles:
            names = sorted(m.profiles)
            close = difflib.get_close_matches(profile, names, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise PlanError(
                f"{mf.source.where(('profiles',))}: profiles: no profile named {profile!r}; "
                f"defined: {', '.join(names) or '(none)'}{hint}"
            )
        rules = [_resolve_host(r, host_python) for r in m.profiles[profile].select]
        if rules:
            cells = {cid: c for cid, c in cells.items() if any(_matches(c, r) for r in rules)}

    removed: list[RemovedCell] = []
    for cid in sorted(cells, key=lambda k: _cell_key(cells[k])):
        cell = cells[cid]
        # the running torch exists by definition; only the ABI mode can rule it out
        known = None if cell.current else kb.cell_unavailable_reason(cell)
        reason = known or _abi_reason(m.project.abi, cell)
        if reason:
            removed.append(RemovedCell(cell=cell, reason=reason))
            del cells[cid]
    if strict and removed:
        lines = "\n".join(f"  {r.cell.id}: {r.reason}" for r in removed)
        raise PlanError(
            f"{mf.source.where(('axes',))}: axes: --strict: {len(removed)} requested cell(s) never "
            f"existed:\n{lines}\nremove them with an `exclude:` rule or narrow the axes"
        )

    only = tuple(only)
    if only:
        selected = {
            cid: c for cid, c in cells.items() if any(fnmatch.fnmatchcase(cid, g) for g in only)
        }
        if not selected:
            sample = ", ".join(sorted(cells)[:6]) or "(none)"
            raise PlanError(
                f"--only {' '.join(only)}: matches no cell of this plan; cells: {sample}"
            )
        cells = selected

    if not cells:
        where = f"profile {profile!r}" if profile else "the matrix"
        raise PlanError(
            f"{mf.source.where(('profiles', profile) if profile else ('axes',))}: {where} "
            "selects no buildable cell; check axes, exclude and the profile's select rules"
            + (f" ({len(removed)} removed as impossible, see `buildtools plan`)" if removed else "")
        )
    ordered = sorted(cells.values(), key=_cell_key)
    jobs = _group(mf, kb, ordered, current)
    return Plan(
        profile=profile,
        cells=tuple(ordered),
        jobs=tuple(jobs),
        removed=tuple(removed),
        excluded=excluded,
    )
