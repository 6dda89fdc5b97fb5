"""Before hours of builds, the release's plan job checks what it is about to publish.

- The tag names the project's version: `v1.2.0` releases version 1.2.0 of the extension,
  read from the source the tag points to (`ci.version_file`, else pyproject.toml's static
  `[project] version` or its `attr:`, setup.cfg's, the package's `__version__`, setup.py's
  literal `version=`). A tag that does not match `ci.tag_pattern` (`v<version>` by default;
  the workflow checked it before anything was checked out) stops the release.
- A job whose wheel is already published (the same project, version with its local label,
  Python tag and architecture in the published manifest) is not built again: rebuilding a tag after a
  partial release builds what is missing, and never a second file under a published name.
"""

from __future__ import annotations

__all__ = ["check_tag", "project_version", "published_jobs"]

import ast
import configparser
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..errors import PlanError
from ..index.manifest import IndexedWheel
from ..index.published import published_cells, window_cells
from ..matrix.ciconfig import DEFAULT_TAG_PATTERN
from ..model import BuildJob

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover (build's dependency on 3.10)
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

_ASSIGN_RE = re.compile(r"""^(?:__version__|version)\s*[:=]\s*["']([^"']+)["']""", re.M)


def _literal_version(path: Path) -> str | None:
    """`__version__ = "1.2"` (or `version = "1.2"`) in a Python, cfg or text file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    if path.suffix == ".py":
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return None
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                if "__version__" in names and isinstance(node.value.value, str):
                    return node.value.value
        return None
    m = _ASSIGN_RE.search(text)
    return m[1] if m else None


def _module_file(project_dir: Path, module: str) -> Path | None:
    rel = module.replace(".", "/")
    for base in (project_dir / "src", project_dir):
        for candidate in (base / rel / "__init__.py", base / f"{rel}.py"):
            if candidate.is_file():
                return candidate
    return None


def _attr(project_dir: Path, attr: str) -> str | None:
    module, _, name = attr.strip().rpartition(".")
    if name != "__version__" or not module:
        return None
    path = _module_file(project_dir, module)
    return _literal_version(path) if path else None


def _from_pyproject(project_dir: Path) -> str | None:
    path = project_dir / "pyproject.toml"
    if not path.is_file():
        return None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    project = data.get("project") or {}
    if isinstance(project.get("version"), str):
        return str(project["version"])
    dynamic = (((data.get("tool") or {}).get("setuptools") or {}).get("dynamic") or {}).get(
        "version"
    )
    if isinstance(dynamic, dict) and isinstance(dynamic.get("attr"), str):
        return _attr(project_dir, dynamic["attr"])
    return None


def _from_setup_cfg(project_dir: Path) -> str | None:
    path = project_dir / "setup.cfg"
    if not path.is_file():
        return None
    parser = configparser.ConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except configparser.Error:
        return None
    value = parser.get("metadata", "version", fallback=None)
    if value and value.startswith("attr:"):
        return _attr(project_dir, value.removeprefix("attr:"))
    return value or None


def project_version(
    project_dir: Path, *, name: str | None, version_file: str | None = None
) -> str | None:
    """The project's version as its source declares it (None when it is not static)."""
    if version_file is not None:
        path = project_dir / version_file
        if path.suffix == ".toml":
            return _from_pyproject(path.parent)
        return _literal_version(path)
    for found in (_from_pyproject(project_dir), _from_setup_cfg(project_dir)):
        if found:
            return found
    if name:
        module = canonicalize_name(name).replace("-", "_")
        init = _module_file(project_dir, module)
        if init is not None and (found := _literal_version(init)):
            return found
    setup = project_dir / "setup.py"
    if setup.is_file():
        m = re.search(r"""\bversion\s*=\s*["']([0-9][^"']*)["']""", setup.read_text("utf-8"))
        if m:
            return m[1]
    return None


def check_tag(
    tag: str, version: str | None, *, where: str, pattern: str = DEFAULT_TAG_PATTERN
) -> Version:
    """The version a release tag releases (group 1 of `pattern`, ci.tag_pattern: `v<version>`
    by default); PlanError unless the tag matches and the source declares that version."""
    m = re.fullmatch(pattern, tag)
    if m is None or not m.group(1):
        example = "v1.2.0" if pattern == DEFAULT_TAG_PATTERN else "a tag it matches"
        raise PlanError(
            f"tag {tag!r} is not a release tag: ci.tag_pattern is {pattern!r} (e.g. {example})"
        )
    try:
        tagged = Version(m.group(1))
    except InvalidVersion:
        raise PlanError(f"tag {tag!r}: {m.group(1)!r} is not a PEP 440 version") from None
    if tagged.local:
        raise PlanError(f"tag {tag!r}: a release version has no local label (+…)")
    if version is None:
        raise PlanError(
            f"tag {tag}: cannot read the project's version from {where} (no static version "
            "in pyproject.toml, setup.cfg, the package's __version__ or setup.py); set "
            'ci.version_file in matrix.yaml to the file that holds `__version__ = "…"`'
        )
    try:
        declared = Version(version)
    except InvalidVersion:
        raise PlanError(f"{where}: version {version!r} is not a PEP 440 version") from None
    if declared != tagged:
        raise PlanError(
            f"tag {tag} releases {tagged}, but {where} declares version {declared}; tag the "
            f"commit that declares it (v{declared}), or bump the version and tag again"
        )
    return tagged


def published_jobs(
    jobs: Sequence[BuildJob],
    *,
    project: str | None,
    version: Version,
    wheels: Sequence[IndexedWheel],
) -> dict[str, str]:
    """job id → the published wheel that already covers it: every cell of the job served
    (one rule with `plan --missing` and the backfill: `index.published.published_cells`), or
    inside the window of the stable-ABI wheel that serves the others (a smoke-only cell: the
    wheel is not built again, `window_cells`)."""
    if not project:
        return {}
    served = published_cells(jobs, project=project, version=version, wheels=wheels)
    served |= window_cells(jobs, project=project, version=version, wheels=wheels)
    return {
        job.id: served[job.cells[0].id]
        for job in jobs
        if job.cells and all(c.id in served for c in job.cells)
    }
