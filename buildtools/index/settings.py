"""How the index's pages link and alias: matrix.yaml `index:`, overridden by CLI options."""

from __future__ import annotations

__all__ = ["IndexSettings"]

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class IndexSettings:
    """How pages link and alias (matrix.yaml `index:`, overridden by CLI options)."""

    base_url: str | None = None
    wheel_url: str | None = None
    alias_patches: bool = True
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # accelerator name → the index torch comes from (matrix.yaml `accelerators: torch_index`);
    # the install commands name it. Unset: PyTorch's index of the accelerator, where PyPI's
    # torch is another build
    torch_indexes: Mapping[str, str] = field(default_factory=dict)
    # matrix.yaml index.wheel_variants: publish PEP 825 variant wheels beside the ordinary
    # ones (`variantindex`), at a version whose local label is `local_version`'s without
    # the accelerator ('pt{torch_major}{torch_minor}{accelerator}' → +pt213)
    wheel_variants: bool = False
    local_version: str = "pt{torch_major}{torch_minor}{accelerator}"

    def __post_init__(self) -> None:
        if self.base_url is not None:
            object.__setattr__(self, "base_url", self.base_url.rstrip("/") or None)
