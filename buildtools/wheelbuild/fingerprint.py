"""Fingerprints: of a project's sources, and of a whole BuildJob (what its wheel is a function of).

A job's fingerprint hashes the content of every source file the build reads, the job's
resolved configuration (torch requirement, accelerator, arch list, build_env, labels, repair
settings, …), its environment's key (Python full version, torch requirement and index,
toolkit pins), the backend, the build-relevant host variables and buildtools' own version
and code. A wheel whose build record carries the same fingerprint is what this build would
produce again, so the build is skipped (`skipped-unchanged`); any change gives a new
fingerprint, so a stale wheel is never reused.
"""

from __future__ import annotations

__all__ = [
    "BUILD_VARS",
    "BUILD_VAR_PREFIXES",
    "FINGERPRINT_SCHEMA",
    "IGNORED_DIRS",
    "IGNORED_ROOT_FILES",
    "SourceScan",
    "build_vars",
    "buildtools_digest",
    "fingerprint_inputs",
    "job_config",
    "job_fingerprint",
    "scan_sources",
    "source_files",
    "source_fingerprint",
]

import dataclasses
import functools
import hashlib
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..ecosystem import load_ecosystem
from ..model import BuildJob

# Directories no build reads: VCS data, virtual environments, caches, build trees, and what
# buildtools itself writes (wheelhouse/, smoke-results/, site/: the default outputs of
# build, smoke and index; .github/: the workflows `buildtools ci` writes).
IGNORED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".nox",
        ".tox",
        ".venv",
        "venv",
        "build",
        "dist",
        "__pycache__",
        "wheelhouse",
        "smoke-results",
        "site",
        ".github",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".hypothesis",
    }
)
# Files of the project's root that buildtools reads or writes and no compile does. matrix.yaml:
# what of it can change a wheel (build_env, arch lists, torch and its index, labels, repair)
# is the job's resolved configuration, already in the job's fingerprint; the rest (profiles,
# runners, the smoke command, the index) never reaches the compiler. noxfile.py: sessions
# that call buildtools, whose options again reach the job, not the sources.
IGNORED_ROOT_FILES = frozenset({"matrix.yaml", "noxfile.py"})
# An output directory under another name (--wheelhouse, --out, --site) is known by the
# record buildtools writes into it: a report.json or index.json of one of its schemas.
_OUTPUT_RECORDS = ("report.json", "index.json")
_OUTPUT_SCHEMA = b'"schema": "torch-buildtools/'


def _names(parent: str, name: str) -> list[str]:
    try:
        return os.listdir(Path(parent) / name)  # noqa: PTH208 (names, as os.walk gives them)
    except OSError:
        return []


def _beside(name: str, outputs: frozenset[str] | set[str]) -> bool:
    """`.X.lock`, `.X.prev`, `.X.staging-…` of an output directory X (index, smoke)."""
    head, dot, _ = name[1:].partition(".")
    return name.startswith(".") and bool(dot) and head in outputs


def _is_output_dir(directory: str, filenames: list[str]) -> bool:
    for name in _OUTPUT_RECORDS:
        if name in filenames:
            try:
                with (Path(directory) / name).open("rb") as fh:
                    if _OUTPUT_SCHEMA in fh.read(4096):
                        return True
            except OSError:
                continue
    return False


@dataclasses.dataclass(frozen=True)
class SourceScan:
    """The files a build may read, and what was passed over (relative path, why)."""

    files: tuple[Path, ...]
    skipped: tuple[tuple[str, str], ...]


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _special(mode: int) -> str:
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def scan_sources(root: Path) -> SourceScan:
    """Regular files under root that a build may read, sorted; VCS dirs, build outputs and
    what buildtools writes (IGNORED_DIRS, IGNORED_ROOT_FILES, any directory holding one of
    its records) skipped. A FIFO, socket or device would hang or fail a read, and a symbolic link that
    dangles or leads out of the project is not part of it: they are skipped and named."""
    found: list[Path] = []
    skipped: list[tuple[str, str]] = []
    base = root.resolve()
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath != str(root) and _is_output_dir(dirpath, filenames):
            dirnames[:] = []
            continue
        # what a writer keeps beside its output directory X: .X.lock, .X.prev, .X.staging-…
        outputs = IGNORED_DIRS | {
            d for d in dirnames if _is_output_dir(str(Path(dirpath) / d), _names(dirpath, d))
        }
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in outputs and not d.endswith(".egg-info") and not _beside(d, outputs)
        )
        for name in sorted(filenames):
            if name.endswith((".pyc", ".so", ".o")) or _beside(name, outputs):
                continue
            if dirpath == str(root) and name in IGNORED_ROOT_FILES:
                continue
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            try:
                mode = path.lstat().st_mode
                if stat.S_ISLNK(mode):
                    target = path.resolve()
                    if not target.exists():
                        skipped.append((rel, "a dangling symbolic link"))
                        continue
                    if not target.is_relative_to(base):
                        skipped.append((rel, "a symbolic link out of the project"))
                        continue
                    mode = target.stat().st_mode
            except OSError as exc:
                skipped.append((rel, f"unreadable ({exc.strerror or exc})"))
                continue
            if not stat.S_ISREG(mode):
                skipped.append((rel, _special(mode)))
                continue
            found.append(path)
    return SourceScan(files=tuple(found), skipped=tuple(skipped))


