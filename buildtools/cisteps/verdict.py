"""`buildtools ci status`: the one required check, and the run's final summary.

It runs last, whatever happened (`if: always()`), and reads: the results of every job
(`toJSON(needs)`), the plan's outputs (which job had work: `run_<job>`), the plan's entries
(each build job's reproduce commands), the build and smoke reports and the selection of
the publish job. It prints what was published, what was held back and why, and what failed,
each with the command that reproduces it, and fails when any job failed or was cancelled,
or did not run although it had work: a skipped publish or index preview never passes.
"""

from __future__ import annotations

__all__ = ["JobVerdict", "RunStatus", "read_entries", "run_status", "status_markdown"]

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..ciplan import layout
from ..errors import PublishError
from ..files import read_regular
from ..jsonfields import JSON_MAX_BYTES, decode_json
from .assets import ReleaseWheels, read_selection

ENTRIES_SCHEMA = "torch-buildtools/ci-plan/v1"
# jobs whose work flag is another job's: both PyPI jobs run when the plan sets run_pypi,
# prepare and pages with publish, push-images (a registry's) with images
_FLAG_OF = {"pypi-dist": "pypi", "pages": "publish", "prepare": "publish", "push-images": "images"}


@dataclass(frozen=True, kw_only=True)
class JobVerdict:
    job: str
    result: str  # success | failure | cancelled | skipped
    expected: bool  # the plan gave it work
    ok: bool
    why: str


@dataclass(frozen=True, kw_only=True)
class RunStatus:
    workflow: str
    jobs: tuple[JobVerdict, ...]
    published: tuple[str, ...]
    held_back: tuple[tuple[str, str, str], ...]  # (wheel, job, reason)
    failed: tuple[tuple[str, str, str], ...]  # (job id, what, reproduce)
    not_run: tuple[tuple[str, str], ...]  # (job id, why)

    @property
    def ok(self) -> bool:
        return all(j.ok for j in self.jobs)


def read_entries(path: Path) -> dict[str, Any]:
    """The plan's entries as `buildtools ci matrix --entries-json` wrote them."""
    try:
        data = decode_json(read_regular(path, max_bytes=JSON_MAX_BYTES), what=path.name)
        if not isinstance(data, dict) or data.get("schema") != ENTRIES_SCHEMA:
            raise ValueError(f"schema is not {ENTRIES_SCHEMA!r}")
        return data
    except (OSError, ValueError) as exc:
        raise PublishError(f"{path}: not the plan's entries: {exc}") from None


def _reports(root: Path, prefix: str) -> dict[str, dict[str, Any]]:
    """job id → its report.json, from `<prefix><job id>/report.json` artifact directories."""
    found: dict[str, dict[str, Any]] = {}
    if not root.is_dir():
        return found
    for path in sorted(root.glob(f"{prefix}*/report.json")):
        try:
            data = decode_json(read_regular(path, max_bytes=JSON_MAX_BYTES), what=path.name)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            found[path.parent.name.removeprefix(prefix)] = data
    return found


def _verdict(job: str, info: Mapping[str, Any], plan_outputs: Mapping[str, str]) -> JobVerdict:
    result = str(info.get("result", "skipped"))
    flag = plan_outputs.get(layout.run_flag(_FLAG_OF.get(job, job)))
    expected = flag == "true" if flag is not None else True
    if result == "success":
        return JobVerdict(job=job, result=result, expected=expected, ok=True, why="")
    if result == "skipped":
        if not expected:
            return JobVerdict(job=job, result=result, expected=False, ok=True, why="no work")
        return JobVerdict(
            job=job, result=result, expected=True, ok=False, why="had work but did not run"
        )
    # images (and pushing them) only saves time: a build without a shared image makes its own
    soft = job in ("images", "push-images") and result == "failure"
    return JobVerdict(
        job=job,
        result=result,
        expected=expected,
        ok=soft,
        why="the builds made their own images" if soft else result,
    )


