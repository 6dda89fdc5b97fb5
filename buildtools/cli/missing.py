"""`buildtools plan --missing SITE`: the cells the matrix promises that SITE has no wheel for.

The site is a directory or URL `buildtools index` made (its `index.json` is the record of
what is published); the project's version is read from its source (as a release's plan
job reads it), or given with `--project-version`. The plan keeps only the missing cells,
so `--format json` is the Actions matrix of exactly what a backfill builds. A cell inside a
published stable-ABI wheel's window that its record does not name yet (a torch released
after the wheel) is neither: it needs that wheel's smoke run, not a build (`smoke_only`).
"""

from __future__ import annotations

__all__ = ["MissingReport", "missing_plan", "read_site"]

import argparse
import dataclasses
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..cisteps.tagcheck import project_version
from ..errors import NetworkError, PlanError
from ..http import Http, UrllibHttp
from ..index.manifest import MANIFEST_NAME, Manifest, read_manifest
from ..index.published import published_cells, window_cells
from ..matrix.config import load_matrix
from ..planner import Plan
from ..planning import PlanRequest, default_matrix_path, load_plan
from .common import plan_request

_MAX_MANIFEST = 256 << 20


@dataclass(frozen=True, kw_only=True)
class MissingReport:
    """What `--missing` compared: the site, the version, the cells already published."""

    site: str
    version: str
    published: tuple[tuple[str, str], ...]  # (cell id, wheel file name)
    # (cell id, the window wheel whose smoke run on the cell's torch would publish it)
    smoke_only: tuple[tuple[str, str], ...] = ()


def read_site(site: str, *, http: Http | None = None) -> Manifest:
    """The `index.json` of a site directory or URL (empty for a new, empty directory)."""
    scheme = urllib.parse.urlsplit(site).scheme
    if scheme in ("http", "https", "file"):
        url = site.rstrip("/") + "/" + MANIFEST_NAME
        try:
            body = (http or UrllibHttp()).get(url, max_bytes=_MAX_MANIFEST).body
        except NetworkError as exc:
            raise NetworkError(
                f"--missing {site}: cannot read its {MANIFEST_NAME} ({exc}); a site made by "
                "`buildtools index` has one at its root"
            ) from None
        with tempfile.TemporaryDirectory(prefix="bt-site-") as tmp:
            (Path(tmp) / MANIFEST_NAME).write_bytes(body)
            return read_manifest(Path(tmp))
    path = Path(site)
    if not path.is_dir():
        raise PlanError(f"--missing {site}: not a directory or an http(s) URL of a site")
    return read_manifest(path)


def _version(
    args: argparse.Namespace, project_dir: Path, name: str | None, vfile: str | None
) -> Version:
    text = args.project_version or project_version(project_dir, name=name, version_file=vfile)
    if text is None:
        raise PlanError(
            f"--missing: cannot read the project's version from {project_dir} (no static "
            "version in pyproject.toml, setup.cfg, __version__ or setup.py); pass "
            "--project-version or set ci.version_file in matrix.yaml"
        )
    try:
        return Version(text)
    except InvalidVersion:
        raise PlanError(f"--missing: version {text!r} is not a PEP 440 version") from None


def missing_plan(
    args: argparse.Namespace, *, http: Http | None = None
) -> tuple[Plan, Path, MissingReport]:
    """The plan of the options, narrowed to the cells SITE lacks at the project's version."""
    request: PlanRequest = plan_request(args)
    full, project_dir = load_plan(request, http=http)
    mf = load_matrix(request.matrix or default_matrix_path())
    name = mf.matrix.project.name
    if not name:
        raise PlanError(
            f"{mf.source.where(('project',))}: project.name: --missing compares wheel names, "
            "so the project needs its distribution name here"
        )
    version = _version(args, project_dir, name, mf.matrix.ci.version_file)
    manifest = read_site(args.missing, http=http)
    wheels, runs = manifest.wheels, manifest.smoke
    published = published_cells(full.jobs, project=name, version=version, wheels=wheels, runs=runs)
    inside = window_cells(full.jobs, project=name, version=version, wheels=wheels, runs=runs)
    missing = [c.id for c in full.cells if c.id not in published and c.id not in inside]
    report = MissingReport(
        site=args.missing,
        version=str(version),
        published=tuple(sorted(published.items())),
        smoke_only=tuple(sorted(inside.items())),
    )
    if not missing:
        empty = dataclasses.replace(full, cells=(), jobs=())
        return empty, project_dir, report
    narrowed, _ = load_plan(dataclasses.replace(request, only=tuple(missing)), http=http)
    return narrowed, project_dir, report