def source_files(root: Path) -> list[Path]:
    """Every regular file under root that a build may read, sorted (see scan_sources)."""
    return list(scan_sources(root).files)


def source_fingerprint(root: Path) -> str:
    """sha256 over (relative path, content) of every source file: 'sha256:<hex>'."""
    digest = hashlib.sha256()
    for path in source_files(root):
        rel = path.relative_to(root).as_posix()
        digest.update(rel.encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return "sha256:" + digest.hexdigest()


# ------------------------------------------------------------------------ job fingerprints

FINGERPRINT_SCHEMA = 1
# Host variables that change what a build compiles: these names, and names with these
# prefixes. Anything else a project's setup.py reads belongs in project.build_env (which is
# part of the job), or needs --force.
BUILD_VARS = frozenset(
    {
        "CC",
        "CXX",
        "CPP",
        "LD",
        "LDSHARED",
        "AR",
        "CFLAGS",
        "CXXFLAGS",
        "CPPFLAGS",
        "LDFLAGS",
        "CPATH",
        "C_INCLUDE_PATH",
        "CPLUS_INCLUDE_PATH",
        "LIBRARY_PATH",
        "DIST_EXTRA_CONFIG",
        "SETUPTOOLS_USE_DISTUTILS",
        "_GLIBCXX_USE_CXX11_ABI",
    }
)
BUILD_VAR_PREFIXES = ("TORCH_", "PYTORCH_", "FORCE_", "CUDA", "NVCC", "ROCM", "HIP", "USE_")
# Job fields that say where a build or test runs or how fast, not what it produces.
_NOT_IN_FINGERPRINT = frozenset({"runner", "smoke_runner", "smoke", "compiler_cache"})
# Variables of the job that change how fast it builds, not what it builds.
_SPEED_VARS = frozenset({"MAX_JOBS"})


def build_vars(env: Mapping[str, str]) -> dict[str, str]:
    """The host variables a build's output may depend on (see BUILD_VARS)."""
    return {
        k: v
        for k, v in sorted(env.items())
        if (k in BUILD_VARS or k.startswith(BUILD_VAR_PREFIXES)) and k not in _SPEED_VARS
    }


def job_config(job: BuildJob) -> dict[str, Any]:
    """The job's resolved configuration (`BuildJob.to_json`), less where it runs and MAX_JOBS."""
    data = job.to_json()
    for key in _NOT_IN_FINGERPRINT:
        del data[key]
    data["env"] = [[k, v] for k, v in job.env if k not in _SPEED_VARS]
    return data


@functools.lru_cache(maxsize=1)
def buildtools_digest() -> str:
    """sha256 of buildtools' own code and data: repair, relabel and checks shape the wheel."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".yaml", ".json"):
            digest.update(path.relative_to(package).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def fingerprint_inputs(
    job: BuildJob,
    *,
    sources: str,
    toolchain: Mapping[str, Any],
    backend: Mapping[str, str],
    host_env: Mapping[str, str],
) -> dict[str, Any]:
    """Everything a job's wheel is a function of, as one JSON-able mapping (pure).

    `sources` is `source_fingerprint(project_dir)`; `toolchain` the environment's key fields
    (`toolchain_key`: Python full version, torch requirement and index, accelerator, toolkit
    pins, system CUDA); `backend` what the backend adds (its name, a builder image).
    """
    from .. import __version__

    return {
        "schema": FINGERPRINT_SCHEMA,
        "buildtools": __version__,
        "buildtools_code": buildtools_digest(),
        "sources": sources,
        "job": job_config(job),
        "toolchain": dict(toolchain),
        "backend": dict(sorted(backend.items())),
        "host_env": _host_vars(job, host_env),
    }


def _host_vars(job: BuildJob, host_env: Mapping[str, str]) -> dict[str, str]:
    """build_vars, less the CUDA/ROCm variables a CPU cell's build never sees
    (`toolchain.blind`): a new CUDA_HOME does not make a CPU wheel stale."""
    found = build_vars(host_env)
    if job.accelerator.kind == "cpu":
        for name in load_ecosystem().device_env:
            found.pop(name, None)
    return found


def job_fingerprint(inputs: Mapping[str, Any]) -> str:
    """'sha256:<hex>' of `fingerprint_inputs(...)`."""
    blob = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()
