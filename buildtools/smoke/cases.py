"""What the project's smoke command tells the runner: the device it must use, the cases it ran.

The smoke command runs with two variables set:

- `BUILDTOOLS_SMOKE_DEVICE`: `cuda` or `rocm` for a GPU wheel on a GPU runner (the runner's
  accelerator), else `cpu` (a CPU wheel, a CPU runner). With `cuda`/`rocm` the command must
  test the device, and fail when it sees none, instead of falling back to its CPU cases (the
  example's `smoke.py` does so).
- `BUILDTOOLS_SMOKE_CASES`: a file path where the command may write what it ran, as JSON
  (`torch-buildtools/smoke-cases/v1`):

  ```json
  {"schema": "torch-buildtools/smoke-cases/v1",
   "device": {"type": "cuda", "name": "NVIDIA H100 80GB HBM3", "capability": "9.0"},
   "cases": [{"device": "cuda", "name": "float32 src=(1000,) dim_size=10", "ok": true}]}
  ```

The runner copies the device and the names of the device cases into its report. A command
that writes the file on a GPU runner and ran no case on the device fails the wheel; one that
writes nothing is reported as "not reported" (a project's pytest run, say). The file is the
project's output, so it is read as untrusted: bounded in size, every field type-checked.
"""

from __future__ import annotations

__all__ = [
    "CASES_ENV",
    "CASES_SCHEMA",
    "DEVICE_ENV",
    "CasesReport",
    "read_cases",
]

import errno
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..files import read_regular
from ..jsonfields import decode_json
from ..untrusted import printable

CASES_ENV = "BUILDTOOLS_SMOKE_CASES"
DEVICE_ENV = "BUILDTOOLS_SMOKE_DEVICE"
CASES_SCHEMA = "torch-buildtools/smoke-cases/v1"
_MAX_BYTES = 1 << 20
_MAX_CASES = 10_000
_MAX_NAMES = 500  # device case names copied into the report
_MAX_TEXT = 200


@dataclass(frozen=True, kw_only=True)
class CasesReport:
    """The smoke command's own account of what it ran (`BUILDTOOLS_SMOKE_CASES`)."""

    device: str | None  # "cuda: NVIDIA H100 80GB HBM3 (capability 9.0)"; None: no device used
    counts: Mapping[str, int]  # cases per device type: {"cpu": 24, "cuda": 32}
    device_cases: tuple[str, ...]  # names of the cases that ran on a GPU
    failed: int

    @property
    def ran_on_device(self) -> int:
        return sum(n for kind, n in self.counts.items() if kind != "cpu")

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "counts": dict(sorted(self.counts.items())),
            "device_cases": list(self.device_cases),
            "failed": self.failed,
        }


def _text(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    return printable(value[:_MAX_TEXT], newlines=False)


def read_cases(path: Path) -> CasesReport | str | None:
    """The report at `path`; None when the command wrote none; a string saying what is wrong."""
    try:
        raw = read_regular(path, max_bytes=_MAX_BYTES)  # the command wrote it: no FIFO
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.EFBIG:
            return f"{path.name} is larger than {_MAX_BYTES} bytes"
        return f"cannot read {path.name}: {exc.strerror or exc}"
    try:
        data = decode_json(raw, what=path.name, max_bytes=_MAX_BYTES)
    except ValueError as exc:
        return f"{path.name} is not JSON: {exc}"
    if not isinstance(data, dict) or data.get("schema") != CASES_SCHEMA:
        return f"{path.name}: schema is not {CASES_SCHEMA!r}"
    cases = data.get("cases")
    if not isinstance(cases, list) or len(cases) > _MAX_CASES:
        return f"{path.name}: cases must be a list of at most {_MAX_CASES} objects"
    counts: dict[str, int] = {}
    names: list[str] = []
    failed = 0
    for i, case in enumerate(cases):
        kind = _text(case.get("device")) if isinstance(case, dict) else None
        if kind is None or not isinstance(case.get("ok"), bool):
            return f"{path.name}: cases[{i}] needs a string device and a boolean ok"
        counts[kind] = counts.get(kind, 0) + 1
        failed += not case["ok"]
        if kind != "cpu" and len(names) < _MAX_NAMES:
            names.append(f"{kind} {_text(case.get('name')) or f'case {i}'}")
    device = data.get("device")
    described = None
    if isinstance(device, dict):
        kind, name, cap = (_text(device.get(k)) for k in ("type", "name", "capability"))
        described = f"{kind or 'device'}: {name or 'unnamed'}" + (
            f" (capability {cap})" if cap else ""
        )
    return CasesReport(device=described, counts=counts, device_cases=tuple(names), failed=failed)
