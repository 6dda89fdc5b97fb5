"""The local backend: a PEP 517 build (`build --no-isolation`) in the job's torch environment."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..context import RunContext
from ..errors import BuildFailedError
from ..jsonfields import decode_json
from ..model import BuildJob
from ..process import ProcessRunner
from ..toolchain.buildrequires import (
    extra_build_requirements,
    skips_dependency_check,
    unmet_build_requirements,
)
from ..toolchain.envs import Toolchain

__all__ = [
    "NINJA_STATUS",
    "OBJECTS_DIR",
    "LocalBackend",
    "object_dir",
    "resolved_pins",
]

# Where a job's object files are compiled, inside the project: the compiler's working
# directory then has the same relation to the sources in every checkout, so the paths it sees
# (and ccache's base_dir rewrites to relative ones) are the same wherever the project lives:
# byte-identical wheels and compiler-cache hits across checkouts. `build/` is where setuptools
# puts its own tree, ignored by version control and by the fingerprint.
OBJECTS_DIR = ("build", "torch-buildtools")

# ninja's status line as the progress display reads it (wheelbuild.compileunits), whatever
# the host's NINJA_STATUS says: `[finished/total] ` (ninja's default). It changes what
# ninja prints before each command it ran, not what it runs.
NINJA_STATUS = "[%f/%t] "


def object_dir(project_dir: Path, build_dir: Path) -> Path:
    """The job's object directory (setuptools' build_temp): `build_dir`'s name, in the project."""
    return project_dir.joinpath(*OBJECTS_DIR, build_dir.name)


def _install_overlay(
    toolchain: Toolchain, extra: list[str], overlay: Path, ctx: RunContext
) -> None:
    """Install the project's other build requirements, with what they need that the job's
    environment lacks, into `overlay` (a directory of the job's build tree, put first on
    PYTHONPATH), never into the shared environment.

    pip resolves them against the environment first (`--dry-run --report`): a dependency it
    already satisfies stays, the rest (setuptools-scm 10's vcs-versioning, say) is installed
    at the resolved versions with `--no-deps`. A resolution that would replace torch or one of
    torch's own requirements is refused: the cell's torch is what the wheel is built against.
    """
    stamp = overlay / (".ok-" + hashlib.sha256("\n".join(extra).encode()).hexdigest()[:12])
    if stamp.is_file():
        return
    env, runner, log = ctx.env, ctx.processes, ctx.stream
    overlay.mkdir(parents=True, exist_ok=True)
    report = overlay / ".resolve.json"
    pip = [str(toolchain.python), "-m", "pip", "install"]
    what = f"the project's build requirements {', '.join(extra)} (pyproject.toml [build-system])"
    result = runner.run(
        [*pip, "--dry-run", "--quiet", "--report", str(report), *extra], env=env, log=log
    )
    if not result.ok:
        raise BuildFailedError(f"{what} did not resolve: pip exited {result.returncode}")
    pins = resolved_pins(report, protected=_torch_family(toolchain.site_packages), what=what)
    if pins:
        argv = [*pip, "--no-deps", "--upgrade", "--target", str(overlay), *pins]
        result = runner.run(argv, env=env, log=log)
        if not result.ok:
            raise BuildFailedError(f"{what} did not install: pip exited {result.returncode}")
    stamp.write_text("\n".join(extra) + "\n")


def _torch_family(site_packages: Path) -> set[str]:
    """torch and the distributions its metadata requires (nvidia-*, triton, sympy…)."""
    names = {"torch"}
    for dist in importlib.metadata.distributions(path=[str(site_packages)]):
        if canonicalize_name(dist.metadata["Name"] or "") == "torch":
            for raw in dist.requires or ():
                try:
                    names.add(canonicalize_name(Requirement(raw).name))
                except InvalidRequirement:
                    continue
    return names


_DIST_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")


