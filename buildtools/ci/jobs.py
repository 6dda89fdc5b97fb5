"""The jobs that plan, build and smoke-test, per family: plan → build-<f> → smoke-<f>.

`smoke-<family>` needs only its own family's builds, so one failed (or slow) CUDA build
holds back neither the CPU nor the ROCm smoke tests. Build jobs restore their caches
(downloads by torch × accelerator × toolkit pins, the job's compiler cache, the builder
image of their recipe); only the trusted workflows (release, caches) save them, so a pull
request can never plant a cache entry a release restores. Release builds attest each
wheel (`actions/attest-build-provenance`): the record the publish verifies.
"""

from __future__ import annotations

__all__ = [
    "build_job",
    "images_job",
    "plan_job",
    "prefetch_job",
    "smoke_job",
    "workflow_header",
]

from typing import Any

from ..planner import Plan
from . import layout
from .outputs import Shape
from .runners import (
    Label,
    group_family,
    label_text,
    runs_on,
    smoke_families,
    unsmoked_families,
)
from .scripts import (
    build_script,
    free_disk_script,
    image_build_script,
    image_load_script,
    image_pull_script,
    plan_script,
    prefetch_script,
    qemu_script,
    smoke_script,
)
from .steps import Context

_PREFETCH_PATH = f"{layout.CACHE_DIR}/prefetch"
_IMAGE_PATH = f"{layout.IMAGES_DIR}/${{{{ matrix.image_file }}}}"
RUN_ID = "${{ github.run_id }}"


def _flag(job: str) -> str:
    return f"needs.plan.outputs.{layout.run_flag(job)} == 'true'"


def plan_outputs(ctx: Context, shape: Shape, extra: tuple[str, ...]) -> dict[str, str]:
    """The plan job's outputs the later jobs read (the step `plan` writes them)."""
    names: list[str] = []
    if ctx.kind in (layout.RELEASE_NAME, layout.SELF_HOSTED_NAME):
        names += ["tag", "sha"] if ctx.kind == layout.RELEASE_NAME else ["sha"]
    jobs = [j for f in shape.build for j in shape.build_jobs(f)]
    jobs += [j for g in shape.smoke for j in shape.smoke_jobs(g)]
    for job in jobs:
        names += [layout.output_name(job), layout.run_flag(job)]
    for job in extra:
        if job in ("images", "prefetch"):
            names.append(job)
        names.append(layout.run_flag(job))
    return {name: f"${{{{ steps.plan.outputs.{name} }}}}" for name in names}


def plan_job(
    ctx: Context,
    profile: str,
    shape: Shape,
    *,
    extra: tuple[str, ...] = (),
    needs: str | None = None,
    condition: str | None = None,
    env: dict[str, str] | None = None,
    ref: str | None = None,
) -> dict[str, Any]:
    """The plan of `profile` for this workflow: matrices as outputs, plan.json uploaded."""
    step: dict[str, Any] = {"name": f"Plan the {profile} profile", "id": "plan"}
    if env:
        step["env"] = env
    step["run"] = plan_script(ctx.matrix, profile, kind=ctx.kind, shape=shape.arg())
    job: dict[str, Any] = {"name": "plan"}
    if needs:
        job["needs"] = needs
    if condition:
        job["if"] = condition
    job.update(
        {
            "runs-on": ctx.control,
            "timeout-minutes": layout.PLAN_TIMEOUT,
            "permissions": {"contents": "read"},
            "outputs": plan_outputs(ctx, shape, extra),
            "steps": [
                ctx.checkout(ref if ref is not None else ""),
                ctx.setup_python(),
                ctx.install_tools(),
                step,
                ctx.upload("plan", "plan/"),
            ],
        }
    )
    return job


