"""Which matrix entries each generated workflow runs, per family, in matrices of 256.

- `release`: every job, except a family without a smoke runner (built only when asked:
  `ci.unsmoked: build` or the dispatch input) and a job whose wheel is already published;
  smoke tests for each family with a smoke runner; one image job per builder recipe.
- `pull-request` (a fork can edit it): only jobs on GitHub-hosted runners, builds and smoke
  tests alike.
- `self-hosted` (after a pull request's run, from the default branch, never for a fork):
  the builds on self-hosted runners, and the smoke tests on them (of the wheels built here,
  or of the pull request run's hosted builds).
- `caches` (scheduled on the default branch): one download job per torch × accelerator ×
  toolkit pins, one image job per builder recipe.

A family whose jobs outgrow one matrix gets several numbered jobs (`build-cuda-1`, …): the
generated workflow has as many as the profile's plan needs (`Shape`, computed when the
workflow is generated), and a plan that needs more at run time stops with the remedy.
"""

from __future__ import annotations

__all__ = [
    "RunPlan",
    "Shape",
    "assignments",
    "github_outputs",
    "select",
    "shape_of",
    "summary_markdown",
]

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import PlanError
from . import layout
from .entries import BUILD_KEYS, IMAGE_KEYS, PREFETCH_KEYS, SMOKE_KEYS, MatrixEntry
from .labels import group_family

# GitHub caps a job's outputs at 1 MB: the plan job's matrices stay well below.
MAX_OUTPUTS_BYTES = 900_000

RUN = "run"  # smoke tests of wheels built in this run
PULL_REQUEST = "pull-request"  # … of wheels the pull request's run built


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """What one run of a workflow does, and what it leaves out (with why)."""

    kind: str
    build: tuple[MatrixEntry, ...] = ()
    smoke: tuple[tuple[MatrixEntry, str], ...] = ()  # (entry, where its wheels come from)
    images: tuple[MatrixEntry, ...] = ()  # one entry per builder recipe
    prefetch: tuple[MatrixEntry, ...] = ()  # one entry per download group
    skipped: tuple[tuple[str, str], ...] = ()  # (job id, why it is not built here)
    order: tuple[MatrixEntry, ...] = ()  # every entry considered, in plan order


@dataclass(frozen=True, kw_only=True)
class Shape:
    """The jobs of a generated workflow: per family, its number of matrices (chunks)."""

    kind: str
    chunks: Mapping[str, int] = field(default_factory=dict)
    build: tuple[str, ...] = ()  # families with build jobs
    smoke: tuple[str, ...] = ()  # smoke groups with smoke jobs: `cuda`, `cuda-aarch64`
    # the images job of a release (and of caches.yml) outputs one image ID and archive
    # digest per builder recipe: `image_1` … `image_N`
    images: int = 0
    # the release's build jobs output what each leg built (`wheels_<leg>`): legs per matrix
    legs: Mapping[str, int] = field(default_factory=dict)

    def build_jobs(self, family: str) -> list[str]:
        return layout.chunk_jobs("build", family, self.chunks[family])

    def smoke_jobs(self, group: str) -> list[str]:
        """The smoke jobs of a group, one per matrix of its family's builds."""
        return layout.chunk_jobs("smoke", group, self.chunks[group_family(group)])

    def arg(self) -> str:
        """The plan job's `--shape`: `cpu=1,cuda=2;build=cpu,cuda;smoke=cuda`."""
        chunks = ",".join(f"{f}={n}" for f, n in self.chunks.items())
        text = f"{chunks};build={','.join(self.build)};smoke={','.join(self.smoke)}"
        if self.images:
            text += f";images={self.images}"
        if self.legs:
            text += ";legs=" + ",".join(f"{f}:{n}" for f, n in self.legs.items())
        return text

    @classmethod
    def parse(cls, kind: str, text: str) -> Shape:
        """The shape the plan job's workflow was generated with (its `--shape`)."""
        parts = text.split(";")
        images, legs = 0, {}
        while len(parts) > 3 and parts[-1].startswith(("images=", "legs=")):
            key, _, value = parts.pop().partition("=")
            if key == "images" and value.isdigit():
                images = int(value)
                continue
            for item in filter(None, value.split(",")):
                family, _, n = item.partition(":")
                if family not in layout.FAMILIES or not n.isdigit():
                    raise PlanError(f"--shape: legs {item!r} is not FAMILY:N")
                legs[family] = int(n)
        if (
            len(parts) != 3
            or not parts[1].startswith("build=")
            or not parts[2].startswith("smoke=")
        ):
            raise PlanError(
                f"--shape {text!r}: expected "
                "CHUNKS;build=FAMILIES;smoke=FAMILIES[;images=N][;legs=FAMILY:N,…]"
            )
        chunks = {}
        for part in filter(None, parts[0].split(",")):
            family, _, n = part.partition("=")
            if family not in layout.FAMILIES or not n.isdigit() or int(n) < 1:
                raise PlanError(f"--shape: {part!r} is not FAMILY=N")
            chunks[family] = int(n)
        build = tuple(filter(None, parts[1].removeprefix("build=").split(",")))
        smoke = tuple(filter(None, parts[2].removeprefix("smoke=").split(",")))
        if not set(build) | {group_family(g) for g in smoke} <= set(chunks):
            raise PlanError(f"--shape {text!r}: a family without its number of matrices")
        return cls(kind=kind, chunks=chunks, build=build, smoke=smoke, images=images, legs=legs)


