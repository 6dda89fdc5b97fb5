"""Source-level risks of an extension, found before any build, each with its remedy.

Five kinds: CUDA decided with `torch.cuda.is_available()` at build time (False on a
CPU-only build machine, so a CUDA cell would silently build a CPU-only wheel), or by probing
the build machine (running nvcc, reading CUDA_HOME: `probes`, so a CPU cell built where a
toolkit is installed would add its CUDA module); C++ APIs
newer than the oldest torch of the matrix (`data/source_risks.yaml`, `apis`); constructs
hipcc rejects (`hip`, reported when the matrix has ROCm cells or the project has CUDA code
that a ROCm cell would hipify); CUDA headers a CPU cell's build includes outside any `#if` (`cpu_build`, found
by `cpubuild`).
"""

from __future__ import annotations

__all__ = ["Risk", "cuda_headers_in_cpu_build", "find_risks", "load_risk_rules"]

import re
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path

from packaging.version import Version
from ruamel.yaml import YAML

from ..knowledge import DATA_DIR
from .cpubuild import cpu_translation_units, unguarded_cuda_includes
from .inspect import Inspection, read_source


def _code(text: str) -> str:
    """The source without its comments: a comment naming a construct is not using it.

    Scanned with str.find, not a lazy `/* … */` pattern: that one scans to the end of the file
    again from every unclosed `/*`, quadratic in a file of them.
    """
    out: list[str] = []
    at = 0
    while True:
        line, block = text.find("//", at), text.find("/*", at)
        if line < 0 and block < 0:
            out.append(text[at:])
            return "".join(out)
        if block < 0 or 0 <= line < block:
            out.append(text[at:line] + " ")
            end = text.find("\n", line)
            at = len(text) if end < 0 else end
        else:
            out.append(text[at:block] + " ")
            end = text.find("*/", block + 2)
            if end < 0:
                return "".join(out)
            at = end + 2


@dataclass(frozen=True, kw_only=True)
class Risk:
    """One finding: what, where, and what to do about it."""

    # build-time-cuda-detection | host-toolchain-probe | downloads-while-building |
    # api-newer-than-torch | hip-incompatible | cuda-header-in-cpu-build
    code: str
    message: str
    remedy: str
    where: tuple[str, ...] = ()  # relative paths


@dataclass(frozen=True, kw_only=True)
class _Rule:
    name: str
    pattern: re.Pattern[str]
    remedy: str
    since: str | None = None
    with_: re.Pattern[str] | None = None


@cache
def load_risk_rules() -> tuple[tuple[_Rule, ...], tuple[_Rule, ...], tuple[_Rule, ...]]:
    """(api, hip, cpu_build rules) from data/source_risks.yaml; a malformed row fails loudly."""
    path = DATA_DIR / "source_risks.yaml"
    data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    out: list[tuple[_Rule, ...]] = []
    for key in ("apis", "hip", "cpu_build"):
        rows = []
        for i, row in enumerate(data[key]):
            try:
                rows.append(
                    _Rule(
                        name=str(row["name"]),
                        pattern=re.compile(row["pattern"]),
                        remedy=" ".join(str(row["remedy"]).split()),
                        since=str(row["since"]) if "since" in row else None,
                        with_=re.compile(row["with"]) if "with" in row else None,
                    )
                )
                if not row.get("source"):
                    raise KeyError("source")
            except (KeyError, TypeError, re.error) as exc:
                raise ValueError(f"{path}: {key}[{i}]: {exc}") from exc
        out.append(tuple(rows))
    return out[0], out[1], out[2]


def _sources(project: Inspection) -> dict[str, str]:
    found: dict[str, str] = {}
    for rel in (*project.cuda_sources, *project.cpp_sources):
        found[rel] = _code(read_source(project.root, rel))
    for path in sorted(project.root.rglob("*")):
        rel = path.relative_to(project.root).as_posix()
        if len(found) > 2000:
            break
        if rel not in found and path.suffix in (".cuh", ".h", ".hpp") and path.is_file():
            if any(part.startswith(".") or part == "third_party" for part in path.parts):
                continue
            found[rel] = _read_code(path)
    return found


def _matches(pattern: re.Pattern[str], text: str) -> bool:
    return pattern.search(text) is not None


def _read_code(path: Path) -> str:
    """A file of the project (an absolute path under some project root) without comments;
    empty when unreadable or a link out of the directory it is in."""
    return _code(read_source(path.parent, path.name))


def cuda_headers_in_cpu_build(project: Inspection) -> list[Risk]:
    """The `cuda-header-in-cpu-build` risks of `project` (none: its CPU build can compile)."""
    return _cpu_build_risks(project, load_risk_rules()[2]) if project.cpp_sources else []


