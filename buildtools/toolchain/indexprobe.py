"""Is the PyTorch index of a job reachable? One quick request before pip retries per package.

An unreachable torch index is skipped with a note: pip then uses its configured indexes,
and the installed torch is verified against the cell either way.
"""

from __future__ import annotations

__all__ = ["index_hint", "index_reachable", "job_index"]

from pathlib import Path

from ..context import RunContext
from ..ecosystem import load_ecosystem
from ..model import Accelerator, BuildJob
from .venv import child_env

_PROBE_SECONDS = 30.0
# run by the job's interpreter (its proxy settings, its certificates), which may not have
# buildtools: urllib there; the socket timeout bounds each read, the runner the whole probe
_PROBE_INDEX = (
    "import sys, urllib.request\n"
    "try:\n"
    "    urllib.request.urlopen(sys.argv[1], timeout=10).close()\n"
    "except Exception as exc:\n"
    "    print(f'unreachable: {exc}')\n"
    "    sys.exit(1)\n"
)


def index_hint(accelerator: Accelerator) -> str:
    """PyTorch's own index of an accelerator's builds, e.g. …/whl/cu130."""
    return f"{load_ecosystem().pytorch_index}/{accelerator.name}"


def index_reachable(index: str, python: Path, *, ctx: RunContext) -> bool:
    """Whether `index` answers for torch (asked by `python`, so through its proxy settings)."""
    runner, log, env = ctx.processes, ctx.stream, ctx.env
    url = index.rstrip("/") + "/torch/"
    result = runner.run(
        [str(python), "-c", _PROBE_INDEX, url],
        env=child_env(env),
        capture=True,
        timeout=_PROBE_SECONDS,  # the whole probe: a server that drips its answer is left
    )
    if result.ok:
        return True
    log.write(
        f"[toolchain] the torch index {index} is unreachable ({result.output.strip()}); "
        "using pip's configured indexes instead — the installed torch is still verified "
        "against the cell\n"
    )
    return False


def job_index(job: BuildJob, python: Path, *, ctx: RunContext) -> str | None:
    """The job's torch index where it is reachable, else None (pip's configured indexes)."""
    if job.torch_index and index_reachable(job.torch_index, python, ctx=ctx):
        return job.torch_index
    return None