def _uniq(entries: Iterable[MatrixEntry], key: str) -> tuple[MatrixEntry, ...]:
    seen: dict[str, MatrixEntry] = {}
    for entry in entries:
        value = getattr(entry, key)
        if value and value not in seen:
            seen[value] = entry
    return tuple(seen.values())


def select(
    entries: Sequence[MatrixEntry],
    kind: str,
    *,
    unsmoked: bool = False,
    published: Mapping[str, str] | None = None,
) -> RunPlan:
    """The entries `kind` (a workflow of `layout.WORKFLOW_KINDS`) runs, and why not the rest."""
    published = published or {}
    build: list[MatrixEntry] = []
    smoke: list[tuple[MatrixEntry, str]] = []
    skipped: list[tuple[str, str]] = []
    if kind == layout.CACHES_NAME:
        return RunPlan(
            kind=kind,
            images=_uniq(entries, "image"),
            prefetch=_uniq(entries, "prefetch_key"),
            order=tuple(entries),
        )
    for e in entries:
        if kind == layout.RELEASE_NAME:
            if e.id in published:
                skipped.append((e.id, f"already published as {published[e.id]}"))
            elif e.smoke_runner is None and not unsmoked:
                table = "linux_aarch64.smoke" if e.platform == "linux_aarch64" else "smoke"
                skipped.append(
                    (
                        e.id,
                        f"no runners.{table}.{e.family}: not built for a release (run the "
                        "workflow by hand with `unsmoked` to build it, kept as an artifact)",
                    )
                )
            else:
                build.append(e)
                if e.smoke_runner is not None:
                    smoke.append((e, RUN))
        elif kind == layout.PR_NAME:
            if not e.build_hosted:
                skipped.append(
                    (e.id, "self-hosted build runner: built by self-hosted.yml (not for forks)")
                )
                continue
            build.append(e)
            if e.smoke_runner is not None and e.smoke_hosted:
                smoke.append((e, RUN))
            elif e.smoke_runner is not None:
                skipped.append((e.id, "smoke-tested by self-hosted.yml (not for forks)"))
        elif kind == layout.SELF_HOSTED_NAME:
            if not e.build_hosted:
                build.append(e)
            if e.smoke_runner is not None and not (e.build_hosted and e.smoke_hosted):
                smoke.append((e, RUN if not e.build_hosted else PULL_REQUEST))
        else:
            raise PlanError(
                f"--workflow {kind!r}: expected one of {', '.join(layout.WORKFLOW_KINDS)}"
            )
    images = _uniq(build, "image") if kind == layout.RELEASE_NAME else ()
    return RunPlan(
        kind=kind,
        build=tuple(build),
        smoke=tuple(smoke),
        images=images,
        skipped=tuple(skipped),
        order=tuple(entries),
    )


def _family_rows(selection: RunPlan, family: str) -> list[MatrixEntry]:
    built = {e.id for e in selection.build}
    smoked = {e.id for e, _ in selection.smoke}
    return [e for e in selection.order if e.family == family and e.id in built | smoked]


