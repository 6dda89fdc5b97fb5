"""How a setup.py probes the build machine for CUDA/ROCm (`data/source_risks.yaml`, host_probes).

A setup.py that adds its CUDA extension when `nvcc` runs or `CUDA_HOME` is set decides by the
machine, not by the cell: on a machine with a CUDA toolkit its CPU cell would add the CUDA
module. buildtools hides what it can from a CPU cell's build (`toolchain.blind`); `hidden`
says whether a probe is among those.
"""

from __future__ import annotations

__all__ = ["HostProbe", "host_probes", "load_host_probes"]

import re
from dataclasses import dataclass
from functools import cache

from ruamel.yaml import YAML

from ..knowledge import DATA_DIR


@dataclass(frozen=True, kw_only=True)
class HostProbe:
    """One way of probing the machine: its name ('runs nvcc'), and whether it is hidden."""

    name: str
    pattern: re.Pattern[str]
    hidden: bool


@cache
def load_host_probes() -> tuple[HostProbe, ...]:
    """The host_probes rows of data/source_risks.yaml; a malformed row fails loudly."""
    path = DATA_DIR / "source_risks.yaml"
    rows = YAML(typ="safe").load(path.read_text(encoding="utf-8"))["host_probes"]
    out = []
    for i, row in enumerate(rows):
        try:
            if not row.get("source") or not isinstance(row["hidden"], bool):
                raise KeyError("source, hidden (true/false)")
            out.append(
                HostProbe(
                    name=str(row["name"]), pattern=re.compile(row["pattern"]), hidden=row["hidden"]
                )
            )
        except (KeyError, TypeError, AttributeError, re.error) as exc:
            raise ValueError(f"{path}: host_probes[{i}]: {exc}") from exc
    return tuple(out)


def host_probes(setup_code: str) -> tuple[HostProbe, ...]:
    """The probes `setup_code` (setup.py without its comments) makes."""
    return tuple(p for p in load_host_probes() if p.pattern.search(setup_code))
