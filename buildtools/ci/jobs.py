"""The jobs both workflows run: plan → build → smoke (per family) → index, and their header.

`release.yml` and `pull-request.yml` differ in their trigger, a drift check before the
plan (pull requests), a deploy after the index (releases), and in three switches handed
to these builders: `only` globs when dispatched by hand, smoke jobs that keep forks off
self-hosted runners, and an index that is a preview.

Safe by construction: actions pinned by commit SHA (`data/actions.yaml`), the least
permissions each job needs, checkouts without persisted credentials, a timeout on every
job. Uploads overwrite: re-running a failed job uploads its artifacts again under the
same name.
"""

from __future__ import annotations

__all__ = [
    "Context",
    "build_job",
    "index_job",
    "pages_enabled",
    "pipeline_jobs",
    "plan_job",
    "smoke_job",
    "workflow_header",
]

from dataclasses import dataclass
from typing import Any

from ..matrix.config import MatrixFile
from ..planner import Plan
from . import layout
from .pins import CiPins
from .runners import (
    Label,
    arm_smoke_families,
    arm_unsmoked_families,
    is_hosted,
    label_text,
    runner_label,
    runs_on,
    smoke_families,
    unsmoked_families,
)
from .scripts import bash, build_script, index_script, plan_script, smoke_script


def pages_enabled(mf: MatrixFile) -> bool:
    """Publish to GitHub Pages when `index.base_url` says where the site is served."""
    return bool(mf.matrix.index.base_url)


@dataclass(frozen=True, kw_only=True)
class Context:
    """What every job builder needs: the matrix, the pinned actions, the matrix's path."""

    mf: MatrixFile
    pins: CiPins
    matrix: str  # matrix.yaml relative to the repository root

    @property
    def control(self) -> Label:
        """Where the plan, index and drift jobs run: the CPU build runner."""
        return runner_label(self.mf.matrix.runners.build.get("cpu"))

    @property
    def margs(self) -> list[str]:
        """`--matrix PATH`, or nothing for ./matrix.yaml."""
        return layout.matrix_args(self.matrix)

    def do_not_edit(self) -> str:
        """The first line of every generated file (the drift check looks for the marker)."""
        return f"{layout.GENERATED_MARKER} from {self.matrix}: do not edit by hand."

    def checkout(self) -> dict[str, Any]:
        """Check out without leaving the token in .git/config."""
        return {
            "name": "Check out",
            "uses": self.pins.uses("actions/checkout"),
            "with": {"persist-credentials": False},
        }

    def setup_python(self, versions: str | None = None) -> dict[str, Any]:
        """The pinned CI Python, or the versions a build or smoke job needs."""
        return {
            "name": "Set up Python",
            "uses": self.pins.uses("actions/setup-python"),
            "with": {
                "python-version": versions or self.pins.python.version,
                "allow-prereleases": True,
            },
        }

    def install_nox(self) -> dict[str, Any]:
        """nox at the pinned version: the workflows call the project's nox sessions."""
        return {
            "name": "Install nox",
            "run": f"python -m pip install nox=={self.pins.python.nox}",
        }


