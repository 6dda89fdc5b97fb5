"""What a compiling job shows: the table's unit columns, and in a CI log a line at most every
`interval` seconds (a fake clock: no sleeping, no timing asserted)."""

from __future__ import annotations

import io

import pytest

from buildtools.wheelbuild.compileunits import RunningUnit, UnitProgress
from buildtools.wheelbuild.progress import Progress, describe_units, estimate_remaining

JOB = "torch2.11.0-cu130-cp312"
LONGEST = RunningUnit(name="csrc/x.cu", seconds=241.0, archs=9, step="arch 3/9 sm_90 ptxas")
SHORTER = RunningUnit(name="csrc/y.cu", seconds=12.0, archs=9)


def _progress(
    out: io.StringIO, now: list[float], *, expected: dict[str, float] | None = None
) -> Progress:
    return Progress(
        [JOB], out=out, live=False, expected=expected, clock=lambda: now[0], interval=30.0
    )


def _units(done: int, total: int | None, elapsed: float, **kw: object) -> UnitProgress:
    return UnitProgress(done=done, total=total, elapsed=elapsed, **kw)  # type: ignore[arg-type]


def test_a_long_compile_prints_a_line_at_most_every_interval() -> None:
    out, now = io.StringIO(), [0.0]
    progress = _progress(out, now)
    now[0] = 12.4
    progress.stage(JOB, "build")
    for t in (20.0, 40.0, 42.4, 50.0, 72.4, 90.0):
        now[0] = t
        progress.units(JOB, _units(7, 12, t - 12.4, running=(LONGEST, SHORTER, SHORTER)))
    lines = [ln for ln in out.getvalue().splitlines() if "units" in ln]
    # 30 s after the stage line (42.4), then 30 s after that one (72.4): nothing between
    assert [ln.split("]")[0] for ln in lines] == ["[  42.4s", "[  72.4s"]
    assert lines[0] == (
        f"[  42.4s] {JOB}: build 7/12 units, 3 running (longest: csrc/x.cu 241 s, 9 archs, "
        "arch 3/9 sm_90 ptxas), ETA 21 s"  # 7 units in 30 s: 5 more in 21 s
    )


def test_a_short_build_prints_nothing_more() -> None:
    out, now = io.StringIO(), [0.0]
    progress = _progress(out, now)
    progress.stage(JOB, "build")
    for t in (2.0, 10.0, 29.9):
        now[0] = t
        progress.units(JOB, _units(t > 5, 2, t))
    now[0] = 31.0
    progress.stage(JOB, "repair")
    progress.finish(JOB, "built")
    assert "units" not in out.getvalue()
    assert [ln.split(": ", 1)[1] for ln in out.getvalue().splitlines()] == [
        "build",
        "repair",
        "built",
    ]


def test_the_eta_comes_from_the_jobs_timing_else_from_its_units() -> None:
    out, now = io.StringIO(), [0.0]
    progress = _progress(out, now, expected={JOB: 600.0})
    progress.stage(JOB, "build")
    now[0] = 100.0
    progress.units(JOB, _units(1, 10, 100.0))
    assert progress.job_eta(JOB) == (500.0, False)  # the recorded 600 s, not the units' 900
    now[0] = 700.0  # it ran longer than last time: the units say how long is left
    progress.units(JOB, _units(7, 10, 700.0))
    eta, bound = progress.job_eta(JOB)
    assert eta == pytest.approx(300.0) and not bound
    bare = _progress(io.StringIO(), [0.0])
    assert bare.job_eta(JOB) == (None, False)  # not compiling, never built here


def test_a_serial_build_says_its_total_and_eta_are_bounds() -> None:
    out, now = io.StringIO(), [0.0]
    progress = _progress(out, now)
    progress.stage(JOB, "build")
    now[0] = 40.0
    running = (RunningUnit(name="csrc/c.cpp", seconds=5.0),)
    progress.units(JOB, _units(2, 8, 40.0, bounded=True, running=running))
    assert (
        out.getvalue()
        .splitlines()[-1]
        .endswith(
            "build 2 of at most 8 units, 1 running (longest: csrc/c.cpp 5 s), ETA at most 2 min 00 s"
        )
    )


def test_describe_says_what_is_unknown() -> None:
    assert describe_units(_units(0, None, 5.0), None) == "no compile units seen yet, ETA unknown"
    assert describe_units(_units(3, None, 5.0), None) == "3 units done, total unknown, ETA unknown"
    assert describe_units(_units(0, 4, 5.0, running=()), None) == "0/4 units, ETA unknown"
    assert describe_units(_units(4, 4, 5.0), 0.0) == "4/4 units, ETA 0 s"


def test_the_run_eta_counts_a_compiling_job_by_its_units() -> None:
    # b has no known duration and no job finished yet: only its units say how long it takes
    assert estimate_remaining({"a": 100.0, "b": None}, {"a": 40.0}, {}, concurrent=1) is None
    assert estimate_remaining(
        {"a": 100.0, "b": None}, {"a": 40.0, "b": 10.0}, {}, concurrent=1, hints={"b": 90.0}
    ) == pytest.approx(150.0)
    # a job that outran its recorded time is counted by its units, not given up on
    assert estimate_remaining({"a": 100.0}, {"a": 130.0}, {}, concurrent=1, hints={"a": 20.0}) == 20
    out, now = io.StringIO(), [0.0]
    progress = Progress(["a", JOB], out=out, live=False, clock=lambda: now[0])
    progress.stage(JOB, "build")
    now[0] = 60.0
    progress.units(JOB, _units(3, 12, 60.0))
    assert progress.eta() is None  # "a" has not started and nothing says how long it takes
    progress.finish("a", "built")
    assert progress.eta() == pytest.approx(180.0)


def test_units_of_a_finished_job_are_dropped() -> None:
    out, now = io.StringIO(), [0.0]
    progress = _progress(out, now)
    progress.stage(JOB, "build")
    progress.finish(JOB, "built")
    now[0] = 100.0
    progress.units(JOB, _units(1, 2, 100.0))  # a late report from the watch's thread
    assert "units" not in out.getvalue()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_live_table_shows_units_the_running_unit_and_the_eta(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the terminal's width: no cell folded
    out, now = _Terminal(), [0.0]
    progress = Progress([JOB], out=out, live=True, clock=lambda: now[0])
    with progress:
        progress.stage(JOB, "build")
        now[0] = 60.0
        progress.units(JOB, _units(3, 12, 60.0, running=(LONGEST, SHORTER)))
    text = out.getvalue()  # the table as it was left
    for column in ("units", "compiling now", "ETA"):
        assert column in text
    assert "3/12" in text and "csrc/x.cu 241 s" in text and "+1" in text
    assert "3 min 00 s" in text


def test_an_interval_of_no_time_is_refused() -> None:
    with pytest.raises(ValueError, match="progress interval 0"):
        Progress([JOB], out=io.StringIO(), live=False, interval=0)
