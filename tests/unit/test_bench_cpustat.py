"""bench/cpustat.py: how busy each group of CPUs was, from a /proc/stat trace."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import cpustat  # noqa: E402  (bench/cpustat.py)


def _trace(loads: list[tuple[float, float]], *, seconds: float = 3.0) -> list[str]:
    """A trace of two CPUs, each interval with the given busy fractions (100 ticks/s)."""
    lines: list[str] = []
    busy = [0, 0]
    total = [0, 0]
    for step, pair in enumerate([(0.0, 0.0), *loads]):
        for cpu, load in enumerate(pair):
            ticks = int(seconds * 100)
            busy[cpu] += int(ticks * load)
            total[cpu] += ticks
        lines.append(f"t {1000 + step * seconds:.3f}")
        for cpu in range(2):
            idle = total[cpu] - busy[cpu]
            # user nice system idle iowait irq softirq steal guest guest_nice
            lines.append(f"cpu{cpu} {busy[cpu]} 0 0 {idle} 0 0 0 0 0 0")
    return lines


def test_busy_cpu_seconds_and_span_per_group() -> None:
    samples = cpustat.parse(_trace([(0.0, 1.0), (1.0, 1.0), (1.0, 0.0), (0.2, 0.0)]))
    got = cpustat.summary(samples, {"server": [0], "client": [1], "both": [0, 1]})
    assert got["server"] == {"cpu_s": pytest.approx(6.6), "busy_from_s": 3.0, "busy_to_s": 9.0}
    assert got["client"] == {"cpu_s": pytest.approx(6.0), "busy_from_s": 0.0, "busy_to_s": 6.0}
    assert got["both"]["cpu_s"] == pytest.approx(12.6)


def test_a_group_never_busy_has_no_span() -> None:
    samples = cpustat.parse(_trace([(0.1, 0.0), (0.2, 0.0)]))
    assert cpustat.summary(samples, {"idle": [1]}) == {"idle": {"cpu_s": 0.0}}


def test_a_sample_cut_short_is_dropped() -> None:
    lines = _trace([(1.0, 1.0), (1.0, 1.0)])
    samples = cpustat.parse(lines[:-1])  # the sampler killed before its last cpu1 line
    assert len(samples) == 2


def test_a_line_that_is_no_sample_names_its_number() -> None:
    lines = _trace([(1.0, 1.0)])
    lines.insert(2, "cpu1 12 x 0 0")
    with pytest.raises(SystemExit, match="line 3: not a sample"):
        cpustat.parse(lines)


def test_cpu_lists() -> None:
    assert cpustat.cpu_list("0-1,4") == [0, 1, 4]
    assert cpustat.cpu_list("7") == [7]


def test_the_command_reads_a_gzipped_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "cpu-stat.txt.gz"
    with gzip.open(trace, "wt") as fh:
        fh.write("\n".join(_trace([(1.0, 0.5), (1.0, 0.5)])) + "\n")
    assert cpustat.main([str(trace), "--group", "servers=0", "--group", "client=1"]) == 0
    out = capsys.readouterr().out
    assert "| 0 | 1.00 | 0.50 |" in out
    assert "servers {'cpu_s': 6.0, 'busy_from_s': 0.0, 'busy_to_s': 6.0}" in out


def test_a_trace_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "none.txt.gz"
    with pytest.raises(SystemExit, match=r"none\.txt\.gz: cannot read the trace"):
        cpustat.main([str(missing), "--group", "a=0"])
    not_gzip = tmp_path / "plain.txt.gz"
    not_gzip.write_text("t 1\n")
    with pytest.raises(SystemExit, match=r"plain\.txt\.gz: cannot read the trace"):
        cpustat.main([str(not_gzip), "--group", "a=0"])
