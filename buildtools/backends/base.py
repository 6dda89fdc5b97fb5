"""The backend protocol: where the compiler runs, turning a job + toolchain into raw wheels."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import IO, Protocol

from ..model import BuildJob
from ..runner import Runner
from ..toolchain.envs import Toolchain

__all__ = ["Backend"]


class Backend(Protocol):
    """Where the compiler runs: it turns a job + toolchain into raw wheel(s).

    `needs_host_toolkit`: the host toolchain compiles (else it holds torch only, for the
    checks). `repairs_inside`: build_raw returns wheels already repaired, so build_job
    skips the host repair (the docker backend repairs in the container, where the wheel's
    dependencies live).
    """

    name: str
    needs_host_toolkit: bool
    repairs_inside: bool

    def preflight(self, runner: Runner) -> None:
        """Raise ToolMissingError before any job when what the backend needs is missing."""
        ...

    def build_raw(
        self,
        job: BuildJob,
        toolchain: Toolchain,
        *,
        project_dir: Path,
        out_dir: Path,
        build_dir: Path,
        env: Mapping[str, str],
        runner: Runner,
        log: IO[str],
    ) -> list[Path]: ...