def shape_of(entries: Sequence[MatrixEntry], kind: str) -> Shape:
    """The jobs a workflow of `kind` needs for every entry of its profile (when generated)."""
    most = select(entries, kind, unsmoked=True)
    chunks: dict[str, int] = {}
    build, smoke = [], []
    for family in layout.FAMILIES:
        rows = _family_rows(most, family)
        if not rows:
            continue
        chunks[family] = math.ceil(len(rows) / layout.MAX_MATRIX_JOBS)
        if any(e.family == family for e in most.build):
            build.append(family)
        for group in (family, f"{family}-aarch64"):
            if any(e.smoke_group == group for e, _ in most.smoke):
                smoke.append(group)
    for what, items in (("builder images", most.images), ("download groups", most.prefetch)):
        if len(items) > layout.MAX_MATRIX_JOBS:
            raise PlanError(
                f"{len(items)} {what}: more than one GitHub Actions matrix holds "
                f"({layout.MAX_MATRIX_JOBS}); split matrix.yaml into several files"
            )
    release = kind == layout.RELEASE_NAME
    recipes = {e.recipe for e in most.build} if release else set()
    if kind == layout.CACHES_NAME:  # one image per recipe (their tags are known at run time)
        recipes = {e.recipe for e in entries}
    legs = {
        f: min(layout.MAX_MATRIX_JOBS, sum(e.family == f for e in most.build))
        for f in build
        if release
    }
    return Shape(
        kind=kind,
        chunks=chunks,
        build=tuple(build),
        smoke=tuple(smoke),
        images=len(recipes),
        legs=legs,
    )


def _include(rows: Iterable[dict[str, Any]]) -> str:
    return json.dumps({"include": list(rows)}, sort_keys=True, separators=(",", ":"))


def assignments(
    selection: RunPlan, shape: Shape, *, regenerate: str
) -> dict[str, list[dict[str, Any]]]:
    """job name → its matrix entries (every job of the shape, empty ones included).

    `regenerate` is the command that regenerates the workflows: the remedy when this plan
    does not fit the workflow (a family it has no job for, or more than its matrices hold).
    """
    sources = {e.id: src for e, src in selection.smoke}
    built = {e.id for e in selection.build}
    jobs: dict[str, list[dict[str, Any]]] = {}
    # the images job hands each image on by slot (its outputs image_<n>, archive_<n>)
    slots = {e.image: n for n, e in enumerate(selection.images, 1)}
    if selection.kind in (layout.RELEASE_NAME, layout.CACHES_NAME) and len(slots) > shape.images:
        raise PlanError(
            f"this plan does not fit the workflow it runs in ({len(slots)} builder images, "
            f"{shape.images} image outputs): the workflow was generated from another "
            f"matrix.yaml; regenerate it (`{regenerate}`) and commit it"
        )

    def build_row(e: MatrixEntry) -> dict[str, Any]:
        row = e.view(BUILD_KEYS)
        if selection.kind == layout.RELEASE_NAME:
            row["image_slot"] = slots.get(e.image, 0)
        return row

    for family in layout.FAMILIES:
        rows = _family_rows(selection, family)
        have = shape.chunks.get(family, 0)
        need = math.ceil(len(rows) / layout.MAX_MATRIX_JOBS)
        lacking = [
            kind
            for kind, ids, families in (
                ("build", built, shape.build),
                ("smoke", set(sources), {group_family(g) for g in shape.smoke}),
            )
            if family not in families and any(e.id in ids for e in rows)
        ]
        lacking += [
            f"smoke-{e.smoke_group}"
            for e in rows
            if e.id in sources and e.smoke_group not in shape.smoke
        ][:1]
        if need > have or lacking:
            what = (
                f"no {'/'.join(lacking)} job for {family}"
                if lacking
                else f"{len(rows)} {family} jobs need {need} matrices of at most "
                f"{layout.MAX_MATRIX_JOBS}, but it has {have}"
            )
            raise PlanError(
                f"this plan does not fit the workflow it runs in ({what}): the workflow was "
                f"generated from another matrix.yaml; regenerate it (`{regenerate}`) and "
                "commit it"
            )
        for i in range(have):
            part = rows[i * layout.MAX_MATRIX_JOBS : (i + 1) * layout.MAX_MATRIX_JOBS]
            if family in shape.build:
                rows_built = [build_row(e) for e in part if e.id in built]
                declared = shape.legs.get(family, layout.MAX_MATRIX_JOBS)
                if selection.kind == layout.RELEASE_NAME and len(rows_built) > declared:
                    raise PlanError(
                        f"this plan does not fit the workflow it runs in ({len(rows_built)} "
                        f"{family} builds, {declared} wheel outputs): the workflow was "
                        f"generated from another matrix.yaml; regenerate it (`{regenerate}`) "
                        "and commit it"
                    )
                jobs[shape.build_jobs(family)[i]] = rows_built
            for group in (g for g in shape.smoke if group_family(g) == family):
                jobs[shape.smoke_jobs(group)[i]] = [
                    {**e.view(SMOKE_KEYS), "wheels_from": sources[e.id]}
                    for e in part
                    if e.id in sources and e.smoke_group == group
                ]
    if selection.kind in (layout.RELEASE_NAME, layout.CACHES_NAME):
        jobs["images"] = [
            {**e.view(IMAGE_KEYS), "image_slot": n} for n, e in enumerate(selection.images, 1)
        ]
    if selection.kind == layout.CACHES_NAME:
        jobs["prefetch"] = [e.view(PREFETCH_KEYS) for e in selection.prefetch]
    return jobs


