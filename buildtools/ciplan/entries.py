"""`buildtools ci matrix`: each BuildJob of a plan as a GitHub Actions matrix entry.

One entry per BuildJob: the `--only` globs that select exactly that job's cells, the `nox
-s build` line a maintainer runs to reproduce it, the build and smoke runners (and whether
each is GitHub-hosted), the Pythons to set up, the cache keys of its downloads, compiler
cache and builder image, and a timeout. Which entries a workflow runs, split per family
and into matrices of at most 256, is `ciplan.shapes`.
"""

from __future__ import annotations

__all__ = [
    "BUILD_KEYS",
    "IMAGE_KEYS",
    "MAX_MATRIX_JOBS",
    "PREFETCH_KEYS",
    "SMOKE_KEYS",
    "MatrixEntry",
    "job_globs",
    "matrix_entries",
]

import fnmatch
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import PlanError
from ..model import BuildJob, python_tag
from ..planner import Plan
from . import layout
from .cachekeys import build_keys, image_recipe, image_tag, prefetch_group
from .labels import family_of, is_hosted, runner_label, smoke_group

# GitHub Actions runs at most 256 jobs from one matrix.
MAX_MATRIX_JOBS = layout.MAX_MATRIX_JOBS


@dataclass(frozen=True, kw_only=True)
class MatrixEntry:
    """One BuildJob as a GitHub Actions matrix entry (flat, strings, ints and booleans)."""

    id: str
    family: str
    accelerator: str
    platform: str  # linux_x86_64 | linux_aarch64 (on an x86 runner: built under QEMU)
    torch: str
    cells: tuple[str, ...]
    runner: str | tuple[str, ...]
    smoke_runner: str | tuple[str, ...] | None
    build_hosted: bool
    smoke_hosted: bool
    python_versions: str  # setup-python's multi-line input; the last one runs nox
    only: tuple[str, ...]
    reproduce: str
    smoke: str
    timeout: int
    local: str  # the wheel's local version label
    python_tag: str  # cp312, or '' for one wheel of several Pythons (abi3, stable)
    prefetch_key: str
    prefetch_restore: str
    ccache_key: str
    ccache_path: str
    image: str
    image_key: str
    image_file: str
    recipe: str = ""  # what decides the builder image (`keys.image_recipe`)

    def to_json(self) -> dict[str, Any]:
        def label(value: str | tuple[str, ...] | None) -> str | list[str] | None:
            return list(value) if isinstance(value, tuple) else value

        return {
            "id": self.id,
            "family": self.family,
            "accelerator": self.accelerator,
            "platform": self.platform,
            "smoke_group": self.smoke_group,
            "torch": self.torch,
            "cells": " ".join(self.cells),
            "runner": label(self.runner),
            "smoke_runner": label(self.smoke_runner),
            "build_hosted": self.build_hosted,
            "smoke_hosted": self.smoke_hosted,
            "python_versions": self.python_versions,
            "only": " ".join(self.only),
            "reproduce": self.reproduce,
            "smoke": self.smoke,
            "timeout": self.timeout,
            "local": self.local,
            "python_tag": self.python_tag,
            "prefetch_key": self.prefetch_key,
            "prefetch_restore": self.prefetch_restore,
            "ccache_key": self.ccache_key,
            "ccache_path": self.ccache_path,
            "image": self.image,
            "image_key": self.image_key,
            "image_file": self.image_file,
            "recipe": self.recipe,
        }

    @property
    def smoke_group(self) -> str:
        """Which smoke jobs test this entry's wheels: `cuda` or `cuda-aarch64`."""
        return smoke_group(self.family, self.platform)

    def view(self, keys: tuple[str, ...]) -> dict[str, Any]:
        """The fields one job reads: a job's outputs are capped (1 MB), so matrices carry
        only these; the plan artifact keeps the whole entry."""
        whole = self.to_json()
        return {k: whole[k] for k in keys}


