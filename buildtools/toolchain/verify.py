"""Is the torch of an environment the one the cell needs? Asked of the environment itself.

Every question goes through `buildtools.probe` (one child-script probe, one record:
`TorchInstall`). A new environment's torch is imported once per identical install on this
machine (the first import compiles every module, ~3 s); what that import said and files
cannot (the C++ ABI) is recorded, and a second environment with the same files is read
from torch/version.py instead (~0.3 s).
"""

from __future__ import annotations

__all__ = [
    "VERIFIED",
    "check_same_torch",
    "check_torch",
    "describe_build",
    "dist_versions",
    "imported_record",
    "probe_venv",
    "verified_probe",
]

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from ..context import RunContext
from ..errors import ToolchainError, ToolMissingError
from ..jsonfields import decode_json
from ..model import BuildJob
from ..probe.hostenv import EnvSnapshot, probe_environment
from ..torchinstall import TorchInstall, window_build_ok
from .indexprobe import index_hint
from .installer import select_installer, uv_cache_dir
from .venv import child_env

VERIFIED = "buildtools-imported.json"  # torch installs known to import on this machine


def probe_venv(
    python: Path,
    *,
    ctx: RunContext,
    import_torch: bool = False,
) -> EnvSnapshot | None:
    """What `python` reports, isolated (-I); its torch read from its files, or, with
    `import_torch`, imported in the same process. None (and a log line) when it does not run."""
    log = ctx.stream
    try:
        return probe_environment(
            python,
            ctx=ctx.with_env(child_env(ctx.env)),
            import_torch=import_torch,
            separate_import=False,
            devices=False,
            files=False,
            isolated=True,
        )
    except ToolMissingError as exc:
        log.write(f"[toolchain] {exc}\n")
        return None


def dist_versions(snapshot: EnvSnapshot) -> dict[str, str]:
    """The torch, NVIDIA and CUDA distributions of an environment: {name: version}."""
    out: dict[str, str] = {}
    for dist in snapshot.dists:
        name = dist.name.lower().replace("_", "-")
        if name.startswith(("nvidia-", "cuda-", "torch")):
            out[name] = dist.version
    return out


def describe_build(torch: TorchInstall) -> str:
    """'CUDA 13.0', 'ROCm/HIP 7.1.x' or 'CPU only'."""
    if torch.cuda:
        return f"CUDA {torch.cuda}"
    if torch.hip:
        return f"ROCm/HIP {torch.hip}"
    return "CPU only"


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _index_used(job: BuildJob, answered: bool | None) -> str:
    """Where pip took torch from, in words: the job's index, or pip's own and why."""
    if not job.torch_index:
        return "pip's configured indexes (no torch index is set for these cells)"
    if answered is False:
        return (
            f"pip's configured indexes (the cells' torch index {job.torch_index} did not "
            "answer, so it was not used)"
        )
    return f"the index {job.torch_index}" + (" (it answered)" if answered else "")


def _index_remedy(job: BuildJob, answered: bool | None) -> str:
    accel = job.accelerator
    hint = index_hint(accel)
    if job.torch_index and answered is False:
        return (
            f"the torch index {job.torch_index} did not answer from this machine: check the "
            "URL, the network and pip's proxy settings, then build again"
        )
    where = f"accelerators: {{{accel.kind}: {{torch_index: {hint}}}}} in matrix.yaml"
    if job.torch_index and job.torch_index.rstrip("/") == hint:
        return f"the index {hint} served another build: check what it serves for torch"
    first = "it serves another build; " if job.torch_index else ""
    return (
        f"{first}set the torch index of these cells to {hint} ({where}; `pip install "
        f"'{job.torch_requirement}' --extra-index-url {hint}` resolves the +{accel.name} build)"
    )