def plan_job(
    ctx: Context,
    profile: str,
    *,
    dispatch: bool,
    needs: str | None,
    arm_groups: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The plan of `profile`: the build and smoke matrices as outputs, plan.json uploaded.

    `arm_groups`: the `<family>-aarch64` smoke groups that have a runner (their outputs).
    """
    outputs = {"build": "${{ steps.plan.outputs.build }}"}
    for family in (*layout.FAMILIES, *arm_groups):
        outputs[f"has_{family}"] = f"${{{{ steps.plan.outputs.has_{family} }}}}"
        outputs[f"smoke_{family}"] = f"${{{{ steps.plan.outputs.smoke_{family} }}}}"
    step: dict[str, Any] = {"name": f"Plan the {profile} profile", "id": "plan"}
    if dispatch:
        step["env"] = {"BT_ONLY": "${{ inputs.only }}"}
    step["run"] = plan_script(ctx.matrix, profile, dispatch=dispatch)
    job: dict[str, Any] = {"name": "plan"}
    if needs:
        job["needs"] = needs
    job.update(
        {
            "runs-on": runs_on(ctx.control),
            "timeout-minutes": layout.PLAN_TIMEOUT,
            "permissions": {"contents": "read"},
            "outputs": outputs,
            "steps": [
                ctx.checkout(),
                ctx.setup_python(),
                ctx.install_nox(),
                step,
                {
                    "name": "Upload the plan",
                    "uses": ctx.pins.uses("actions/upload-artifact"),
                    "with": {
                        "name": "plan",
                        "path": "plan.json",
                        "if-no-files-found": "error",
                        "overwrite": True,
                    },
                },
            ],
        }
    )
    return job


def build_job(ctx: Context, profile: str) -> dict[str, Any]:
    """One job per BuildJob of the plan (docker backend): wheels and report uploaded."""
    return {
        "name": "build ${{ matrix.id }}",
        "needs": "plan",
        "runs-on": "${{ matrix.runner }}",
        "timeout-minutes": "${{ matrix.timeout }}",
        "permissions": {"contents": "read"},
        "strategy": {"fail-fast": False, "matrix": "${{ fromJSON(needs.plan.outputs.build) }}"},
        "steps": [
            ctx.checkout(),
            {
                # CUDA/ROCm builder images are large; a hosted runner's disk is not
                "name": "Free disk space for the builder image",
                "if": "matrix.family != 'cpu' && runner.environment == 'github-hosted'",
                "run": bash(
                    "sudo rm -rf /usr/share/dotnet /usr/local/lib/android /opt/ghc "
                    "/opt/hostedtoolcache/CodeQL",
                    "df -h /",
                ),
            },
            {
                # an aarch64 job on an x86 runner (runners.linux_aarch64.emulate) builds in
                # an arm64 container: QEMU user emulation, registered with the F flag
                "name": "Set up QEMU for an emulated aarch64 build",
                "if": "matrix.platform == 'linux_aarch64' && runner.arch != 'ARM64'",
                "run": bash(
                    "sudo apt-get update -qq",
                    "sudo apt-get install -y -qq qemu-user-static binfmt-support",
                    "cat /proc/sys/fs/binfmt_misc/qemu-aarch64",
                ),
            },
            ctx.setup_python("${{ matrix.python_versions }}"),
            {
                "name": "Cache downloads (torch, toolkits)",
                "uses": ctx.pins.uses("actions/cache"),
                "with": {
                    # pip's and uv's download caches (uv: the toolchain environments')
                    "path": "~/.cache/pip\n~/.cache/torch-buildtools/envs/uv-cache",
                    # the key hashes the job's plan: torch, CUDA/ROCm pins, image, buildtools
                    "key": "${{ matrix.cache_key }}",
                    "restore-keys": "${{ matrix.cache_restore }}",
                },
            },
            ctx.install_nox(),
            {
                "name": "Build (nox -s build)",
                "env": {
                    "BT_JOB": "${{ matrix.id }}",
                    "BT_ONLY": "${{ matrix.only }}",
                    "BT_REPRODUCE": "${{ matrix.reproduce }}",
                },
                "run": build_script(ctx.matrix, profile),
            },
            {
                "name": "Upload the wheels",
                "uses": ctx.pins.uses("actions/upload-artifact"),
                "with": {
                    "name": "wheels-${{ matrix.id }}",
                    "path": f"{layout.WHEELHOUSE}/*.whl",
                    "if-no-files-found": "error",
                    "overwrite": True,
                },
            },
            {
                "name": "Upload the build report and logs",
                "if": "always()",
                "uses": ctx.pins.uses("actions/upload-artifact"),
                "with": {
                    "name": "build-report-${{ matrix.id }}",
                    "path": "\n".join(
                        f"{layout.WHEELHOUSE}/{p}" for p in ("report.json", "logs/", "rejected/")
                    ),
                    "if-no-files-found": "ignore",
                    "overwrite": True,
                },
            },
        ],
    }


def smoke_job(
    ctx: Context, family: str, label: Label, *, forks: bool, group: str | None = None
) -> dict[str, Any]:
    """The smoke tests of one accelerator family on its runner (never a fork's on our own).

    `group`: `<family>-aarch64` for the family's aarch64 wheels on their ARM runner.
    """
    accel_family = family
    family = group or family
    condition = f"needs.plan.outputs.has_{family} == 'true'"
    if forks and not is_hosted(label):
        # a pull request from a fork must not run its code on the project's own machines
        condition += " && github.event.pull_request.head.repo.full_name == github.repository"
    return {
        "name": f"smoke ${{{{ matrix.id }}}} ({family})",
        "needs": ["plan", "build"],
        "if": condition,
        "runs-on": runs_on(label),
        "timeout-minutes": layout.SMOKE_TIMEOUT,
        "permissions": {"contents": "read"},
        "strategy": {
            "fail-fast": False,
            "matrix": f"${{{{ fromJSON(needs.plan.outputs.smoke_{family}) }}}}",
        },
        "steps": [
            ctx.checkout(),
            ctx.setup_python("${{ matrix.python_versions }}"),
            ctx.install_nox(),
            {
                "name": "Download the wheels",
                "uses": ctx.pins.uses("actions/download-artifact"),
                "with": {"name": "wheels-${{ matrix.id }}", "path": layout.WHEELHOUSE},
            },
            {
                "name": "Smoke test (nox -s smoke)",
                "env": {
                    "BT_JOB": "${{ matrix.id }}",
                    "BT_REPRODUCE": "${{ matrix.reproduce }}",
                    "BT_SMOKE": "${{ matrix.smoke }}",
                },
                "run": smoke_script(ctx.matrix, accel_family),
            },
            {
                "name": "Upload the smoke report",
                "if": "always()",
                "uses": ctx.pins.uses("actions/upload-artifact"),
                "with": {
                    "name": "smoke-${{ matrix.id }}",
                    "path": f"{layout.SMOKE_OUT}/",
                    "if-no-files-found": "ignore",
                    "overwrite": True,
                },
            },
        ],
    }


def _index_condition(families: list[str], *, preview: bool) -> str:
    parts = [
        "!cancelled()",
        "needs.plan.result == 'success'",
        "needs.build.result == 'success'",
    ]
    for family in families:
        job = f"needs.smoke-{family}.result"
        if preview:
            # a preview: a smoke job skipped for a fork's pull request does not block it
            parts.append(f"({job} == 'success' || {job} == 'skipped')")
        else:
            # skipped is fine only when the plan gave that family nothing to test
            parts.append(
                f"({job} == 'success' || ({job} == 'skipped' && "
                f"needs.plan.outputs.has_{family} != 'true'))"
            )
    return "${{ " + " && ".join(parts) + " }}"


def _download_all(ctx: Context) -> list[dict[str, Any]]:
    return [
        {
            "name": "Download the wheels",
            "uses": ctx.pins.uses("actions/download-artifact"),
            "with": {"pattern": "wheels-*", "path": f"{layout.ARTIFACTS}/wheels"},
        },
        {
            "name": "Download the smoke reports",
            "uses": ctx.pins.uses("actions/download-artifact"),
            "with": {"pattern": "smoke-*", "path": f"{layout.ARTIFACTS}/smoke"},
        },
    ]


def index_job(ctx: Context, families: list[str], *, preview: bool) -> dict[str, Any]:
    """The site from the smoke-tested wheels: restored and deployable, or a preview artifact."""
    pages = pages_enabled(ctx.mf) and not preview
    steps: list[dict[str, Any]] = [
        ctx.checkout(),
        ctx.setup_python(),
        ctx.install_nox(),
        *_download_all(ctx),
    ]
    publish: dict[str, Any] = {
        "name": "Index the smoke-tested wheels (nox -s index)"
        if not preview
        else "Index preview of the smoke-tested wheels (nox -s index)"
    }
    if pages:
        steps.append(
            {
                "name": "Restore the published site",
                "id": "site",
                "run": bash(
                    layout.join(
                        ["nox", "-s", "ci", "--", "restore-site", *ctx.margs, "--site", layout.SITE]
                    )
                ),
            }
        )
        publish["env"] = {"SITE": "${{ steps.site.outputs.path }}"}
    else:
        publish["env"] = {"SITE": layout.SITE}
    publish["run"] = index_script(ctx.matrix, preview=preview)
    steps.append(publish)
    if pages:
        steps.append(
            {
                "name": "Upload the site for GitHub Pages",
                "uses": ctx.pins.uses("actions/upload-pages-artifact"),
                "with": {"path": layout.SITE},
            }
        )
    steps.append(
        {
            "name": "Upload the site",
            "uses": ctx.pins.uses("actions/upload-artifact"),
            "with": {
                "name": "site-preview" if preview else "site",
                "path": layout.SITE,
                "include-hidden-files": True,
                "if-no-files-found": "error",
                "overwrite": True,
            },
        }
    )
    return {
        "name": "index" if not preview else "index preview",
        "needs": ["plan", "build", *(f"smoke-{f}" for f in families)],
        "if": _index_condition(families, preview=preview),
        "runs-on": runs_on(ctx.control),
        "timeout-minutes": layout.INDEX_TIMEOUT,
        "permissions": {"contents": "read"},
        "steps": steps,
    }


def pipeline_jobs(
    ctx: Context, plan: Plan, profile: str, *, pull_request: bool, after: str | None = None
) -> dict[str, Any]:
    """plan → build → smoke-<family> (each family with a smoke runner) → index.

    `pull_request`: no `only` input, no fork on a self-hosted runner, an index preview.
    `after`: a job the plan waits for.
    """
    smoked = smoke_families(ctx.mf, plan)
    arm = arm_smoke_families(ctx.mf, plan)
    groups = tuple(f"{f}-aarch64" for f, _ in arm)
    jobs: dict[str, Any] = {
        "plan": plan_job(ctx, profile, dispatch=not pull_request, needs=after, arm_groups=groups),
        "build": build_job(ctx, profile),
    }
    for family, label in smoked:
        jobs[f"smoke-{family}"] = smoke_job(ctx, family, label, forks=pull_request)
    for (family, label), group in zip(arm, groups, strict=True):
        jobs[f"smoke-{group}"] = smoke_job(ctx, family, label, forks=pull_request, group=group)
    jobs["index"] = index_job(ctx, [f for f, _ in smoked] + list(groups), preview=pull_request)
    return jobs


def workflow_header(
    ctx: Context, title: str, profile: str, plan: Plan, lines: list[str]
) -> list[str]:
    """The comment atop a workflow: how to regenerate it, what it builds, where it smokes."""
    regen = layout.join(["nox", "-s", "ci", *(["--", *ctx.margs] if ctx.margs else [])])
    check = layout.join(["nox", "-s", "ci", "--", *ctx.margs, "--check"])
    smoked = smoke_families(ctx.mf, plan)
    unsmoked = unsmoked_families(ctx.mf, plan)
    out = [
        ctx.do_not_edit(),
        f"Regenerate: `{regen}` (or `buildtools ci github`); `{check}` fails when this",
        f"file no longer matches {ctx.matrix}.",
        "",
        f"{title}: profile `{profile}`, {len(plan.cells)} cell(s) in {len(plan.jobs)} build "
        "job(s) when generated;",
        *lines,
    ]
    if smoked:
        out.append(
            "smoke-tested on: " + "; ".join(f"{f} ({label_text(label)})" for f, label in smoked)
        )
    for family in unsmoked:
        out.append(f"not smoke-tested, so never published: {family} (no runners.smoke.{family})")
    arm = arm_smoke_families(ctx.mf, plan)
    if arm:
        out.append(
            "aarch64 smoke-tested on: "
            + "; ".join(f"{f} ({label_text(label)})" for f, label in arm)
        )
    for family in arm_unsmoked_families(ctx.mf, plan):
        out.append(
            f"not smoke-tested, so never published: {family} aarch64 "
            f"(no runners.linux_aarch64.smoke.{family})"
        )
    return out
