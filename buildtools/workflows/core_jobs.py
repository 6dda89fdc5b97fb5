"""The jobs that plan, build and smoke-test, per family: plan → build-<f> → smoke-<f>.

`smoke-<family>` needs only its own family's builds, so one failed (or slow) CUDA build
holds back neither the CPU nor the ROCm smoke tests. What a build brings in besides the
source (builder image, downloads, compiler cache) depends on the workflow's trust
(`workflows.input_jobs`): a release uses its own run's image checked by ID and exact cache keys only.
Build jobs hold no write permission: the publish job attests what passed its smoke tests.
"""

from __future__ import annotations

__all__ = [
    "PlanJobSpec",
    "build_job",
    "plan_job",
    "smoke_job",
    "workflow_header",
]

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..ciplan import layout
from ..ciplan.labels import (
    Label,
    group_family,
    label_text,
    runs_on,
    smoke_families,
    unsmoked_families,
)
from ..ciplan.shapes import Shape
from ..ciplan.smokeonly import window_families, window_job
from ..model import RUNNER_ACCELERATOR_ENV
from ..planner import Plan
from .input_jobs import build_inputs
from .jobparts import WorkflowSpec
from .scripts import (
    build_script,
    built_script,
    free_disk_script,
    plan_script,
    qemu_script,
    smoke_script,
    smoked_script,
)


def _flag(job: str) -> str:
    return f"needs.plan.outputs.{layout.run_flag(job)} == 'true'"


def plan_outputs(wf: WorkflowSpec, shape: Shape, extra: tuple[str, ...]) -> dict[str, str]:
    """The plan job's outputs the later jobs read (the step `plan` writes them)."""
    names: list[str] = []
    if wf.kind in (layout.RELEASE_NAME, layout.SELF_HOSTED_NAME):
        names += ["tag", "sha"] if wf.kind == layout.RELEASE_NAME else ["sha"]
    jobs = [j for f in shape.build for j in shape.build_jobs(f)]
    jobs += [j for g in shape.smoke for j in shape.smoke_jobs(g)]
    for job in jobs:
        names += [layout.output_name(job), layout.run_flag(job)]
    if wf.kind == layout.RELEASE_NAME:  # the smoke-only legs (workflows.window_jobs)
        for family in window_families(shape.smoke):
            job = window_job(family)
            names += [layout.output_name(job), layout.run_flag(job), f"window_built_{family}"]
    for job in extra:
        if job in ("images", "prefetch"):
            names.append(job)
        names.append(layout.run_flag(job))
    # a release's tag and commit are what the vetting step resolved, before any checkout
    vetted = ("tag", "sha") if wf.kind == layout.RELEASE_NAME else ()
    return {
        name: f"${{{{ steps.{'vet' if name in vetted else 'plan'}.outputs.{name} }}}}"
        for name in names
    }


@dataclass(frozen=True, kw_only=True)
class PlanJobSpec:
    """What a workflow adds to its plan job.

    `extra`: outputs beyond the families' matrices; `needs`/`condition`: when it runs; `env`:
    the plan step's variables; `ref`: the commit it checks out (default: the event's);
    `vet`: a step that runs before anything is checked out (the release's tag vetting).
    """

    extra: tuple[str, ...] = ()
    needs: str | None = None
    condition: str | None = None
    env: Mapping[str, str] | None = None
    ref: str | None = None
    vet: Mapping[str, Any] | None = None


_NO_SPEC = PlanJobSpec()


def plan_job(
    wf: WorkflowSpec, profile: str, shape: Shape, spec: PlanJobSpec = _NO_SPEC
) -> dict[str, Any]:
    """The plan of `profile` for this workflow: matrices as outputs, plan.json uploaded."""
    extra, needs, condition, env = spec.extra, spec.needs, spec.condition, spec.env
    ref, vet = spec.ref, spec.vet
    step: dict[str, Any] = {"name": f"Plan the {profile} profile", "id": "plan"}
    if env:
        step["env"] = dict(env)
    step["run"] = plan_script(wf.matrix, profile, kind=wf.kind, shape=shape.arg())
    job: dict[str, Any] = {"name": "plan"}
    if needs:
        job["needs"] = needs
    if condition:
        job["if"] = condition
    job.update(
        {
            "runs-on": wf.control,
            "timeout-minutes": layout.PLAN_TIMEOUT,
            # a release's plan reads the published record, and verifies its attestation
            "permissions": {"contents": "read"}
            | ({"attestations": "read"} if wf.kind == layout.RELEASE_NAME else {}),
            "outputs": plan_outputs(wf, shape, extra),
            "steps": [
                *([dict(vet)] if vet else []),
                wf.checkout(ref if ref is not None else ""),
                wf.setup_python(),
                wf.install_tools(),
                step,
                wf.upload("plan", "plan/"),
            ],
        }
    )
    return job


