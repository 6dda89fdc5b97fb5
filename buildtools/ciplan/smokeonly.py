"""Release day for a stable-ABI window in a release run: smoke-only legs, no build.

A torch released after a published stable-ABI wheel, inside its `Requires-Dist` range, is
promised by that wheel, not proven (`index.published.window_cells`). The backfill starts
`release.yml` with such cells as its `window` input; the plan job (which has just read and
authenticated the published record) turns each into a leg of `smoke-window-<family>`: the
wheel's file name, its URL and its sha256 **from the record**, and the torch to prove.
The leg downloads that wheel, refuses other bytes, and runs `smoke --window-torch` on a
runner of the wheel's family; nothing is built.

The plan job also outputs, per family, the wheels those legs may hand to the publish as
`{"wheels_window": "sha256:name …"}`: the same shape a build leg's outputs have, so the
prepare job's selection and the signing job's bundle check treat a window wheel exactly as
a wheel this run built (its bytes bound by a job output no other job can set), and a
window wheel is published only on a report a smoke leg of its own family reported.
"""

from __future__ import annotations

__all__ = [
    "WINDOW_LEGS",
    "WINDOW_OUTPUT_KEY",
    "window_families",
    "window_job",
    "window_outputs",
    "window_rows",
]

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from packaging.utils import parse_wheel_filename

from ..errors import PlanError
from ..index.manifest import IndexedWheel
from . import layout
from .entries import MatrixEntry

# the key of the plan's per-family output that stands for a build leg's `wheels_<leg>`
WINDOW_OUTPUT_KEY = "wheels_window"
# the legs a smoke-window job declares outputs for (`report_<leg>`): a release day brings a
# release or two, each a leg per window cell
WINDOW_LEGS = 8


def window_families(smoke_groups: Iterable[str]) -> list[str]:
    """The families release.yml has a smoke-only job for: those smoke-tested on an x86_64
    CPU runner. `smoke --window-torch` tests a stable wheel on other torch releases on a CPU
    runner only (`smoke.wheels.plan_targets`); a GPU runner's smoke of a window is not built."""
    return [g for g in smoke_groups if g == "cpu"]


def window_job(family: str) -> str:
    """The smoke-only job of `family` in release.yml: `smoke-window-cpu`."""
    return f"smoke-window-{family}"


def _torch_of(cell: str) -> str:
    """The torch release of a cell id (`torch2.14.0-cpu-cp311` → `2.14.0`)."""
    head = cell.split("-", 1)[0]
    if not head.startswith("torch") or len(head) <= len("torch"):
        raise PlanError(f"--window {cell}: not a cell id (torch<version>-<accelerator>-<python>)")
    return head.removeprefix("torch")


def window_rows(
    asked: Sequence[str],
    inside: Mapping[str, str],
    wheels: Sequence[IndexedWheel],
    entries: Sequence[MatrixEntry],
) -> dict[str, list[dict[str, Any]]]:
    """family → the matrix rows of its smoke-only legs, one per asked cell.

    `inside`: cell id → the published window wheel that admits it (`window_cells` of the
    authenticated record); `wheels`: the record's wheels; `entries`: the full plan's entries
    (the job that covers the cell says where it is smoke-tested). A cell outside every
    published window, or whose job has no smoke runner, is refused: it needs a build, and a
    smoke-only run could not publish it.
    """
    by_name = {w.filename: w for w in wheels}
    rows: dict[str, list[dict[str, Any]]] = {}
    for cell in dict.fromkeys(asked):
        torch = _torch_of(cell)
        name = inside.get(cell)
        if name is None:
            raise PlanError(
                f"--window {cell}: no published stable-ABI wheel's window admits it without "
                "proof (already published, outside every range, or not a cell of the release "
                "profile); run `buildtools ci backfill --tag TAG` to see what it lacks, and pass "
                "the cell to `only` if it needs a build"
            )
        wheel = by_name[name]
        entry = next((e for e in entries if cell in e.cells), None)
        if entry is None or entry.smoke_runner is None:
            raise PlanError(
                f"--window {cell}: its job has no smoke runner (runners.smoke): a smoke-only "
                "run cannot prove it"
            )
        if not wheel.url or not wheel.url.startswith("https://"):
            raise PlanError(
                f"--window {cell}: the record links {name} as {wheel.url or 'a file of the site'}"
                ", not an https URL of a release asset; a smoke-only leg downloads it from there"
            )
        parse_wheel_filename(name)  # the record was checked at load; a name is a file name
        rows.setdefault(entry.family, []).append(
            {
                **entry.view(("family", "python_versions", "smoke")),
                "id": cell,
                "wheel": name,
                "sha256": wheel.sha256,
                "url": wheel.url,
                "window_torch": torch,
                "reproduce": f"buildtools smoke --window-torch {torch} {name}",
            }
        )
    return rows


def window_outputs(
    rows: Mapping[str, Sequence[Mapping[str, Any]]], families: Sequence[str]
) -> dict[str, str]:
    """The plan job's outputs for the window legs of `families` (each family's matrix, its
    `run_` flag, and the wheels its legs may hand to the publish)."""
    out: dict[str, str] = {}
    for family in families:
        job = window_job(family)
        legs = list(rows.get(family, ()))
        if len(legs) > WINDOW_LEGS:
            raise PlanError(
                f"--window: {len(legs)} {family} cells, but a smoke-window job reports at most "
                f"{WINDOW_LEGS}; start the backfill again for the rest (the next run skips "
                "what this one proved)"
            )
        out[layout.output_name(job)] = json.dumps({"include": legs}, sort_keys=True)
        out[layout.run_flag(job)] = "true" if legs else "false"
        tokens = " ".join(sorted({f"{r['sha256']}:{r['wheel']}" for r in legs}))
        out[f"window_built_{family}"] = json.dumps({WINDOW_OUTPUT_KEY: tokens})
    extra = sorted(set(rows) - set(families))
    if extra:
        raise PlanError(
            f"--window: no smoke-only job for the {', '.join(extra)} family: a stable wheel's "
            "window is smoke-tested on a CPU runner only (smoke --window-torch), so a GPU "
            "wheel's new torch is not proven by a smoke-only run; leave the cell out of "
            "`window` (or regenerate the workflows if this matrix.yaml smokes CPU wheels)"
        )
    return out
