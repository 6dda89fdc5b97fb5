"""Runner labels of matrix.yaml `runners:` as the workflows use them.

A label is one string (`ubuntu-24.04`) or a list of labels a self-hosted runner must all
carry. Which runners are GitHub-hosted decides where a pull request from a fork may run;
the others are declared to actionlint.
"""

from __future__ import annotations

__all__ = [
    "Label",
    "arm_smoke_families",
    "arm_unsmoked_families",
    "custom_labels",
    "is_hosted",
    "label_text",
    "runner_label",
    "runs_on",
    "smoke_families",
    "unsmoked_families",
]

from ..ecosystem import load_ecosystem
from ..matrix.config import MatrixFile
from ..planner import Plan
from . import layout

_HOSTED_PREFIXES = ("ubuntu-", "windows-", "macos-")
# Labels actionlint knows without configuration (GitHub-hosted images, self-hosted defaults).
_KNOWN_LABELS = {"self-hosted", "linux", "macos", "windows", "x64", "arm", "arm64"}

Label = str | tuple[str, ...]


def runner_label(label: str | list[str] | None) -> Label:
    """A `runners:` entry as a label (a list becomes a tuple); the default runner if unset."""
    if label is None:
        return load_ecosystem().default_runner
    return tuple(label) if isinstance(label, list) else label


def runs_on(label: Label) -> str | list[str]:
    """The `runs-on:` value of a label."""
    return list(label) if isinstance(label, tuple) else label


def label_text(label: Label) -> str:
    """A label for a comment: 'self-hosted, linux, gpu-h100'."""
    return ", ".join(label) if isinstance(label, tuple) else label


def is_hosted(label: Label) -> bool:
    """A GitHub-hosted runner (`ubuntu-24.04`, …): safe for pull requests from forks."""
    labels = label if isinstance(label, tuple) else (label,)
    return len(labels) == 1 and labels[0].startswith(_HOSTED_PREFIXES)


def _present(plan: Plan, platform: str) -> set[str]:
    return {j.accelerator.kind for j in plan.jobs if j.platform == platform}


def smoke_families(mf: MatrixFile, plan: Plan) -> list[tuple[str, Label]]:
    """(family, smoke runner) for each family of the plan's x86 jobs that has a smoke runner."""
    present = _present(plan, "linux_x86_64")
    smoke = mf.matrix.runners.smoke
    return [(f, runner_label(smoke[f])) for f in layout.FAMILIES if f in present and f in smoke]


def unsmoked_families(mf: MatrixFile, plan: Plan) -> list[str]:
    """The families of the plan's x86 jobs without a smoke runner: built, never published."""
    present = _present(plan, "linux_x86_64")
    return [f for f in layout.FAMILIES if f in present and f not in mf.matrix.runners.smoke]


def arm_smoke_families(mf: MatrixFile, plan: Plan) -> list[tuple[str, Label]]:
    """(family, aarch64 smoke runner) for each family of the plan's aarch64 jobs with one."""
    present = _present(plan, "linux_aarch64")
    smoke = mf.matrix.runners.linux_aarch64.smoke
    return [(f, runner_label(smoke[f])) for f in layout.FAMILIES if f in present and f in smoke]


def arm_unsmoked_families(mf: MatrixFile, plan: Plan) -> list[str]:
    """The families of the plan's aarch64 jobs without an aarch64 smoke runner."""
    present = _present(plan, "linux_aarch64")
    smoke = mf.matrix.runners.linux_aarch64.smoke
    return [f for f in layout.FAMILIES if f in present and f not in smoke]


def custom_labels(mf: MatrixFile) -> list[str]:
    """The self-hosted labels of runners.build / runners.smoke actionlint must be told of."""
    runners = mf.matrix.runners
    labels: set[str] = set()
    arm = runners.linux_aarch64
    for table in (runners.build, runners.smoke, arm.build, arm.smoke):
        for value in table.values():
            for label in [value] if isinstance(value, str) else value:
                if label not in _KNOWN_LABELS and not label.startswith(_HOSTED_PREFIXES):
                    labels.add(label)
    return sorted(labels)
