"""What the job promised about the wheel it built: the checks compare the wheel with this."""

from __future__ import annotations

__all__ = ["Expectation"]

from dataclasses import dataclass
from typing import Literal

from ...model import AbiMode, BuildJob


@dataclass(frozen=True, kw_only=True)
class Expectation:
    """What the job promised about the wheel it built."""

    accelerator: str = "cpu"
    arch_list: str | None = None  # TORCH_CUDA_ARCH_LIST / PYTORCH_ROCM_ARCH
    platform_tag: str | None = None
    weaker_platform_tag: Literal["error", "warning"] = "error"
    local_version: str | None = None  # e.g. "pt211cu130"
    requires_dist_torch: str | None = None  # e.g. "torch==2.11.*"
    build_record: bool = True
    cells: tuple[str, ...] = ()  # the cell ids the wheel serves (python-coverage)
    abi: AbiMode | None = None
    # wheel-size thresholds in bytes (None: the defaults of data/ecosystem.json)
    size_warning: int | None = None
    size_error: int | None = None
    # accelerators.<name>.arch_flags: under `enforce` device code beyond the list is an error
    arch_flags: Literal["keep", "enforce"] = "keep"

    @classmethod
    def from_job(
        cls,
        job: BuildJob,
        *,
        weaker_platform_tag: Literal["error", "warning"] = "error",
        size_warning: int | None = None,
        size_error: int | None = None,
    ) -> Expectation:
        """What `job` promised (accelerator, archs, tag, local label, torch pin)."""
        return cls(
            accelerator=job.accelerator.name,
            arch_list=job.toolkit.arch_list if job.toolkit else None,
            platform_tag=job.platform_tag,
            weaker_platform_tag=weaker_platform_tag,
            local_version=job.local_version or None,
            requires_dist_torch=job.requires_dist or None,
            cells=job.cell_ids,
            abi=job.abi,
            size_warning=size_warning,
            size_error=size_error,
            arch_flags=job.toolkit.arch_flags if job.toolkit else "keep",
        )
