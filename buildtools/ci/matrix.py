"""`buildtools ci matrix`: the plan job of the generated workflows.

It plans a profile (optionally narrowed by `--only`, the `only` input of a manual run) and
hands GitHub Actions one matrix entry per BuildJob: the `--only` globs that select exactly
that job's cells, the `nox -s build` line a maintainer runs to reproduce it, the runner,
the Pythons to set up, a cache key over the job's toolchain, and a timeout. Smoke matrices
are the same entries split by accelerator family, for the families that have a runner.
"""

from __future__ import annotations

__all__ = [
    "MAX_MATRIX_JOBS",
    "MatrixEntry",
    "github_outputs",
    "job_globs",
    "matrix_entries",
    "summary_markdown",
]

import fnmatch
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import PlanError
from ..model import BuildJob
from ..planner import Plan
from . import layout

# GitHub Actions runs at most 256 jobs from one matrix.
MAX_MATRIX_JOBS = 256


@dataclass(frozen=True, kw_only=True)
class MatrixEntry:
    """One BuildJob as a GitHub Actions matrix entry (flat, strings and ints only)."""

    id: str
    family: str
    accelerator: str
    platform: str  # linux_x86_64 | linux_aarch64: an aarch64 build on an x86 runner is emulated
    cells: tuple[str, ...]
    runner: str | tuple[str, ...]
    smoke_runner: str | tuple[str, ...] | None
    python_versions: str  # setup-python's multi-line input; the last one runs nox
    only: tuple[str, ...]
    reproduce: str
    smoke: str
    cache_key: str
    cache_restore: str
    timeout: int

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "family": self.family,
            "accelerator": self.accelerator,
            "platform": self.platform,
            "cells": " ".join(self.cells),
            "runner": list(self.runner) if isinstance(self.runner, tuple) else self.runner,
            "python_versions": self.python_versions,
            "only": " ".join(self.only),
            "reproduce": self.reproduce,
            "smoke": self.smoke,
            "cache_key": self.cache_key,
            "cache_restore": self.cache_restore,
            "timeout": self.timeout,
        }


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


def _cache_key(job: BuildJob, ci_python: str) -> tuple[str, str]:
    payload = json.dumps(
        {"job": job.to_plan_json(), "buildtools": __version__, "python": ci_python}, sort_keys=True
    )
    digest = hashlib.sha256(payload.encode()).hexdigest()[:20]
    prefix = f"buildtools-{job.id}-"
    return prefix + digest, prefix


def matrix_entries(
    selected: Plan,
    full: Plan,
    *,
    profile: str,
    matrix: str,
    ci_python: str,
) -> list[MatrixEntry]:
    """One entry per job of `selected`; globs are checked against every cell of `full`."""
    current = [j.id for j in selected.jobs if j.torch_source == "current"]
    if current:
        raise PlanError(
            f"{', '.join(current)}: torch: current builds against the torch of one machine; "
            "a CI job cannot reproduce it. Keep `current` out of the CI profiles"
        )
    if len(selected.jobs) > MAX_MATRIX_JOBS:
        raise PlanError(
            f"profile {profile!r} plans {len(selected.jobs)} build jobs; GitHub Actions runs "
            f"at most {MAX_MATRIX_JOBS} from one matrix. Use `abi: abi3` or `abi: stable` "
            "(fewer builds), or a narrower profile"
        )
    universe = [c.id for c in full.cells]
    entries = []
    for job in selected.jobs:
        family = job.accelerator.kind
        only = job_globs(job, universe)
        key, restore = _cache_key(job, ci_python)
        pythons = [p for p in job.pythons if p != ci_python] + [ci_python]
        smoke_runner = job.smoke_runner
        entries.append(
            MatrixEntry(
                id=job.id,
                family=family,
                accelerator=job.accelerator.name,
                platform=job.platform,
                cells=job.cell_ids,
                runner=job.runner,
                smoke_runner=smoke_runner,
                python_versions="\n".join(pythons),
                only=only,
                reproduce=layout.join(layout.build_argv(matrix, profile, only)),
                smoke=layout.join(layout.smoke_argv(matrix, family)) if smoke_runner else "",
                cache_key=key,
                cache_restore=restore,
                timeout=layout.timeout_minutes(family),
            )
        )
    return entries


def _include(entries: Iterable[MatrixEntry]) -> str:
    return json.dumps(
        {"include": [e.to_json() for e in entries]}, sort_keys=True, separators=(",", ":")
    )


def github_outputs(entries: Sequence[MatrixEntry]) -> dict[str, str]:
    """The plan job's outputs: `build`, and `has_<family>` / `smoke_<family>` per family."""
    outputs = {"build": _include(entries), "jobs": str(len(entries))}
    for family in layout.FAMILIES:
        # the smoke-<family> jobs run on the x86 runners.smoke; aarch64 wheels need their own
        smoked = [
            e
            for e in entries
            if e.family == family and e.smoke_runner and e.platform == "linux_x86_64"
        ]
        outputs[f"has_{family}"] = "true" if smoked else "false"
        outputs[f"smoke_{family}"] = _include(smoked)
    for family in layout.FAMILIES:
        # smoke-<family>-aarch64 jobs: on runners.linux_aarch64.smoke (only where the plan has them)
        arm = [
            e
            for e in entries
            if e.family == family and e.smoke_runner and e.platform == "linux_aarch64"
        ]
        if arm:
            outputs[f"has_{family}-aarch64"] = "true"
            outputs[f"smoke_{family}-aarch64"] = _include(arm)
    return outputs


def _label(runner: str | tuple[str, ...] | None) -> str:
    if runner is None:
        return "-"
    return ", ".join(runner) if isinstance(runner, tuple) else runner


def summary_markdown(
    entries: Sequence[MatrixEntry], *, profile: str, matrix: str, only: Sequence[str]
) -> str:
    """The plan job's step summary: every job, where it runs, and how to reproduce it."""
    argv = ["nox", "-s", "plan", "--", *layout.matrix_args(matrix), "--profile", profile]
    for glob in only:
        argv += ["--only", glob]
    cells = sum(len(e.cells) for e in entries)
    lines = [
        f"## Plan: profile `{profile}`: {cells} cell(s) in {len(entries)} build job(s)",
        "",
        f"Locally: `{layout.join(argv)}`",
        "",
        "| job | cells | build runner | smoke runner | reproduce the build |",
        "|---|---|---|---|---|",
    ]
    for e in entries:
        smoke = f"`{_label(e.smoke_runner)}`" if e.smoke_runner else "none: not published"
        lines.append(
            f"| `{e.id}` | {', '.join(e.cells)} | `{_label(e.runner)}` | {smoke} | `{e.reproduce}` |"
        )
    unsmoked = sorted({e.family for e in entries if not e.smoke_runner})
    if unsmoked:
        lines += [
            "",
            "No smoke runner for "
            + ", ".join(f"`{f}` (`runners.smoke.{f}`)" for f in unsmoked)
            + " in matrix.yaml: those wheels are built and kept as artifacts, and "
            "`buildtools index --require-smoke` never publishes them.",
        ]
    return "\n".join(lines) + "\n"


def append_to(path: str | None, text: str) -> None:
    if path:
        with Path(path).open("a", encoding="utf-8") as fh:
            fh.write(text)


def write_outputs(path: str | None, outputs: Mapping[str, str]) -> None:
    """Append `name=value` lines to $GITHUB_OUTPUT (values are single-line JSON)."""
    for name, value in outputs.items():
        if "\n" in value:
            raise ValueError(f"output {name} spans lines")
    append_to(path, "".join(f"{name}={value}\n" for name, value in outputs.items()))
