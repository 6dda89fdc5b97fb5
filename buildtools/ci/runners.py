"""Runner labels of matrix.yaml `runners:` as the workflows use them, and which are hosted.

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
    "is_hosted",
    "label_text",
    "present_families",
    "runner_label",
    "runs_on",
    "smoke_families",
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


def present_families(plan: Plan) -> list[str]:
    """The families the plan has jobs of, in the order of `layout.FAMILIES`."""
    present = {family_of(j) for j in plan.jobs}
    return [f for f in layout.FAMILIES if f in present]


def smoke_label(mf: MatrixFile, family: str) -> Label:
    """The smoke runner of `family` (matrix.yaml runners.smoke); KeyError when it has none."""
    table = {str(k): v for k, v in mf.matrix.runners.smoke.items()}
    return runner_label(table[family])


def smoke_families(mf: MatrixFile, plan: Plan) -> list[tuple[str, Label]]:
    """(family, smoke runner) for each family of the plan that has a smoke runner."""
    smoke = mf.matrix.runners.smoke
    return [(f, runner_label(smoke[f])) for f in present_families(plan) if f in smoke]


def unsmoked_families(mf: MatrixFile, plan: Plan) -> list[str]:
    """The families of the plan without a smoke runner: built only when asked, never published."""
    return [f for f in present_families(plan) if f not in mf.matrix.runners.smoke]


def custom_labels(mf: MatrixFile, hosted: Collection[str]) -> list[str]:
    """The self-hosted labels of runners.build / runners.smoke actionlint must be told of."""
    runners = mf.matrix.runners
    labels: set[str] = set()
    for table in (runners.build, runners.smoke):
        for value in table.values():
            for label in [value] if isinstance(value, str) else value:
                if label not in _PRESET_LABELS and label not in hosted:
                    labels.add(label)
    return sorted(labels)
