"""A project's own [build-system] (pyproject.toml): what the job's environment provides,
what a build installs beside it, and whether `python -m build` may skip its own check.

Read by both backends (installed in the local build's overlay and in the container's
before-build) and by the CI plan (the container's downloads are keyed by them).
"""

from __future__ import annotations

__all__ = [
    "extra_build_requirements",
    "skips_dependency_check",
    "unmet_build_requirements",
]

import importlib.metadata
import sys
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ..errors import ConfigError
from .envs import BUILD_REQUIREMENTS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover (build's dependency on 3.10)
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

# the job's environment provides these: its exact torch and buildtools' own build tools
_PROVIDED = {"torch", *(canonicalize_name(r) for r in BUILD_REQUIREMENTS)}
# backends whose get_requires_for_build_wheel adds nothing a torch extension needs (setuptools:
# `setup_requires`, long deprecated) but runs setup.py, torch's import included, once more
_SETUPTOOLS_BACKENDS = {"", "setuptools.build_meta", "setuptools.build_meta:__legacy__"}


def _build_system(project_dir: Path) -> tuple[list[tuple[str, Requirement]], str]:
    """[build-system]'s requires (raw text, parsed) and build-backend ("" when pyproject.toml
    or the key is absent). What pip could not read either is a ConfigError naming the key."""
    path = project_dir / "pyproject.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return [], ""
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not readable as TOML: {exc}") from None
    table = data.get("build-system", {})
    requires = table.get("requires", []) if isinstance(table, dict) else None
    backend = table.get("build-backend", "") if isinstance(table, dict) else None
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise ConfigError(f"{path}: [build-system] requires must be a list of strings")
    if not isinstance(backend, str):
        raise ConfigError(f"{path}: [build-system] build-backend must be a string")
    out: list[tuple[str, Requirement]] = []
    for raw in requires:
        try:
            out.append((raw, Requirement(raw)))
        except InvalidRequirement as exc:
            raise ConfigError(
                f"{path}: [build-system] requires: {raw!r} is not a requirement (PEP 508): {exc}"
            ) from None
    return out, backend.strip()


def extra_build_requirements(project_dir: Path) -> list[str]:
    """[build-system].requires of pyproject.toml that the job's environment lacks (numpy…),
    as written: their markers are for the pip that installs them, which runs the job's Python.

    torch is never among them: the environment has the cell's exact torch, and a build
    requirement must not replace it.
    """
    requires, _ = _build_system(project_dir)
    return [raw for raw, req in requires if canonicalize_name(req.name) not in _PROVIDED]


def unmet_build_requirements(
    project_dir: Path, site_packages: Path, python_version: str
) -> list[str]:
    """The [build-system].requires the job's environment provides (torch, setuptools…) at a
    version outside the project's specifier, as "<requirement> (<name> <version> here)".

    `python -m build` checks the same before it builds; buildtools skips that check for
    setuptools projects (see `LocalBackend`) and makes this one instead, from the
    environment's metadata (no process). The others (`extra_build_requirements`) are
    installed from their own specifiers. `python_version` ("3.12.1"): the job's Python, for
    the requirements' markers.
    """
    requires, _ = _build_system(project_dir)
    job = {
        "python_full_version": python_version,
        "python_version": ".".join(python_version.split(".")[:2]),
    }
    provided = [
        (raw, req)
        for raw, req in requires
        if canonicalize_name(req.name) in _PROVIDED
        and (req.marker is None or req.marker.evaluate(job))
    ]
    if not provided:
        return []
    installed = {
        canonicalize_name(d.metadata["Name"] or ""): d.version
        for d in importlib.metadata.distributions(path=[str(site_packages)])
    }
    unmet: list[str] = []
    for raw, req in provided:
        version = installed.get(canonicalize_name(req.name))
        if version is None:
            unmet.append(f"{raw} ({req.name} is not installed here)")
        elif not req.specifier.contains(version, prereleases=True):
            unmet.append(f"{raw} ({req.name} {version} here)")
    return unmet


def skips_dependency_check(project_dir: Path) -> bool:
    """Whether `python -m build` may skip its own dependency check (`-x`): setuptools
    projects, whose check runs setup.py a second time (torch's import: ~2 s a build)."""
    return _build_system(project_dir)[1] in _SETUPTOOLS_BACKENDS