def build_job(
    wf: WorkflowSpec, profile: str, family: str, job: str, *, needs: list[str], legs: int = 0
) -> dict[str, Any]:
    """One matrix job per BuildJob of `family` (docker backend, offline): wheels uploaded.

    A release's build job also outputs what each leg built (`wheels_<leg>`: `sha256:name`
    tokens, `legs` outputs declared): only that leg can set it, so the publish job knows
    which bytes the builds made, whatever else lands in an artifact.
    """
    release = wf.kind == layout.RELEASE_NAME
    restore, saves = build_inputs(wf)
    # nothing to sign here: the publish job attests what passed its smoke tests
    permissions = {"contents": "read"}
    if wf.mf.matrix.ci.image_registry:
        permissions["packages"] = "read"
    steps: list[dict[str, Any]] = [wf.checkout()]
    if family != "cpu":
        steps.append(
            {
                "name": "Free disk space for the builder image",
                "if": "runner.environment == 'github-hosted'",
                "run": free_disk_script(),
            }
        )
    steps.append(
        {
            # an aarch64 job on an x86 runner (runners.linux_aarch64.emulate) builds in an
            # arm64 container: QEMU user emulation, registered with the F flag
            "name": "Set up QEMU for an emulated aarch64 build",
            "if": "matrix.platform == 'linux_aarch64' && runner.arch != 'ARM64'",
            "run": qemu_script(),
        }
    )
    steps += [
        wf.setup_python("${{ matrix.python_versions }}"),
        *restore,
        wf.install_tools(),
        {
            "name": "Build (nox -s build)",
            "env": {
                "BT_JOB": "${{ matrix.id }}",
                "BT_ONLY": "${{ matrix.only }}",
                "BT_REPRODUCE": "${{ matrix.reproduce }}",
            },
            "run": build_script(wf.matrix, profile, isolated=release),
        },
        *(
            [
                {
                    "name": "Report the wheels this job built",
                    "id": "built",
                    "env": {"BT_LEG": "${{ strategy.job-index }}"},
                    "run": built_script(),
                }
            ]
            if release
            else []
        ),
        wf.upload("wheels-${{ matrix.id }}", f"{layout.WHEELHOUSE}/*.whl", wheels=True),
        wf.upload(
            "build-report-${{ matrix.id }}",
            "\n".join(f"{layout.WHEELHOUSE}/{p}" for p in ("report.json", "logs/", "rejected/")),
            always=True,
            missing="ignore",
        ),
        *saves,
    ]
    return {
        "name": "build ${{ matrix.id }}",
        "needs": needs,
        # the image job only saves time: its failure must not stop the builds
        "if": f"${{{{ !cancelled() && needs.plan.result == 'success' && {_flag(job)} }}}}",
        "runs-on": "${{ matrix.runner }}",
        "timeout-minutes": "${{ matrix.timeout }}",
        "permissions": permissions,
        **(
            {
                "outputs": {
                    f"wheels_{n}": f"${{{{ steps.built.outputs.wheels_{n} }}}}" for n in range(legs)
                }
            }
            if release and legs
            else {}
        ),
        "strategy": {
            "fail-fast": False,
            "matrix": f"${{{{ fromJSON(needs.plan.outputs.{layout.output_name(job)}) }}}}",
        },
        "steps": steps,
    }