def github_outputs(
    jobs: Mapping[str, list[dict[str, Any]]],
    *,
    build_count: int,
    flags: Mapping[str, bool] | None = None,
) -> dict[str, str]:
    """The plan job's outputs: each job's matrix and `run_<job>` flag, and `flags`' values."""
    outputs: dict[str, str] = {}
    for job, rows in jobs.items():
        outputs[layout.output_name(job)] = _include(rows)
        outputs[layout.run_flag(job)] = "true" if rows else "false"
    for name, value in (flags or {}).items():
        outputs[layout.run_flag(name)] = "true" if value else "false"
    outputs["jobs"] = str(build_count)
    size = sum(len(k) + len(v) for k, v in outputs.items())
    if size > MAX_OUTPUTS_BYTES:
        raise PlanError(
            f"the plan's matrices take {size} bytes of job outputs; GitHub keeps at most 1 MB "
            "per job: split matrix.yaml into several files (e.g. one per accelerator family), "
            "each with its own workflows"
        )
    return outputs


def _label(runner: str | tuple[str, ...] | None) -> str:
    if runner is None:
        return "-"
    return ", ".join(runner) if isinstance(runner, tuple) else runner


def summary_markdown(
    selection: RunPlan,
    *,
    profile: str,
    matrix: str,
    only: Sequence[str],
    notes: Sequence[str] = (),
) -> str:
    """The plan job's step summary: every job, where it runs, how to reproduce it, and why
    the others are not built in this run."""
    argv = ["nox", "-s", "plan", "--", *layout.matrix_args(matrix), "--profile", profile]
    for glob in only:
        argv += ["--only", glob]
    cells = sum(len(e.cells) for e in selection.build)
    smoked = {e.id: src for e, src in selection.smoke}
    lines = [
        f"## Plan ({selection.kind}): profile `{profile}`: {cells} cell(s) in "
        f"{len(selection.build)} build job(s)",
        "",
        f"Locally: `{layout.join(argv)}`",
        "",
    ]
    if selection.build or selection.smoke:
        lines += [
            "| job | cells | build runner | smoke runner | reproduce the build |",
            "|---|---|---|---|---|",
        ]
        for e in selection.order:
            if e.id not in smoked and e not in selection.build:
                continue
            if e.smoke_runner is None:
                smoke = "none: not published"
            elif e.id in smoked:
                smoke = f"`{_label(e.smoke_runner)}`"
            else:
                smoke = f"`{_label(e.smoke_runner)}` (not in this workflow)"
            build = f"`{_label(e.runner)}`" if e in selection.build else "(the pull request's run)"
            lines.append(
                f"| `{e.id}` | {', '.join(e.cells)} | {build} | {smoke} | `{e.reproduce}` |"
            )
    for title, items in (
        ("Builder images", [e.image for e in selection.images]),
        ("Download groups", [e.prefetch_key for e in selection.prefetch]),
    ):
        if items:
            lines += ["", f"{title}: " + ", ".join(f"`{i}`" for i in items)]
    if selection.skipped:
        lines += ["", "Not built in this run:", ""]
        lines += [f"- `{job}`: {why}" for job, why in selection.skipped]
    if notes:
        lines += ["", *[f"- {note}" for note in notes]]
    unsmoked = sorted({e.family for e in selection.build if e.smoke_runner is None})
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
    """Append to $GITHUB_STEP_SUMMARY (or any file); nothing without a path."""
    if path:
        with Path(path).open("a", encoding="utf-8") as fh:
            fh.write(text)


def write_outputs(path: str | None, outputs: Mapping[str, str]) -> None:
    """Append `name=value` lines to $GITHUB_OUTPUT (values are single-line JSON)."""
    for name, value in outputs.items():
        if "\n" in value:
            raise ValueError(f"output {name} spans lines")
    append_to(path, "".join(f"{name}={value}\n" for name, value in outputs.items()))