def check_torch(
    job: BuildJob,
    torch: TorchInstall | None,
    *,
    env_root: Path,
    index_answered: bool | None = None,
    release_only: bool = False,
) -> None:
    """Raise ToolchainError unless the installed torch is the one the cell needs.

    `index_answered`: whether the job's torch index answered before the install (False: pip
    used its configured indexes instead; None: not asked). The message names the index
    actually used. `release_only`: the environment checks a CPU wheel against a torch
    release (a stable-ABI window): any build of that release will do, since every build
    carries the same CPU libraries (`window_build_ok`).
    """
    cells = ", ".join(job.cell_ids) or job.id
    accel = job.accelerator
    source = _index_used(job, index_answered)
    if torch is None or torch.imported is False:
        why = torch.import_error if torch is not None else None
        raise ToolchainError(
            f"{cells}: torch does not import in {env_root}: {why or 'not installed'}"
        )
    installed = f"torch {torch.version} ({describe_build(torch)})"
    requirement = Requirement(job.torch_requirement)
    try:
        satisfied = requirement.specifier.contains(Version(torch.version), prereleases=True)
    except InvalidVersion:
        satisfied = False
    if not satisfied:
        raise ToolchainError(
            f"{cells}: pip installed {installed} from {source}, but the cells need "
            f"{job.torch_requirement}; check the requirement and the torch index"
        )
    wrong = None if release_only and window_build_ok(accel.kind) else _wrong_build(job, torch)
    if wrong is not None:
        raise ToolchainError(
            f"{cells}: pip installed {installed} from {source}, but accelerator "
            f"'{accel.name}' needs {wrong}: {_index_remedy(job, index_answered)}"
        )
    if torch.cxx11_abi is not None and torch.cxx11_abi != job.cxx11_abi:
        raise ToolchainError(
            f"{cells}: {installed} uses _GLIBCXX_USE_CXX11_ABI={int(torch.cxx11_abi)} but the "
            f"job promises {int(job.cxx11_abi)}; the torch index serves a different build than "
            "the compatibility data expects (fix the index, or the data if torch changed)"
        )


def _wrong_build(job: BuildJob, torch: TorchInstall) -> str | None:
    """What the cell needs where `torch` is another build than its accelerator's, else None."""
    accel = job.accelerator
    if accel.kind == "cpu" and (torch.cuda or torch.hip):
        return "a CPU-only torch"
    if accel.kind == "cuda" and torch.cuda != accel.version:
        return f"torch built for CUDA {accel.version}"
    if accel.kind == "rocm" and not (
        torch.hip and _major_minor(torch.hip) == _major_minor(accel.version or "")
    ):
        return f"torch built for ROCm {accel.version}"
    return None


def check_same_torch(
    torch: TorchInstall | None, torch_dir: Path, own_site: Path, cells: str
) -> None:
    """A `torch: current` venv must import the running environment's torch, and hold none
    of its own."""
    if (own_site / "torch").exists():
        raise ToolchainError(
            f"{cells}: a torch was installed into {own_site}, which a torch: current build must "
            "never do; remove that environment and check what pulled torch in"
        )
    seen = torch.package_dir if torch is not None else None
    if seen is None or seen.resolve() != torch_dir.resolve():
        raise ToolchainError(
            f"{cells}: the build environment imports torch from {seen}, not the "
            f"running environment's {torch_dir}; is torch reached through PYTHONPATH? "
            "Install it into the environment instead"
        )


def imported_record(root: Path, env: Mapping[str, str]) -> Path:
    """Where the imports are recorded: with uv's package cache (restored with it, e.g. in
    CI), else beside the environments."""
    if select_installer(env).uv is not None:
        return uv_cache_dir(root.parent.parent, env) / VERIFIED
    return root.parent / VERIFIED


def _verified_key(base_python: Path, snapshot: EnvSnapshot, torch: TorchInstall) -> str:
    """The same interpreter and the same torch/NVIDIA/CUDA distributions: the same import."""
    blob = json.dumps(
        [
            str(base_python),
            snapshot.python_version,
            torch.version,
            sorted(dist_versions(snapshot).items()),
        ]
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def verified_probe(
    python: Path,
    base_python: Path,
    *,
    record_path: Path,
    ctx: RunContext,
) -> EnvSnapshot | None:
    """The new environment's torch, imported once per identical install on this machine.

    A second environment with the same torch (files linked from uv's cache) is read from
    torch's version files instead; what the import reported the first time (the C++ ABI)
    is taken from the record.
    """
    log = ctx.stream
    try:
        records = decode_json(record_path.read_bytes(), what=record_path.name)
    except (OSError, ValueError):
        records = {}
    records = records if isinstance(records, dict) else {}
    quick = probe_venv(python, ctx=ctx)
    if quick is not None and quick.torch is not None:
        known = records.get(_verified_key(base_python, quick, quick.torch))
        if isinstance(known, dict) and isinstance(known.get("cxx11_abi"), bool):
            log.write(
                f"[toolchain] torch {quick.torch.version}: the same install already imported "
                f"here ({known.get('env')}); not imported again\n"
            )
            return replace(quick, torch=replace(quick.torch, cxx11_abi=known["cxx11_abi"]))
    probe = probe_venv(python, ctx=ctx, import_torch=True)
    torch = probe.torch if probe is not None else None
    if probe is not None and torch is not None and torch.imported and torch.cxx11_abi is not None:
        records[_verified_key(base_python, probe, torch)] = {
            "cxx11_abi": torch.cxx11_abi,
            "env": python.parents[1].name,
        }
        with contextlib.suppress(OSError):
            record_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = record_path.with_name(f"{VERIFIED}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(records, indent=1, sort_keys=True), encoding="utf-8")
            tmp.replace(record_path)
    return probe