def resolved_pins(report: Path, *, protected: set[str], what: str) -> list[str]:
    """`name==version` for each distribution pip's installation report would install.

    The report is read as untrusted: a name or version that is not one is an error, as is a
    distribution of `protected` (the job's torch and its requirements), which the build must
    not replace.
    """
    try:
        data = decode_json(report.read_bytes(), what=f"pip's report {report}")
        items = data["install"]
        pairs = [(str(i["metadata"]["name"]), str(i["metadata"]["version"])) for i in items]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BuildFailedError(f"{what}: pip's report is unreadable: {exc}") from None
    pins: list[str] = []
    for name, version in pairs:
        try:
            parsed = Version(version)
        except InvalidVersion:
            parsed = None
        if not _DIST_NAME.match(name) or parsed is None:
            raise BuildFailedError(f"{what}: pip's report names {name!r} {version!r}")
        if canonicalize_name(name) in protected:
            raise BuildFailedError(
                f"{what} need {name} {version}, which would replace the job's own {name}: "
                "the wheel must build against the cell's torch. Loosen the requirement, or "
                "build this cell with a torch it accepts"
            )
        pins.append(f"{name}=={parsed}")
    return pins


class LocalBackend:
    """PEP 517 build with `build --no-isolation` inside the job's torch environment."""

    name = "local"
    needs_host_toolkit = True
    repairs_inside = False

    def preflight(self, runner: ProcessRunner) -> None:
        """Nothing to check ahead: each job's toolchain names what it misses."""

    def build_raw(
        self,
        job: BuildJob,
        toolchain: Toolchain,
        *,
        project_dir: Path,
        out_dir: Path,
        build_dir: Path,
        ctx: RunContext,
    ) -> list[Path]:
        env, runner, log = ctx.env, ctx.processes, ctx.stream
        build_dir.mkdir(parents=True, exist_ok=True)
        # A per-job build tree keeps object files of one toolchain away from another's and
        # lets ninja rebuild incrementally (setuptools reads DIST_EXTRA_CONFIG).
        extra_cfg = build_dir / "buildtools-setup.cfg"
        # setuptools skips an extension whose .so is newer than its sources, blind to headers,
        # flags and environment; `force` hands every build to ninja, which tracks all of those.
        # Objects go to the project's build/torch-buildtools/<tree> (see OBJECTS_DIR), the
        # rest of setuptools' tree (the linked modules, the wheel's staging) to the cache.
        extra_cfg.write_text(
            f"[build]\nbuild_base = {build_dir / 'setuptools'}\n\n[build_ext]\nforce = 1\n"
            f"build_temp = {object_dir(project_dir, build_dir)}\n"
        )
        full_env = {**env, "DIST_EXTRA_CONFIG": str(extra_cfg), "NINJA_STATUS": NINJA_STATUS}
        extra = extra_build_requirements(project_dir)
        if extra:
            overlay = build_dir / "build-requires"
            _install_overlay(toolchain, extra, overlay, ctx)
            path = full_env.get("PYTHONPATH")
            full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(overlay), path) if p)
        argv = [str(toolchain.python), "-m", "build", "--wheel", "--no-isolation"]
        if skips_dependency_check(project_dir):
            # build's check would run setup.py (and import torch) once more only to ask it
            # for setup_requires; the [build-system] requirements are checked here instead
            unmet = unmet_build_requirements(
                project_dir, toolchain.site_packages, toolchain.python_version
            )
            if unmet:
                raise BuildFailedError(
                    "pyproject.toml [build-system] requires what this job's environment "
                    f"does not have: {'; '.join(unmet)}. Build this cell with a torch (and "
                    "build tools) the project accepts, or widen the requirement"
                )
            argv.append("--skip-dependency-check")
        argv += ["--outdir", str(out_dir), str(project_dir)]
        result = runner.run(argv, cwd=project_dir, env=full_env, log=log)
        if not result.ok:
            raise BuildFailedError(f"`python -m build` exited {result.returncode}")
        wheels = sorted(out_dir.glob("*.whl"))
        if not wheels:
            raise BuildFailedError("the build finished but produced no wheel")
        return wheels