def run_status(
    *, workflow: str, needs: Mapping[str, Any], entries: Mapping[str, Any] | None, reports: Path
) -> RunStatus:
    """The verdict of a run from its jobs' results, the plan and the reports."""
    plan = needs.get("plan") or {"result": "skipped"}
    plan_outputs = {str(k): str(v) for k, v in (plan.get("outputs") or {}).items()}
    jobs = [
        JobVerdict(
            job="plan",
            result=str(plan.get("result")),
            expected=True,
            ok=plan.get("result") == "success",
            why="" if plan.get("result") == "success" else "the plan did not succeed",
        )
    ]
    jobs += [_verdict(name, info, plan_outputs) for name, info in needs.items() if name != "plan"]
    build_reports = _reports(reports, "build-report-")
    smoke_reports = _reports(reports, "smoke-")
    selection_path = next(iter(sorted(reports.glob("**/" + layout.SELECTION))), None)
    selection = read_selection(selection_path) if selection_path else ReleaseWheels()
    results = {j.job: j.result for j in jobs}
    failed: list[tuple[str, str, str]] = []
    not_run: list[tuple[str, str]] = []
    for entry in (entries or {}).get("build", []):
        job_id, job_name = entry["id"], entry["job"]
        report = build_reports.get(job_id)
        cells = (report or {}).get("cells") or []
        bad = [c for c in cells if c.get("status") == "failed"]
        if bad:
            first = str(bad[0].get("failure") or bad[0].get("reason") or "failed")
            failed.append((job_id, f"build failed: {first.splitlines()[0]}", entry["reproduce"]))
        elif report is None and results.get(job_name) in ("failure", "cancelled"):
            failed.append((job_id, "build did not finish (no report)", entry["reproduce"]))
        elif report is None:
            not_run.append((job_id, f"{job_name}: {results.get(job_name, 'not run')}"))
    for entry in (entries or {}).get("smoke", []):
        job_id, job_name = entry["id"], entry["job"]
        report = smoke_reports.get(job_id)
        statuses = sorted(
            {str(r.get("status")) for r in (report or {}).get("results") or []} - {"passed"}
        )
        commands = f"{entry['reproduce']} && {entry['smoke']}"
        if report is not None and statuses:
            failed.append((job_id, f"smoke {', '.join(statuses)}", commands))
        elif report is None and results.get(job_name) in ("failure", "cancelled"):
            failed.append((job_id, "smoke test did not finish (no report)", commands))
    # the release is published by its publish job (a pull request's preview publishes nothing)
    index_ok = results.get("publish") == "success"
    published = tuple(w for w, _, _ in selection.published) if index_ok else ()
    held = list(selection.held_back)
    if selection.published and not index_ok:
        held += [
            (w, j, f"selected, but the publish job {results.get('publish', 'did not run')}")
            for w, _, j in selection.published
        ]
    for job_id, why in (entries or {}).get("skipped", []):
        not_run.append((job_id, why))
    return RunStatus(
        workflow=workflow,
        jobs=tuple(jobs),
        published=published,
        held_back=tuple(held),
        failed=tuple(failed),
        not_run=tuple(not_run),
    )


def status_markdown(status: RunStatus, *, reproduce: Mapping[str, str] | None = None) -> str:
    """The final summary (job log and $GITHUB_STEP_SUMMARY)."""
    reproduce = reproduce or {}
    verdict = "passed" if status.ok else "FAILED"
    lines = [f"## {status.workflow}: {verdict}", "", "| job | result | |", "|---|---|---|"]
    for j in status.jobs:
        mark = "ok" if j.ok else "**failed**"
        lines.append(f"| `{j.job}` | {j.result} | {mark}{': ' + j.why if j.why else ''} |")
    lines += ["", f"### Published: {len(status.published)} wheel(s)", ""]
    lines += [f"- `{w}`" for w in status.published] or ["- none"]
    lines += ["", f"### Held back: {len(status.held_back)} wheel(s)", ""]
    for wheel, job, reason in status.held_back:
        again = reproduce.get(job)
        lines.append(
            f"- `{wheel}` (`{job}`): {reason}" + (f"; reproduce: `{again}`" if again else "")
        )
    if not status.held_back:
        lines.append("- none")
    lines += ["", f"### Failed: {len(status.failed)}", ""]
    lines += [f"- `{job}`: {what}; reproduce: `{cmd}`" for job, what, cmd in status.failed]
    if not status.failed:
        lines.append("- none")
    if status.not_run:
        lines += ["", "### Not built in this run", ""]
        lines += [f"- `{job}`: {why}" for job, why in status.not_run]
    if not status.ok:
        lines += [
            "",
            "Recover: Actions → this run → **Re-run failed jobs** (the jobs that failed and "
            "those after them run again; what passed is kept). To rebuild a tag later: "
            "Actions → release → Run workflow, with the tag (and `only` to narrow it).",
        ]
    return "\n".join(lines) + "\n"


def reproduce_commands(entries: Mapping[str, Any] | None) -> dict[str, str]:
    """job id → the command that reproduces its build, then its smoke test."""
    out: dict[str, str] = {}
    for entry in (entries or {}).get("build", []):
        out[entry["id"]] = entry["reproduce"]
    for entry in (entries or {}).get("smoke", []):
        out[entry["id"]] = f"{entry['reproduce']} && {entry['smoke']}"
    return out


def entries_json(
    *,
    workflow: str,
    build: Sequence[tuple[dict[str, Any], str]],
    smoke: Sequence[tuple[dict[str, Any], str]],
    skipped: Sequence[tuple[str, str]],
) -> str:
    """What `read_entries` reads: each build and smoke entry with the job that runs it."""
    return (
        json.dumps(
            {
                "schema": ENTRIES_SCHEMA,
                "workflow": workflow,
                "build": [{**e, "job": job} for e, job in build],
                "smoke": [{**e, "job": job} for e, job in smoke],
                "skipped": [list(s) for s in skipped],
            },
            indent=1,
            sort_keys=True,
        )
        + "\n"
    )
