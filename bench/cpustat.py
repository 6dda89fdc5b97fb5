"""Where a run's CPU time went: a summary of a /proc/stat trace, per group of CPUs.

docs/distributed-proof-run.sh samples /proc/stat every 3 s while bench/distributed.py runs
(`$OUT/cpu-stat.txt.gz`: a line `t EPOCH` then the machine's `cpuN` lines, per sample). Its
servers are pinned to CPUs 0.. and the client to the CPUs after them, so per group this
says how busy each was over time and in all:

    python bench/cpustat.py cpu-stat.txt.gz --group servers=0-1 --group client=2-5

For each window of --window seconds: each group's busy CPUs (1.00 = one CPU all the time).
Then per group: its busy CPU-seconds, and the span in which it was more than half a CPU
busy (for the servers: from the first unit a server compiled to the last). A trace is read
as untrusted text: a line that is not a sample is an error naming its line number.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Sample:
    at: float  # seconds since the epoch
    cpus: dict[int, tuple[int, int]]  # cpu → (busy ticks, all ticks)


def parse(lines: Iterable[str]) -> list[Sample]:
    """The samples of a trace (a sample missing a CPU the others have is dropped: the
    sampler was killed while writing it)."""
    samples: list[Sample] = []
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if not fields:
            continue
        try:
            if fields[0] == "t" and len(fields) == 2:
                samples.append(Sample(float(fields[1]), {}))
                continue
            if not fields[0].startswith("cpu") or not samples or len(fields) < 9:
                raise ValueError
            ticks = [int(f) for f in fields[1:9]]  # user nice system idle iowait irq softirq steal
            cpu = int(fields[0][3:])
        except ValueError:
            raise SystemExit(f"line {number}: not a sample of /proc/stat: {line[:80]!r}") from None
        samples[-1].cpus[cpu] = (sum(ticks) - ticks[3] - ticks[4], sum(ticks))
    width = max((len(s.cpus) for s in samples), default=0)
    return [s for s in samples if len(s.cpus) == width]


def busy(a: Sample, b: Sample, cpus: Sequence[int]) -> float:
    """How many of `cpus` were busy between two samples (0 to len(cpus))."""
    total = 0.0
    for cpu in cpus:
        ticks = b.cpus[cpu][1] - a.cpus[cpu][1]
        total += (b.cpus[cpu][0] - a.cpus[cpu][0]) / ticks if ticks > 0 else 0.0
    return total


def cpu_list(text: str) -> list[int]:
    """`0-1,4` → [0, 1, 4]."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def summary(samples: list[Sample], groups: dict[str, list[int]]) -> dict[str, dict[str, float]]:
    """Per group: busy CPU-seconds, and the first and last second (from the first sample)
    of the span in which it was more than half a CPU busy."""
    out: dict[str, dict[str, float]] = {}
    start = samples[0].at if samples else 0.0
    for name, cpus in groups.items():
        seconds = 0.0
        span: list[float] = []
        for a, b in itertools.pairwise(samples):
            load = busy(a, b, cpus)
            seconds += load * (b.at - a.at)
            if load > 0.5:
                span += [a.at - start, b.at - start]
        out[name] = {"cpu_s": round(seconds, 1)}
        if span:
            out[name] |= {"busy_from_s": round(min(span), 1), "busy_to_s": round(max(span), 1)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("trace", type=Path, help="the sampler's file (.gz or plain)")
    parser.add_argument("--group", action="append", default=[], help="NAME=CPUS, e.g. client=2-5")
    parser.add_argument("--window", type=float, default=30.0)
    args = parser.parse_args(argv)
    groups: dict[str, list[int]] = {}
    for spec in args.group:
        name, _, cpus = spec.partition("=")
        try:
            groups[name] = cpu_list(cpus)
        except ValueError:
            parser.error(f"--group {spec}: NAME=CPUS, e.g. client=2-5")
    opener = gzip.open if args.trace.suffix == ".gz" else open
    try:
        with opener(args.trace, "rt", encoding="utf-8") as fh:
            samples = parse(fh)
    except (OSError, UnicodeDecodeError, EOFError) as err:  # missing, not gzip, cut short
        raise SystemExit(f"{args.trace}: cannot read the trace ({err})") from None
    if len(samples) < 2:
        raise SystemExit(f"{args.trace}: fewer than two samples")
    known = set(samples[0].cpus)
    for name, cpus in groups.items():
        if not set(cpus) <= known:
            parser.error(f"--group {name}: the trace has CPUs {min(known)}-{max(known)}")
    print("| from (s) | " + " | ".join(groups) + " |")
    print("|---:|" + "---:|" * len(groups))
    mark = samples[0]
    for sample in samples[1:]:
        if sample.at - mark.at >= args.window or sample is samples[-1]:
            loads = " | ".join(f"{busy(mark, sample, cpus):.2f}" for cpus in groups.values())
            print(f"| {mark.at - samples[0].at:.0f} | {loads} |")
            mark = sample
    for name, figures in summary(samples, groups).items():
        print(name, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