# What each job of the workflows reads from its matrix entry.
BUILD_KEYS = (
    "id",
    "family",
    "platform",
    "runner",
    "timeout",
    "python_versions",
    "only",
    "reproduce",
    "prefetch_key",
    "prefetch_restore",
    "ccache_key",
    "ccache_path",
    "image",
    "image_key",
    "image_file",
)
SMOKE_KEYS = ("id", "family", "python_versions", "reproduce", "smoke")
IMAGE_KEYS = ("id", "family", "runner", "only", "image", "image_key", "image_file")
PREFETCH_KEYS = ("id", "python_versions", "prefetch_key")


def job_globs(job: BuildJob, universe: Iterable[str]) -> tuple[str, ...]:
    """`--only` globs that select exactly the job's cells among `universe` (the profile's).

    One cell: its id. Several (abi3, stable): one glob with `*` where the ids differ
    (`torch2.13.0-cu130-*`) when it selects no other cell, else every id.
    """
    ids = job.cell_ids
    if len(ids) == 1:
        return ids
    parts = [cid.split("-") for cid in ids]
    if len({len(p) for p in parts}) == 1:
        glob = "-".join(
            p0 if all(p[i] == p0 for p in parts) else "*" for i, p0 in enumerate(parts[0])
        )
        if {c for c in universe if fnmatch.fnmatchcase(c, glob)} == set(ids):
            return (glob,)
    return ids


def _group_pythons(full: Plan, build_requires: Sequence[str]) -> dict[str, set[str]]:
    groups: dict[str, set[str]] = defaultdict(set)
    for job in full.jobs:
        groups[prefetch_group(job, build_requires)].update(job.pythons)
    return groups


def matrix_entries(  # noqa: PLR0913
    selected: Plan,
    full: Plan,
    *,
    profile: str,
    matrix: str,
    ci_python: str,
    hosted: Collection[str],
    env: Mapping[str, str] | None = None,
    build_requires: Sequence[str] = (),
) -> list[MatrixEntry]:
    """One entry per job of `selected`; globs are checked against every cell of `full`.

    `hosted`: the GitHub-hosted runner labels; `env` locates the builder Dockerfiles (for
    the image tags; none: no image is shared between jobs); `build_requires`: the project's
    own build requirements (in the download groups' keys).
    """
    current = [j.id for j in selected.jobs if j.torch_source == "current"]
    if current:
        raise PlanError(
            f"{', '.join(current)}: torch: current builds against the torch of one machine; "
            "a CI job cannot reproduce it. Keep `current` out of the CI profiles"
        )
    universe = [c.id for c in full.cells]
    groups = _group_pythons(full, build_requires)
    entries = []
    for job in selected.jobs:
        family = family_of(job)
        only = job_globs(job, universe)
        pythons = [p for p in job.pythons if p != ci_python] + [ci_python]
        smoke_runner = job.smoke_runner
        image = image_tag(job, env) if env is not None else ""
        group = groups[prefetch_group(job, build_requires)]
        keys = build_keys(job, group_pythons=group, image=image, build_requires=build_requires)
        entries.append(
            MatrixEntry(
                id=job.id,
                family=family,
                accelerator=job.accelerator.name,
                platform=job.platform,
                torch=job.torch,
                cells=job.cell_ids,
                runner=job.runner,
                smoke_runner=smoke_runner,
                build_hosted=is_hosted(runner_label(job.runner), hosted),
                smoke_hosted=smoke_runner is not None
                and is_hosted(runner_label(smoke_runner), hosted),
                python_versions="\n".join(pythons),
                only=only,
                reproduce=layout.join(layout.build_argv(matrix, profile, only)),
                smoke=layout.join(layout.smoke_argv(matrix, family)) if smoke_runner else "",
                timeout=layout.timeout_minutes(family),
                local=job.local_version,
                python_tag=python_tag(job.pythons[0]) if job.abi == "per-python" else "",
                prefetch_key=keys.prefetch,
                prefetch_restore=keys.prefetch_restore,
                ccache_key=keys.ccache,
                ccache_path=keys.ccache_path,
                image=keys.image,
                image_key=keys.image_key,
                image_file=keys.image_file,
                recipe=image_recipe(job),
            )
        )
    return entries
