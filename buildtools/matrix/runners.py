"""matrix.yaml `runners:`: where each job builds and is smoke-tested (GitHub Actions labels).

`build` and `smoke` are the linux_x86_64 runners per accelerator family; `linux_aarch64`
holds the ARM ones (Grace Hopper / Grace Blackwell wheels), whose builds default to a
native ARM runner (`arm_runner` in data/ecosystem.json) and may instead run emulated on the
x86 runner. The planner asks `Runners.build_runner` / `smoke_runner` per job.
"""

from __future__ import annotations

__all__ = ["Aarch64Runners", "Family", "Label", "RunnerLabel", "Runners"]

from typing import Literal

from pydantic import Field, field_validator

from ..ecosystem import load_ecosystem
from .fields import Label, RunnerLabel, Strict

Family = Literal["cpu", "cuda", "rocm"]


def _default_build_runners() -> dict[Family, RunnerLabel]:
    label = load_ecosystem().default_runner
    return {"cpu": label, "cuda": label, "rocm": label}


def _default_arm_build_runners() -> dict[Family, RunnerLabel]:
    label = load_ecosystem().arm_runner
    return {"cpu": label, "cuda": label}


class Aarch64Runners(Strict):
    """Runners of the linux_aarch64 jobs (Grace Hopper / Grace Blackwell wheels).

    Builds run natively on ARM runners unless a family is listed in `emulate`: those build
    on the family's x86 runner (`runners.build`) under QEMU user emulation, slower but
    needing no ARM runner. Smoke tests need an aarch64 machine (a GH200 for CUDA); a family
    without one is built and never published, as for x86.
    """

    build: dict[Family, RunnerLabel] = Field(default_factory=_default_arm_build_runners)
    smoke: dict[Family, RunnerLabel] = Field(default_factory=dict)
    emulate: list[Family] = Field(default_factory=list)

    @field_validator("emulate")
    @classmethod
    def _no_duplicates(cls, value: list[Family]) -> list[Family]:
        dup = sorted({f for f in value if value.count(f) > 1})
        if dup:
            raise ValueError(f"{', '.join(dup)} listed twice")
        return value


class Runners(Strict):
    """GitHub Actions runner labels per accelerator family, for builds and GPU smoke tests.

    `build` and `smoke` are the linux_x86_64 runners; `linux_aarch64` holds the ARM ones.
    """

    build: dict[Family, RunnerLabel] = Field(default_factory=_default_build_runners)
    smoke: dict[Family, RunnerLabel] = Field(default_factory=dict)
    linux_aarch64: Aarch64Runners = Field(default_factory=Aarch64Runners)

    def build_runner(self, family: Family, platform: str) -> RunnerLabel:
        """Where a job of `family` on `platform` builds (an emulated aarch64 one: on x86)."""
        arm = self.linux_aarch64
        if platform == "linux_aarch64" and family not in arm.emulate:
            return arm.build.get(family) or load_ecosystem().arm_runner
        return self.build.get(family) or load_ecosystem().default_runner

    def smoke_runner(self, family: Family, platform: str) -> RunnerLabel | None:
        """Where a job of `family` on `platform` is smoke-tested; None: never published."""
        table = self.linux_aarch64.smoke if platform == "linux_aarch64" else self.smoke
        return table.get(family)

    def emulated(self, family: Family, platform: str) -> bool:
        """True when the job builds on an x86 runner under QEMU."""
        return platform == "linux_aarch64" and family in self.linux_aarch64.emulate
