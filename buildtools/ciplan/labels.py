"""ProcessRunner labels of matrix.yaml `runners:` as the workflows use them, and which are hosted.

A label is one string (`ubuntu-24.04`) or a list of labels a self-hosted runner must all
carry. A runner is GitHub-hosted only when its label is exactly one of the hosted labels
of `data/actions.yaml` (a fresh virtual machine per job); anything else, even a label that
starts `ubuntu-`, is treated as a machine of the project's own. Jobs on those never appear
in the pull-request workflow (which a fork can edit): they run in the trusted workflows,
whose runner group access names them. The plan, publish and status jobs always run on a
hosted runner: the CPU build runner when that is hosted, else the default runner label.
"""

from __future__ import annotations

__all__ = [
    "Label",
    "control_label",
    "custom_labels",
    "family_of",
    "group_family",
    "is_hosted",
    "label_text",
    "runner_label",
    "runs_on",
    "smoke_families",
    "smoke_group",
    "smoke_label",
    "unsmoked_families",
]

from collections.abc import Collection

from ..ecosystem import load_ecosystem
from ..matrix.config import MatrixFile
from ..model import BuildJob
from ..planner import Plan
from . import layout

# Labels every self-hosted runner gets, which actionlint knows without configuration.
_PRESET_LABELS = {"self-hosted", "linux", "macos", "windows", "x64", "arm", "arm64"}

Label = str | tuple[str, ...]


def family_of(job: BuildJob) -> str:
    """The accelerator family of a job: cpu, cuda or rocm."""
    return job.accelerator.kind


def runner_label(label: str | list[str] | tuple[str, ...] | None) -> Label:
    """A `runners:` entry as a label (a list becomes a tuple); the default runner if unset."""
    if label is None:
        return load_ecosystem().default_runner
    return tuple(label) if isinstance(label, (list, tuple)) else label


def runs_on(label: Label) -> str | list[str]:
    """The `runs-on:` value of a label."""
    return list(label) if isinstance(label, tuple) else label


def label_text(label: Label) -> str:
    """A label for a comment: 'self-hosted, linux, gpu-h100'."""
    return ", ".join(label) if isinstance(label, tuple) else label


def is_hosted(label: Label, hosted: Collection[str]) -> bool:
    """A GitHub-hosted runner: exactly one label, and one of the hosted labels."""
    labels = label if isinstance(label, tuple) else (label,)
    return len(labels) == 1 and labels[0] in hosted


def control_label(mf: MatrixFile, hosted: Collection[str]) -> str:
    """Where plan, publish and status run: the CPU build runner when hosted, else the default."""
    cpu = runner_label(mf.matrix.runners.build.get("cpu"))
    if isinstance(cpu, str) and is_hosted(cpu, hosted):
        return cpu
    return load_ecosystem().default_runner


def smoke_group(family: str, platform: str) -> str:
    """The smoke jobs a wheel goes to: `cuda`, or `cuda-aarch64` (an ARM machine's runner)."""
    return f"{family}-aarch64" if platform == "linux_aarch64" else family


def group_family(group: str) -> str:
    """`cuda-aarch64` → `cuda`."""
    return group.split("-", 1)[0]


def _smoke_table(mf: MatrixFile, group: str) -> dict[str, str | list[str]]:
    runners = mf.matrix.runners
    table = runners.linux_aarch64.smoke if group.endswith("-aarch64") else runners.smoke
    return {str(k): v for k, v in table.items()}


def smoke_label(mf: MatrixFile, group: str) -> Label:
    """The smoke runner of a group (`cuda`: runners.smoke.cuda, `cuda-aarch64`:
    runners.linux_aarch64.smoke.cuda); KeyError when it has none."""
    return runner_label(_smoke_table(mf, group)[group_family(group)])


def _groups(plan: Plan) -> list[str]:
    present = {smoke_group(family_of(j), j.platform) for j in plan.jobs}
    order = [g for f in layout.FAMILIES for g in (f, f"{f}-aarch64")]
    return [g for g in order if g in present]


def smoke_families(mf: MatrixFile, plan: Plan) -> list[tuple[str, Label]]:
    """(group, smoke runner) for each smoke group of the plan that has a smoke runner."""
    return [
        (g, smoke_label(mf, g)) for g in _groups(plan) if group_family(g) in _smoke_table(mf, g)
    ]


def unsmoked_families(mf: MatrixFile, plan: Plan) -> list[str]:
    """The groups of the plan without a smoke runner: built only when asked, never published."""
    return [g for g in _groups(plan) if group_family(g) not in _smoke_table(mf, g)]


def custom_labels(mf: MatrixFile, hosted: Collection[str]) -> list[str]:
    """The self-hosted labels of runners.build / runners.smoke actionlint must be told of."""
    runners = mf.matrix.runners
    labels: set[str] = set()
    arm = runners.linux_aarch64
    for table in (runners.build, runners.smoke, arm.build, arm.smoke):
        for value in table.values():
            for label in [value] if isinstance(value, str) else value:
                if label not in _PRESET_LABELS and label not in hosted:
                    labels.add(label)
    return sorted(labels)
