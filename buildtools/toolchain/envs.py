"""Per-job build environments and their cache: the `Toolchain` record, its key, its marker.

A toolchain is created once under the cache directory and reused while its key (Python
full version, torch requirement and index, accelerator, toolkit, schema) is unchanged. The
marker file holding the key is written last and atomically, so an environment whose
creation was interrupted, or whose key differs, is never used: it is removed and rebuilt.
`cached_toolchain` is that rule, for an index torch (`prepare`) and for `torch: current`
(`current`) alike; a reuse asks the environment whether it still is what its marker says.
"""

from __future__ import annotations

__all__ = [
    "BUILD_REQUIREMENTS",
    "MARKER",
    "SCHEMA_VERSION",
    "Toolchain",
    "build_requirements_for",
    "cached_toolchain",
    "env_name",
    "find_rocm",
    "find_toolchain",
    "record_created",
    "toolchain_key",
]

import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ..context import RunContext
from ..errors import ToolMissingError
from ..jsonfields import decode_json
from ..locks import file_lock
from ..model import BuildJob
from ..torchinstall import TorchInstall
from .cuda import CudaToolkit, link_dir
from .venv import remove_env
from .verify import probe_venv

SCHEMA_VERSION = 1
BUILD_REQUIREMENTS: tuple[str, ...] = ("setuptools", "wheel", "ninja", "build")
MARKER = "buildtools-toolchain.json"


def build_requirements_for(torch: TorchInstall, python_version: str) -> tuple[str, ...]:
    """BUILD_REQUIREMENTS with the bounds torch's own metadata sets on them for this Python.

    An environment torch is installed into gets those bounds from the resolver; one that
    imports a torch installed elsewhere (`torch: current`) must name them, or the newest
    release comes (setuptools 84 beside torch 2.11's `setuptools<82` on Python 3.12, and
    `python -m build --no-isolation` refuses the unmet dependency).
    """
    wanted = {canonicalize_name(n) for n in BUILD_REQUIREMENTS}
    xy = ".".join(python_version.split(".")[:2])
    where = {"python_version": xy, "python_full_version": python_version, "extra": ""}
    bounds: list[str] = []
    for line in torch.requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue  # not ours to judge: pip reads torch's metadata as it is
        if canonicalize_name(req.name) not in wanted or not req.specifier:
            continue
        if req.marker is None or req.marker.evaluate(where):
            bounds.append(f"{canonicalize_name(req.name)}{req.specifier}")
    return (*BUILD_REQUIREMENTS, *sorted(set(bounds)))


@dataclass(frozen=True, kw_only=True)
class Toolchain:
    """A verified build environment for one job."""

    key: str  # hash of the env key
    root: Path  # the venv
    python: Path  # root/bin/python
    # the torch it imports, as the environment reported it (cxx11_abi always known here)
    torch: TorchInstall
    cuda_home: Path | None
    # Variables to add for the build. PATH is a prefix to put before the build's PATH; every
    # other value is complete (LIBRARY_PATH and CPATH already end with the value they had in
    # the `env` given to prepare_toolchain) and replaces the variable.
    build_env: tuple[tuple[str, str], ...]
    reused: bool  # True when the cached env was reused

    @property
    def python_version(self) -> str:
        """The environment's full Python version, "3.12.1"."""
        return self.torch.python_version or ""

    @property
    def site_packages(self) -> Path:
        """Where its torch is (a `torch: current` env: the running environment's)."""
        return self.torch.site_packages


def toolchain_key(
    job: BuildJob,
    *,
    python_version: str,
    system_cuda: CudaToolkit | None,
    with_toolkit: bool = True,
) -> tuple[str, dict[str, Any]]:
    """(hash, fields): everything that decides the content of a job's environment."""
    toolkit = job.toolkit
    fields: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "python": python_version,
        "torch_requirement": job.torch_requirement,
        "torch_index": job.torch_index,
        "accelerator": job.accelerator.name,
        "platform": job.platform,
        "toolkit": None
        if toolkit is None
        else {
            "kind": toolkit.kind,
            "version": toolkit.version,
            "pip_packages": list(toolkit.pip_packages),
        },
        # A system toolkit means no NVIDIA compiler wheels in the env: a different env.
        "cuda": None
        if system_cuda is None
        else {"source": "system", "home": str(system_cuda.home), "version": system_cuda.version},
        "build_requirements": list(BUILD_REQUIREMENTS) if with_toolkit else [],
        "with_toolkit": with_toolkit,
    }
    if job.torch_source == "current":  # only then: existing keys keep their hash
        fields["current_python"] = job.current_python
    blob = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16], fields