def smoke_job(
    wf: WorkflowSpec,
    group: str,
    label: Label,
    job: str,
    *,
    needs: list[str],
    from_run: str | None,
    legs: int = 0,
) -> dict[str, Any]:
    """The smoke tests of one group's wheels on its runner (`from_run`: another run's).

    A group is a family's x86_64 wheels (`cuda`) or its aarch64 ones (`cuda-aarch64`, on
    an ARM machine from runners.linux_aarch64.smoke). A release's smoke leg also outputs
    the sha256 of its report (`report_<leg>`, `legs` outputs declared): only that leg can
    set it, so a report counts for this family's wheels only with those bytes.
    """
    family = group_family(group)
    release = wf.kind == layout.RELEASE_NAME
    permissions = {"contents": "read"}
    if from_run:
        permissions["actions"] = "read"
    # explicit: a default success() would also be false when the (optional) image job
    # upstream of the build was skipped or failed; a build job that had no work (every
    # wheel of this group comes from the pull request's run) does not hold it back either
    parts = ["!cancelled()", "needs.plan.result == 'success'", _flag(job)]
    for build in needs[1:]:
        result = f"needs.{build}.result"
        parts.append(
            f"({result} == 'success' || ({result} == 'skipped' && "
            f"needs.plan.outputs.{layout.run_flag(build)} != 'true'))"
        )
    steps: list[dict[str, Any]] = [
        wf.checkout(),
        wf.setup_python("${{ matrix.python_versions }}"),
        wf.install_tools(),
        *_wheel_downloads(wf, from_run),
        {
            "name": "Smoke test (nox -s smoke)",
            "env": {
                "BT_JOB": "${{ matrix.id }}",
                "BT_REPRODUCE": "${{ matrix.reproduce }}",
                "BT_SMOKE": "${{ matrix.smoke }}",
                RUNNER_ACCELERATOR_ENV: family,
            },
            "run": smoke_script(wf.matrix, family),
        },
    ]
    if release:
        steps.append(
            {
                "name": "Report the smoke report's sha256",
                "id": "smoked",
                "env": {"BT_LEG": "${{ strategy.job-index }}"},
                "run": smoked_script(),
            }
        )
    steps.append(
        wf.upload("smoke-${{ matrix.id }}", f"{layout.SMOKE_OUT}/", always=True, missing="ignore")
    )
    smoke: dict[str, Any] = {
        "name": f"smoke ${{{{ matrix.id }}}} ({group})",
        "needs": needs,
        "if": "${{ " + " && ".join(parts) + " }}",
        "runs-on": runs_on(label),
        "timeout-minutes": layout.SMOKE_TIMEOUT,
        "permissions": permissions,
    }
    if release and legs:
        smoke["outputs"] = {
            f"report_{n}": f"${{{{ steps.smoked.outputs.report_{n} }}}}" for n in range(legs)
        }
    smoke["strategy"] = {
        "fail-fast": False,
        "matrix": f"${{{{ fromJSON(needs.plan.outputs.{layout.output_name(job)}) }}}}",
    }
    smoke["steps"] = steps
    return smoke


def _wheel_downloads(wf: WorkflowSpec, from_run: str | None) -> list[dict[str, Any]]:
    """The job's wheels: from this run, or (`from_run`) from the pull request's run for the
    entries whose `wheels_from` says so (built there on hosted runners)."""
    here = wf.download(
        layout.WHEELHOUSE, name="wheels-${{ matrix.id }}", title="Download the wheels"
    )
    if from_run is None:
        return [here]
    there = wf.download(
        layout.WHEELHOUSE,
        name="wheels-${{ matrix.id }}",
        from_run=from_run,
        title="Download the wheels the pull request's run built",
    )
    return [
        {**here, "if": "matrix.wheels_from == 'run'"},
        {**there, "if": "matrix.wheels_from == 'pull-request'"},
    ]


def workflow_header(
    wf: WorkflowSpec, title: str, profile: str, plan: Plan, lines: list[str]
) -> list[str]:
    """The comment atop a workflow: how to regenerate it, what it builds, where it smokes."""
    regen = layout.join(["nox", "-s", "ci", *(["--", *wf.margs] if wf.margs else [])])
    check = layout.join(["nox", "-s", "ci", "--", *wf.margs, "--check"])
    out = [
        wf.do_not_edit(),
        f"Regenerate: `{regen}` (or `buildtools ci github`); `{check}` fails when this",
        f"file no longer matches {wf.matrix}.",
        "",
        f"{title}: profile `{profile}`, {len(plan.cells)} cell(s) in {len(plan.jobs)} build "
        "job(s) when generated;",
        *lines,
    ]
    smoked = smoke_families(wf.mf, plan)
    if smoked:
        out.append(
            "smoke-tested on: " + "; ".join(f"{f} ({label_text(label)})" for f, label in smoked)
        )
    for group in unsmoked_families(wf.mf, plan):
        family = group_family(group)
        table = "linux_aarch64.smoke" if group != family else "smoke"
        out.append(f"not smoke-tested, so never published: {group} (no runners.{table}.{family})")
    return out