def _image_steps(ctx: Context, *, family: str) -> list[dict[str, Any]]:
    """Restore the job's builder image: from the registry, or the Actions cache."""
    registry = ctx.mf.matrix.ci.image_registry
    env = {"IMAGE": "${{ matrix.image }}"}
    if registry:
        return [
            {
                "name": "Pull the builder image",
                "if": "matrix.image != ''",
                "env": {**env, "REGISTRY": registry},
                "run": image_pull_script(),
            }
        ]
    return [
        {
            "name": "Restore the builder image",
            "id": "image",
            "if": "matrix.image != ''",
            "uses": ctx.pins.uses("actions/cache", "restore"),
            "with": {"path": _IMAGE_PATH, "key": "${{ matrix.image_key }}"},
        },
        {
            "name": "Load the builder image",
            "if": "steps.image.outputs.cache-hit == 'true'",
            "env": {"IMAGE_FILE": "${{ matrix.image_file }}"},
            "run": image_load_script(),
        },
    ]


def _registry_login(ctx: Context) -> list[dict[str, Any]]:
    registry = ctx.mf.matrix.ci.image_registry
    if not registry:
        return []
    host = registry.split("/", 1)[0]
    return [
        {
            "name": f"Log in to {host}",
            "env": {"REGISTRY_HOST": host, "REGISTRY_TOKEN": "${{ github.token }}"},
            "run": 'echo "$REGISTRY_TOKEN" | docker login "$REGISTRY_HOST" '
            '--username "$GITHUB_ACTOR" --password-stdin\n',
        }
    ]