def env_name(job: BuildJob, python_version: str, key: str) -> str:
    """The directory name of a job's environment: readable, and unique by its key."""
    torch = re.sub(r"[^A-Za-z0-9.]+", "", job.torch) or "torch"
    current = "-current" if job.torch_source == "current" else ""
    return f"py{python_version}-torch{torch}{current}-{job.accelerator.name}-{key[:12]}"


# --------------------------------------------------------------------------- the build env


def _prepend(value: Sequence[Path | str], previous: str | None) -> str:
    parts = [str(v) for v in value]
    if previous:
        parts.append(previous)
    return os.pathsep.join(parts)


def _build_env(
    root: Path, env: Mapping[str, str], cuda: CudaToolkit | None, rocm_home: Path | None
) -> tuple[tuple[str, str], ...]:
    bin_dirs: list[Path] = [root / "bin"]
    out: dict[str, str] = {"VIRTUAL_ENV": str(root)}
    if cuda is not None:
        bin_dirs.insert(0, cuda.home / "bin")
        out["CUDA_HOME"] = str(cuda.home)
        if cuda.source == "pypi":
            out["LIBRARY_PATH"] = _prepend([link_dir(root)], env.get("LIBRARY_PATH"))
            out["CPATH"] = _prepend(cuda.include_dirs, env.get("CPATH"))
    if rocm_home is not None:
        bin_dirs.insert(0, rocm_home / "bin")
        out["ROCM_HOME"] = str(rocm_home)
    out["PATH"] = _prepend(bin_dirs, None)
    return tuple(sorted(out.items()))


def find_rocm(env: Mapping[str, str], site_packages: Path) -> Path | None:
    """ROCM_HOME/ROCM_PATH, else /opt/rocm; None where torch finds its pip-installed SDK."""
    for var in ("ROCM_HOME", "ROCM_PATH"):
        if env.get(var):
            return Path(env[var])
    # torch >= 2.13 finds TheRock's pip-installed SDK itself.
    if any((site_packages / name).is_dir() for name in ("_rocm_sdk_devel", "_rocm_sdk_core")):
        return None
    default = Path("/opt/rocm")
    if (default / "bin" / "hipcc").is_file():
        return default
    raise ToolMissingError(
        "ROCm toolkit: not found (no ROCM_HOME/ROCM_PATH, no /opt/rocm/bin/hipcc, no "
        "rocm-sdk-devel in the environment); install ROCm (https://rocm.docs.amd.com) and set "
        "ROCM_HOME, or build ROCm cells with the docker backend"
    )


def _toolchain(
    *,
    key: str,
    root: Path,
    torch: TorchInstall,
    cuda: CudaToolkit | None,
    marker: Mapping[str, Any],
    env: Mapping[str, str],
    reused: bool,
) -> Toolchain:
    rocm_home = Path(marker["rocm_home"]) if marker.get("rocm_home") else None
    abi = torch.cxx11_abi if torch.cxx11_abi is not None else marker.get("cxx11_abi")
    return Toolchain(
        key=key,
        root=root,
        python=root / "bin" / "python",
        torch=replace(torch, cxx11_abi=bool(abi)),
        cuda_home=cuda.home if cuda else None,
        build_env=_build_env(root, env, cuda, rocm_home),
        reused=reused,
    )


# ------------------------------------------------------------------------------ the marker


def _read_marker(root: Path) -> dict[str, Any] | None:
    try:
        data = decode_json((root / MARKER).read_bytes(), what=MARKER)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_marker(root: Path, data: Mapping[str, Any]) -> None:
    """Write the marker atomically: it is the proof the env is complete, so it comes last."""
    tmp = root / f".{MARKER}.tmp"
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(root / MARKER)


def record_created(  # noqa: PLR0913
    *,
    key: str,
    fields: Mapping[str, Any],
    root: Path,
    base_python: Path,
    torch: TorchInstall,
    cuda: CudaToolkit | None,
    rocm_home: Path | None,
    started: float,
    ctx: RunContext,
    extra: Mapping[str, Any] | None = None,
) -> Toolchain:
    """Write the marker of a verified new environment (last), and return it as a Toolchain."""
    log, env = ctx.stream, ctx.env
    seconds = time.monotonic() - started
    marker = {
        "schema": SCHEMA_VERSION,
        "key": key,
        "fields": fields,
        "base_python": str(base_python),
        "torch_version": torch.version,
        "cxx11_abi": torch.cxx11_abi,
        "cuda": cuda.to_json() if cuda is not None else None,
        "rocm_home": str(rocm_home) if rocm_home else None,
        "create_seconds": round(seconds, 1),
        **(extra or {}),
    }
    _write_marker(root, marker)
    log.write(f"[toolchain] created {root} in {seconds:.0f} s\n")
    return _toolchain(
        key=key, root=root, torch=torch, cuda=cuda, marker=marker, env=env, reused=False
    )


