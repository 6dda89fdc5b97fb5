"""Which device code runs on which GPU: a cubin of its arch, PTX the driver JIT-compiles, or none.

The rule doctor applies to an installed package and smoke to a wheel before it spends a
GPU runner's time on it; both read the archs from the ELF files (`elf.DeviceCode`).
"""

from __future__ import annotations

__all__ = ["device_code_runs"]

import re
from typing import Literal

from ..torchinstall import GpuInfo
from .elf import DeviceCode

_ARCH_RE = re.compile(r"^(?P<kind>sm|compute|lto)_(?P<digits>\d{2,3})(?P<suffix>[af]?)$")


def _arch_tuple(digits: str) -> tuple[int, int]:
    return int(digits[:-1]), int(digits[-1])


def device_code_runs(code: DeviceCode, gpu: GpuInfo) -> Literal["native", "ptx", "no"]:
    """Whether device code runs on `gpu`: a matching cubin, only via PTX JIT, or not at all.

    A cubin sm_XY runs on the same major with minor >= Y; sm_XYa only on exactly X.Y;
    sm_XYf on its family (same major, minor >= Y). PTX compute_XY is JIT-compiled for any
    GPU of capability >= X.Y. HIP code objects match their gfx target exactly. LTO IR
    (lto_XY) is link-time input, never loaded by the driver.
    """
    if code.kind == "hip":
        return "native" if gpu.gcn_arch and gpu.arch in code.archs else "no"
    if gpu.capability is None:
        return "no"
    have = gpu.capability
    result: Literal["native", "ptx", "no"] = "no"
    for arch in code.archs:
        m = _ARCH_RE.match(arch)
        if m is None or m["kind"] == "lto":
            continue
        want = _arch_tuple(m["digits"])
        suffix = m["suffix"]
        if suffix == "a":
            fits = want == have
        else:  # plain and family-specific: same major (cubin) or older (PTX)
            fits = want[0] == have[0] and want[1] <= have[1]
            if m["kind"] == "compute" and not suffix:
                fits = want <= have
        if not fits:
            continue
        if m["kind"] == "sm":
            return "native"
        result = "ptx"
    return result