def _cache_steps(ctx: Context, *, save: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(restore steps, save steps) of the downloads and the compiler cache."""
    restore = [
        {
            "name": "Restore downloads (torch, toolkit, build requirements)",
            "id": "downloads",
            "uses": ctx.pins.uses("actions/cache", "restore"),
            "with": {
                "path": _PREFETCH_PATH,
                "key": "${{ matrix.prefetch_key }}",
                "restore-keys": "${{ matrix.prefetch_restore }}",
            },
        },
        {
            "name": "Restore the compiler cache",
            "if": "matrix.ccache_key != ''",
            "uses": ctx.pins.uses("actions/cache", "restore"),
            "with": {
                "path": "${{ matrix.ccache_path }}",
                "key": f"${{{{ matrix.ccache_key }}}}{RUN_ID}",
                "restore-keys": "${{ matrix.ccache_key }}",
            },
        },
    ]
    if not save:
        return restore, []
    saves = [
        {
            "name": "Save downloads",
            "if": "success() && steps.downloads.outputs.cache-hit != 'true'",
            "uses": ctx.pins.uses("actions/cache", "save"),
            "with": {"path": _PREFETCH_PATH, "key": "${{ matrix.prefetch_key }}"},
        },
        {
            # also after a failed build: what compiled is still worth keeping
            "name": "Save the compiler cache",
            "if": "always() && matrix.ccache_key != ''",
            "uses": ctx.pins.uses("actions/cache", "save"),
            "with": {
                "path": "${{ matrix.ccache_path }}",
                "key": f"${{{{ matrix.ccache_key }}}}{RUN_ID}",
            },
        },
    ]
    return restore, saves


def build_job(
    ctx: Context, profile: str, family: str, job: str, *, needs: list[str]
) -> dict[str, Any]:
    """One matrix job per BuildJob of `family` (docker backend, offline): wheels uploaded."""
    release = ctx.kind == layout.RELEASE_NAME
    restore, saves = _cache_steps(ctx, save=ctx.trusted)
    permissions = {"contents": "read"}
    if release:
        permissions.update({"id-token": "write", "attestations": "write"})
    if ctx.mf.matrix.ci.image_registry:
        permissions["packages"] = "read"
    steps: list[dict[str, Any]] = [ctx.checkout()]
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
        ctx.setup_python("${{ matrix.python_versions }}"),
        *_registry_login(ctx),
        *_image_steps(ctx, family=family),
        *restore,
        ctx.install_tools(),
        {
            "name": "Build (nox -s build)",
            "env": {
                "BT_JOB": "${{ matrix.id }}",
                "BT_ONLY": "${{ matrix.only }}",
                "BT_REPRODUCE": "${{ matrix.reproduce }}",
            },
            "run": build_script(ctx.matrix, profile),
        },
    ]
    if release:
        steps.append(
            {
                "name": "Attest the wheels' provenance",
                "uses": ctx.pins.uses("actions/attest-build-provenance"),
                "with": {"subject-path": f"{layout.WHEELHOUSE}/*.whl"},
            }
        )
    steps += [
        ctx.upload("wheels-${{ matrix.id }}", f"{layout.WHEELHOUSE}/*.whl", wheels=True),
        ctx.upload(
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
        "strategy": {
            "fail-fast": False,
            "matrix": f"${{{{ fromJSON(needs.plan.outputs.{layout.output_name(job)}) }}}}",
        },
        "steps": steps,
    }


def smoke_job(
    ctx: Context, group: str, label: Label, job: str, *, needs: list[str], from_run: str | None
) -> dict[str, Any]:
    """The smoke tests of one group's wheels on its runner (`from_run`: another run's).

    A group is a family's x86_64 wheels (`cuda`) or its aarch64 ones (`cuda-aarch64`, on
    an ARM machine from runners.linux_aarch64.smoke).
    """
    family = group_family(group)
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
    return {
        "name": f"smoke ${{{{ matrix.id }}}} ({group})",
        "needs": needs,
        "if": "${{ " + " && ".join(parts) + " }}",
        "runs-on": runs_on(label),
        "timeout-minutes": layout.SMOKE_TIMEOUT,
        "permissions": permissions,
        "strategy": {
            "fail-fast": False,
            "matrix": f"${{{{ fromJSON(needs.plan.outputs.{layout.output_name(job)}) }}}}",
        },
        "steps": [
            ctx.checkout(),
            ctx.setup_python("${{ matrix.python_versions }}"),
            ctx.install_tools(),
            *_wheel_downloads(ctx, from_run),
            {
                "name": "Smoke test (nox -s smoke)",
                "env": {
                    "BT_JOB": "${{ matrix.id }}",
                    "BT_REPRODUCE": "${{ matrix.reproduce }}",
                    "BT_SMOKE": "${{ matrix.smoke }}",
                },
                "run": smoke_script(ctx.matrix, family),
            },
            ctx.upload(
                "smoke-${{ matrix.id }}", f"{layout.SMOKE_OUT}/", always=True, missing="ignore"
            ),
        ],
    }


def _wheel_downloads(ctx: Context, from_run: str | None) -> list[dict[str, Any]]:
    """The job's wheels: from this run, or (`from_run`) from the pull request's run for the
    entries whose `wheels_from` says so (built there on hosted runners)."""
    here = ctx.download(
        layout.WHEELHOUSE, name="wheels-${{ matrix.id }}", title="Download the wheels"
    )
    if from_run is None:
        return [here]
    there = ctx.download(
        layout.WHEELHOUSE,
        name="wheels-${{ matrix.id }}",
        from_run=from_run,
        title="Download the wheels the pull request's run built",
    )
    return [
        {**here, "if": "matrix.wheels_from == 'run'"},
        {**there, "if": "matrix.wheels_from == 'pull-request'"},
    ]


def images_job(ctx: Context, profile: str) -> dict[str, Any]:
    """One job per builder recipe: built once, saved for every build of that recipe."""
    registry = ctx.mf.matrix.ci.image_registry
    env = {
        "BT_ONLY": "${{ matrix.only }}",
        "IMAGE": "${{ matrix.image }}",
        "IMAGE_FILE": "${{ matrix.image_file }}",
    }
    steps: list[dict[str, Any]] = [
        ctx.checkout(),
        {
            "name": "Free disk space for the builder image",
            "if": "matrix.family != 'cpu' && runner.environment == 'github-hosted'",
            "run": free_disk_script(),
        },
        ctx.setup_python(),
        ctx.install_tools(),
    ]
    if registry:
        steps += _registry_login(ctx)
        env["REGISTRY"] = registry
        steps.append(
            {
                "name": "Build and push the builder image",
                "env": env,
                "run": image_build_script(ctx.matrix, profile, registry=True),
            }
        )
    else:
        steps += [
            {
                "name": "Look for the builder image in the cache",
                "id": "cached",
                "uses": ctx.pins.uses("actions/cache", "restore"),
                "with": {
                    "path": _IMAGE_PATH,
                    "key": "${{ matrix.image_key }}",
                    "lookup-only": True,
                },
            },
            {
                "name": "Build the builder image",
                "if": "steps.cached.outputs.cache-hit != 'true'",
                "env": env,
                "run": image_build_script(ctx.matrix, profile, registry=False),
            },
            {
                "name": "Save the builder image",
                "if": "steps.cached.outputs.cache-hit != 'true'",
                "uses": ctx.pins.uses("actions/cache", "save"),
                "with": {"path": _IMAGE_PATH, "key": "${{ matrix.image_key }}"},
            },
        ]
    permissions = {"contents": "read"}
    if registry:
        permissions["packages"] = "write"
    return {
        "name": "image ${{ matrix.image }}",
        "needs": "plan",
        "if": _flag("images"),
        "runs-on": "${{ matrix.runner }}",
        "timeout-minutes": layout.IMAGE_TIMEOUT,
        "permissions": permissions,
        "strategy": {"fail-fast": False, "matrix": "${{ fromJSON(needs.plan.outputs.images) }}"},
        "steps": steps,
    }


def prefetch_job(ctx: Context, profile: str) -> dict[str, Any]:
    """One job per download group: what its builds install, saved for them to restore."""
    return {
        "name": "downloads ${{ matrix.prefetch_key }}",
        "needs": "plan",
        "if": _flag("prefetch"),
        "runs-on": ctx.control,
        "timeout-minutes": layout.PREFETCH_TIMEOUT,
        "permissions": {"contents": "read"},
        "strategy": {"fail-fast": False, "matrix": "${{ fromJSON(needs.plan.outputs.prefetch) }}"},
        "steps": [
            ctx.checkout(),
            ctx.setup_python("${{ matrix.python_versions }}"),
            ctx.install_tools(),
            {
                "name": "Restore the downloads",
                "id": "downloads",
                "uses": ctx.pins.uses("actions/cache", "restore"),
                "with": {"path": _PREFETCH_PATH, "key": "${{ matrix.prefetch_key }}"},
            },
            {
                "name": "Download (buildtools ci prefetch)",
                "if": "steps.downloads.outputs.cache-hit != 'true'",
                "env": {"BT_GROUP": "${{ matrix.prefetch_key }}"},
                "run": prefetch_script(ctx.matrix, profile),
            },
            {
                "name": "Save the downloads",
                "if": "steps.downloads.outputs.cache-hit != 'true'",
                "uses": ctx.pins.uses("actions/cache", "save"),
                "with": {"path": _PREFETCH_PATH, "key": "${{ matrix.prefetch_key }}"},
            },
        ],
    }


def workflow_header(
    ctx: Context, title: str, profile: str, plan: Plan, lines: list[str]
) -> list[str]:
    """The comment atop a workflow: how to regenerate it, what it builds, where it smokes."""
    regen = layout.join(["nox", "-s", "ci", *(["--", *ctx.margs] if ctx.margs else [])])
    check = layout.join(["nox", "-s", "ci", "--", *ctx.margs, "--check"])
    out = [
        ctx.do_not_edit(),
        f"Regenerate: `{regen}` (or `buildtools ci github`); `{check}` fails when this",
        f"file no longer matches {ctx.matrix}.",
        "",
        f"{title}: profile `{profile}`, {len(plan.cells)} cell(s) in {len(plan.jobs)} build "
        "job(s) when generated;",
        *lines,
    ]
    smoked = smoke_families(ctx.mf, plan)
    if smoked:
        out.append(
            "smoke-tested on: " + "; ".join(f"{f} ({label_text(label)})" for f, label in smoked)
        )
    for group in unsmoked_families(ctx.mf, plan):
        family = group_family(group)
        table = "linux_aarch64.smoke" if group != family else "smoke"
        out.append(f"not smoke-tested, so never published: {group} (no runners.{table}.{family})")
    return out