def _cpu_build_risks(project: Inspection, rules: tuple[_Rule, ...]) -> list[Risk]:
    headers = [
        path.relative_to(project.root).as_posix()
        for path in sorted(project.root.rglob("*"))
        if path.suffix in (".h", ".hpp", ".hh", ".cuh", ".inl") and path.is_file()
    ][:20_000]
    risks = []
    for rule in rules:
        found = unguarded_cuda_includes(
            project.root,
            cpu_translation_units(project.cpp_sources),
            headers,
            is_cuda_header=partial(_matches, rule.pattern),
            read=_read_code,
        )
        if found:
            first = found[0]
            via = "" if first.by == first.unit else f" through {first.by}"
            names = sorted({f"<{f.header}>" for f in found})
            risks.append(
                Risk(
                    code="cuda-header-in-cpu-build",
                    message=f"{', '.join(names[:4])}{' …' if len(names) > 4 else ''} included "
                    f"outside any #if by the CPU build's sources ({first.unit}{via}): a CPU "
                    f'cell fails to compile with "{first.header.rsplit("/", 1)[-1]}: No such '
                    'file or directory" on a machine without the CUDA toolkit',
                    remedy=rule.remedy,
                    where=tuple(dict.fromkeys(f.by for f in found)),
                )
            )
    return risks


def _download_risk(project: Inspection) -> Risk:
    if project.force_build is not None:
        name, value = project.force_build
        remedy = (
            f"set {name}={value} (setup.py's own switch) in project.build_env: a matrix.yaml "
            "written by `buildtools init` does"
        )
    else:
        remedy = (
            "make the build compile without the network (the project's force-build switch in "
            "project.build_env, or no download in setup.py); `--backend docker --offline` "
            "builds have no network and fail where setup.py needs it"
        )
    return Risk(
        code="downloads-while-building",
        message="setup.py fetches files over the network while it builds (e.g. a prebuilt "
        "wheel from the project's releases instead of compiling): the wheel would not be "
        "the one this build compiled, and an offline build fails",
        remedy=remedy,
        where=("setup.py",),
    )


def _probe_risk(project: Inspection) -> Risk:
    probes = ", ".join(project.host_probes)
    if project.probes_hidden:
        remedy = (
            "none needed for buildtools builds: a CPU cell is built with no CUDA/ROCm "
            "toolchain visible (nvcc, hipcc, nvidia-smi off PATH; CUDA_HOME, CUDA_PATH, "
            "ROCM_PATH, HIP_PATH unset), so it builds the CPU extension only, and a CUDA "
            "cell with its own toolkit's nvcc and CUDA_HOME. Elsewhere (pip install from the "
            "sdist) decide on torch.version.cuda and a FORCE_CUDA switch instead"
        )
    else:
        remedy = (
            "a fixed path like /usr/local/cuda cannot be hidden from a local CPU build: on a "
            "machine that has it, build CPU cells with --backend docker (the CPU image has no "
            "toolkit), or decide on torch.version.cuda and a FORCE_CUDA switch in setup.py"
        )
    return Risk(
        code="host-toolchain-probe",
        message=f"setup.py decides whether to build its CUDA/ROCm extension by probing the "
        f"build machine ({probes}), not by the cell: where a CUDA toolkit is installed a CPU "
        "cell would add the CUDA module and fail (a CPU torch has no CUDA for cpp_extension: "
        '"CUDA_HOME environment variable is not set") or ship a module no CPU user can load',
        remedy=remedy,
        where=("setup.py",),
    )


def find_risks(project: Inspection, *, oldest_torch: str, rocm: bool, cpu: bool) -> list[Risk]:
    """The risks of `project` for a matrix whose oldest torch is `oldest_torch`.

    `rocm`: the matrix has ROCm cells; `cpu`: it has CPU cells.
    """
    risks: list[Risk] = []
    if project.cuda_gate == "torch.cuda.is_available() at build time":
        risks.append(
            Risk(
                code="build-time-cuda-detection",
                message="setup.py decides whether to build CUDA code with "
                "torch.cuda.is_available(), which is False on a CPU-only build machine: a "
                "CUDA cell would build a CPU-only wheel",
                remedy="buildtools makes it answer True during CUDA/ROCm builds "
                "(BUILDTOOLS_FORCE_CUDA_AVAILABLE=1, on by default) and the no-device-code "
                "check verifies the result; better, decide on FORCE_CUDA or CUDA_HOME in setup.py",
                where=("setup.py",),
            )
        )
    if project.host_probes and project.has_cuda:
        risks.append(_probe_risk(project))
    if project.downloads:
        risks.append(_download_risk(project))
    apis, hip, cpu_build = load_risk_rules()
    texts = _sources(project)
    oldest = Version(oldest_torch)
    for rule in apis:
        assert rule.since is not None
        if oldest >= Version(rule.since):
            continue
        where = tuple(rel for rel, text in texts.items() if rule.pattern.search(text))
        if where:
            risks.append(
                Risk(
                    code="api-newer-than-torch",
                    message=f"{rule.name} exists from torch {rule.since}, but the matrix's "
                    f"oldest torch is {oldest_torch}: the build fails there, or the wheel "
                    "fails at import with an undefined symbol",
                    remedy=rule.remedy,
                    where=where,
                )
            )
    if rocm or project.has_cuda:
        for rule in hip:
            where = tuple(
                rel
                for rel, text in texts.items()
                if rule.pattern.search(text) and (rule.with_ is None or rule.with_.search(text))
            )
            if where:
                risks.append(
                    Risk(
                        code="hip-incompatible",
                        message=f"{rule.name}: does not compile under HIP, so ROCm cells fail"
                        + ("" if rocm else " (the matrix has none yet)"),
                        remedy=rule.remedy,
                        where=where,
                    )
                )
    if cpu and project.cpp_sources:
        risks += _cpu_build_risks(project, cpu_build)
    return risks
