"""Skip what is already built: a job whose fingerprint is on a wheel we have is not rebuilt.

The fingerprint of every job is computed before anything is created (the environment's key
needs only the job and one quick probe of the base interpreter), then looked up in the
build records of the wheelhouse's wheels and, when given, in a published site's
`index.json`. A hit is reported `skipped-unchanged` with that wheel; `--force` rebuilds.
`torch: current` jobs are always built: their torch can change in place under the same
version string.
"""

from __future__ import annotations

__all__ = [
    "PriorWheels",
    "Unchanged",
    "backend_inputs",
    "compute_fingerprints",
    "job_fingerprints",
    "skipped_results",
]

import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..backends.base import Backend
from ..context import RunContext
from ..errors import BuildtoolsError, PublishError
from ..files import sha256_file
from ..index.manifest import read_manifest
from ..index.pages import WHEELS_DIR
from ..model import BuildJob
from ..process import ProcessRunner
from ..toolchain.prepare import toolchain_identity
from ..wheel.meta import read_build_record
from .build_report import CellResult, Status
from .fingerprint import fingerprint_inputs, job_fingerprint, source_fingerprint
from .options import BuildOptions

if TYPE_CHECKING:
    from ..planner import Plan


@dataclass(frozen=True, kw_only=True)
class Unchanged:
    """A wheel already built from the same fingerprint."""

    wheel: str  # a path in the wheelhouse or the site, or the wheel's URL
    sha256: str
    size: int
    where: str  # "wheelhouse" or "index"


def job_fingerprints(
    jobs: Sequence[BuildJob],
    *,
    sources: str,
    toolchain: Callable[[BuildJob], Mapping[str, Any] | None],
    backend: Callable[[BuildJob], Mapping[str, str]],
    host_env: Mapping[str, str],
) -> dict[str, str | None]:
    """job id → fingerprint, or None where the job has none (`torch: current`).

    `toolchain(job)` gives the key fields of the job's environment (None: not knowable
    before the build); `backend(job)` what the backend adds (its name, builder image).
    """
    out: dict[str, str | None] = {}
    for job in jobs:
        fields = None if job.torch_source == "current" else toolchain(job)
        if fields is None:
            out[job.id] = None
            continue
        inputs = fingerprint_inputs(
            job, sources=sources, toolchain=fields, backend=backend(job), host_env=host_env
        )
        out[job.id] = job_fingerprint(inputs)
    return out


class PriorWheels:
    """The wheels a run may reuse: the wheelhouse's and a published site's (read once)."""

    def __init__(self, wheelhouse: Path, *, index_site: Path | None = None) -> None:
        self.wheelhouse = wheelhouse
        self.index_site = index_site
        self._local: dict[str, Path] | None = None
        self._published: dict[str, Unchanged] | None = None

    def _scan_wheelhouse(self) -> dict[str, Path]:
        found: dict[str, Path] = {}
        for wheel in sorted(self.wheelhouse.glob("*.whl")) if self.wheelhouse.is_dir() else ():
            try:
                record = read_build_record(wheel)
            except (OSError, ValueError, KeyError, zipfile.BadZipFile):  # unreadable: no candidate
                continue
            if record is not None and record.fingerprint:
                found[record.fingerprint] = wheel
        return found

    def _scan_site(self) -> dict[str, Unchanged]:
        if self.index_site is None:
            return {}
        try:
            manifest = read_manifest(self.index_site)
        except PublishError:
            return {}
        return {
            w.fingerprint: Unchanged(
                wheel=w.url or str(self.index_site / WHEELS_DIR / w.filename),
                sha256=w.sha256,
                size=w.size,
                where="index",
            )
            for w in manifest.wheels
            if w.fingerprint
        }

    def find(self, fingerprint: str | None) -> Unchanged | None:
        """The wheel built from `fingerprint`: the wheelhouse's first, then the site's."""
        if not fingerprint:
            return None
        if self._local is None:
            self._local = self._scan_wheelhouse()
        wheel = self._local.get(fingerprint)
        if wheel is not None and wheel.is_file():
            return Unchanged(
                wheel=str(wheel),
                sha256=sha256_file(wheel),
                size=wheel.stat().st_size,
                where="wheelhouse",
            )
        if self._published is None:
            self._published = self._scan_site()
        return self._published.get(fingerprint)


def backend_inputs(backend: Backend, job: BuildJob) -> dict[str, str]:
    """What the backend adds to a job's fingerprint: its name, and a builder image's tag
    (which hashes the Dockerfile, the pins and the base)."""
    inputs = {"backend": backend.name}
    image_for: Callable[[BuildJob], Any] | None = getattr(backend, "image_for", None)
    if image_for is not None:
        inputs["image"] = str(image_for(job).tag)
    return inputs


def compute_fingerprints(
    plan: Plan, *, opts: BuildOptions, backend: Backend, runner: ProcessRunner, log: IO[str]
) -> dict[str, str | None]:
    """Every job's fingerprint, without creating any environment (one probe of each base
    interpreter: the environment's key)."""
    extras: dict[str, dict[str, str]] = {}
    for job in plan.jobs:
        try:
            extras[job.id] = backend_inputs(backend, job)
        except (BuildtoolsError, OSError) as exc:  # no fingerprint: the job is built
            log.write(f"{job.id}: no fingerprint: {exc}\n")

    def toolchain(job: BuildJob) -> Mapping[str, Any] | None:
        if job.id not in extras:
            return None
        try:
            ident = toolchain_identity(
                job,
                job.build_python,
                ctx=RunContext(processes=runner, env=opts.env, log=log),
                cuda_home=opts.cuda_home,
                with_toolkit=backend.needs_host_toolkit,
            )
        except BuildtoolsError as exc:  # the build names it properly; no skip
            log.write(f"{job.id}: no fingerprint: {exc}\n")
            return None
        return ident.fields

    return job_fingerprints(
        plan.jobs,
        sources=source_fingerprint(opts.project_dir),
        toolchain=toolchain,
        backend=lambda job: extras[job.id],
        host_env=opts.env,
    )


def skipped_results(job: BuildJob, prior: Unchanged, log_dir: Path) -> list[CellResult]:
    """The report of a skipped job: the existing wheel, and the log of the build that made it."""
    log = log_dir / f"{job.id}.log"
    return [
        CellResult(
            cell=cell.id,
            job=job.id,
            status=Status.SKIPPED_UNCHANGED,
            wheel=prior.wheel,
            sha256=prior.sha256,
            size=prior.size,
            log=str(log) if log.is_file() else None,
            reason=f"unchanged: the {prior.where} has a wheel with this job's fingerprint "
            "(--force rebuilds)",
        )
        for cell in job.cells
    ]
