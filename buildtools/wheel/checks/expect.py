"""What a build promised about the wheel it built: the checks compare the wheel with this.

One builder, `Expectation.of`, for both places that check a wheel: `buildtools build` right
after it wrote the wheel's build record, and `buildtools check` reading that record back.
Both read the promise from the record and the wheel-size thresholds from matrix.yaml's
`build:`, so a standalone check judges a wheel as the build that made it did.
"""

from __future__ import annotations

__all__ = ["Expectation"]

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ...model import ABI_MODES, AbiMode, BuildJob, BuildRecord

if TYPE_CHECKING:
    from ...matrix.config import BuildSettings


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
    def of(
        cls,
        record: BuildRecord | None,
        *,
        settings: BuildSettings | None = None,
        job: BuildJob | None = None,
    ) -> Expectation:
        """What a wheel is checked against: what its build `record` says the build promised
        (accelerator, archs, platform tag and how a weaker one was judged, torch pin, cells,
        ABI mode; a CPU wheel with no promise without one), with the wheel-size thresholds
        of matrix.yaml's `build:` (`settings`; None: the defaults). The build that wrote the
        record passes its `job` too, for what the record does not keep: the local version
        label and the accelerator's `arch_flags`."""
        toolkit = job.toolkit if job else None
        return cls(
            accelerator=record.accelerator.name if record else "cpu",
            arch_list=record.arch_list if record else None,
            platform_tag=record.promised_platform_tag if record else None,
            weaker_platform_tag=(
                "warning" if record and record.weaker_platform_tag == "warning" else "error"
            ),
            local_version=(job.local_version or None) if job else None,
            requires_dist_torch=(record.torch_requirement or None) if record else None,
            cells=record.cells if record else (),
            abi=next((mode for mode in ABI_MODES if record and mode == record.abi), None),
            size_warning=settings.size_warning if settings else None,
            size_error=settings.size_error if settings else None,
            arch_flags=toolkit.arch_flags if toolkit else "keep",
        )