def _reuse(
    key: str,
    root: Path,
    marker: Mapping[str, Any],
    *,
    ctx: RunContext,
) -> Toolchain | None:
    """The cached env as a Toolchain, or None when it is no longer what its marker says.

    torch is imported when the environment is created (that proves it imports); a reuse
    reads torch's version files instead, and the C++ ABI from the marker, when it has it.
    """
    log, env = ctx.stream, ctx.env
    abi_known = isinstance(marker.get("cxx11_abi"), bool)
    probe = probe_venv(root / "bin" / "python", ctx=ctx, import_torch=not abi_known)
    torch = probe.torch if probe is not None else None
    cuda = CudaToolkit.from_json(marker["cuda"]) if marker.get("cuda") else None
    if torch is None or torch.imported is False or torch.version != marker.get("torch_version"):
        return None
    if not abi_known and isinstance(torch.cxx11_abi, bool):
        # a marker from before the ABI was recorded: record it, the next reuse is quicker
        marker = {**marker, "cxx11_abi": torch.cxx11_abi}
        _write_marker(root, marker)
    if marker.get("torch_dir") and str(torch.package_dir) != marker["torch_dir"]:
        return None
    if cuda is not None and not (cuda.home / "bin" / "nvcc").is_file():
        return None
    log.write(
        f"[toolchain] reusing {root} (torch {torch.version}, created in "
        f"{marker.get('create_seconds', 0):.0f} s)\n"
    )
    return _toolchain(
        key=key, root=root, torch=torch, cuda=cuda, marker=marker, env=env, reused=True
    )


def cached_toolchain(
    root: Path,
    *,
    key: str,
    fields: Mapping[str, Any],
    create: Callable[[], Toolchain],
    ctx: RunContext,
    torch_dir: Path | None = None,
) -> Toolchain:
    """The environment at `root`, reused while its marker names `key` and `fields` and it
    still is what the marker says; else removed and made again by `create`. Under a lock:
    concurrent jobs of one key make it once.

    `torch_dir` (`torch: current`): the running torch, which must still be the one the
    environment was made for.
    """
    log = ctx.stream
    with file_lock(root.parent / ".locks" / f"{root.name}.lock"):
        marker = _read_marker(root)
        if marker is not None and marker.get("key") == key and marker.get("fields") == fields:
            if torch_dir is None or marker.get("torch_dir") == str(torch_dir):
                reused = _reuse(key, root, marker, ctx=ctx)
                if reused is not None:
                    return reused
            why = (
                "it no longer runs, or its torch or toolkit changed since it was created"
                if torch_dir is None
                else "the running environment's torch moved or changed since it was created"
            )
        elif marker is not None:
            why = "its key does not match the job (a stale environment)"
        else:
            why = "it has no marker (an interrupted creation)"
        remove_env(root, log, why)
        return create()


def find_toolchain(cache_dir: Path, *, torch_version: str, python: str | None) -> Path | None:
    """The site-packages of a complete cached environment with exactly `torch_version`
    (the one of the wheel's build record), preferring one of the Python `python` ("3.11.7" or
    "3.11"); None when there is none. Read from the markers alone."""
    found: list[tuple[int, Path]] = []
    for marker in sorted(cache_dir.glob(f"toolchains/*/{MARKER}")):
        data = _read_marker(marker.parent)
        if data is None or data.get("torch_version") != torch_version:
            continue
        fields = data.get("fields")
        version = str(fields.get("python", "")) if isinstance(fields, dict) else ""
        sites = [p.parent for p in marker.parent.glob("lib/python*/site-packages/torch")]
        if not sites:
            continue
        same = bool(python) and (version == python or version.startswith(f"{python}."))
        near = bool(python) and version.rsplit(".", 1)[0] == (python or "").rsplit(".", 1)[0]
        found.append((0 if same else 1 if near else 2, sites[0]))
    return min(found)[1] if found else None
