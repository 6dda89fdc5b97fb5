"""A compiling job read from what its build leaves: real ninja output, a real `.ninja_log`,
a real setuptools serial build and a real /proc snapshot of ninja → nvcc → cicc, all
captured on the build machine (tests/fixtures/compileunits/README.md says how)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from buildtools.backends.local import NINJA_STATUS
from buildtools.wheelbuild.compileunits import (
    CompileWatch,
    UnitProgress,
    UnitTracker,
    nvcc_archs,
    planned_units,
    read_ninja_log,
    running_units,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "compileunits"
CPU_PROJECT = Path("/tmp/eu")  # where the captured builds ran
NVCC_PROJECT = Path("/tmp/nvj")
EXT_UNITS = frozenset(
    f"csrc/{n}.cpp" for n in ("binding", "scale", "shift", "clamp", "norm")
)  # tests/fixtures/ext_units' sources


def _lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def test_ninja_status_lines_of_a_real_torch_build_count_units_done_and_total() -> None:
    tracker = UnitTracker(started=0.0, project_dir=CPU_PROJECT)
    seen = []
    for t, line in enumerate(_lines("ninja_cpu.log")):
        tracker.feed(line, float(t))
        progress = tracker.progress(float(t), None)
        seen.append((progress.done, progress.total))
    assert seen[0] == (0, None)  # setuptools' own lines: no unit yet
    counts = list(dict.fromkeys(c for c in seen if c[1] is not None))
    assert counts == [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]
    # each finished unit by its output, named by its source in the project
    assert sorted(tracker.outputs.values()) == sorted(EXT_UNITS)
    assert tracker.outputs[f"{CPU_PROJECT}/build/temp.linux-x86_64-cpython-311/csrc/norm.o"] == (
        "csrc/norm.cpp"
    )


def test_the_status_format_the_local_backend_sets_is_the_one_read() -> None:
    assert NINJA_STATUS == "[%f/%t] "  # the captured logs were made with it
    tracker = UnitTracker(started=0.0)
    tracker.feed("[12/340] c++ -c a.cpp -o a.o", 1.0)
    assert tracker.progress(1.0, None).total == 340
    tracker.feed("[3/12 2] c++ -c b.cpp -o b.o", 2.0)  # another format: not a status line
    assert (tracker.progress(2.0, None).done, tracker.progress(2.0, None).total) == (12, 340)


def test_a_second_extension_runs_ninja_again_and_its_units_add_up() -> None:
    tracker = UnitTracker(started=0.0)
    for line in ("[1/2] c++ -c a.cpp -o a.o", "[2/2] c++ -c b.cpp -o b.o"):
        tracker.feed(line, 1.0)
    tracker.feed("building 'second' extension", 2.0)
    tracker.feed("[1/3] c++ -c c.cpp -o c.o", 3.0)
    progress = tracker.progress(3.0, None)
    assert (progress.done, progress.total) == (3, 5)
    # the same total twice: the count going back says it is a new run
    tracker.feed("[1/3] c++ -c d.cpp -o d.o", 4.0)
    assert (tracker.progress(4.0, None).done, tracker.progress(4.0, None).total) == (4, 8)


def test_nvcc_units_of_a_real_ninja_build_and_their_archs() -> None:
    tracker = UnitTracker(started=0.0, project_dir=NVCC_PROJECT)
    for line in _lines("ninja_nvcc.log"):
        tracker.feed(line, 1.0)
    assert (tracker.progress(1.0, None).done, tracker.progress(1.0, None).total) == (2, 2)
    assert sorted(tracker.outputs.values()) == ["csrc/gather.cu", "csrc/scatter.cu"]
    command = _lines("ninja_nvcc.log")[0].split("] ", 1)[1].split()
    assert nvcc_archs(command) == ("75", "80", "86", "90", "100", "120")


@pytest.mark.parametrize(
    ("words", "archs"),
    [
        (
            ["nvcc", "-gencode", "arch=compute_90a,code=[sm_90a,compute_90a]", "-c", "x.cu"],
            ("90a",),
        ),
        (["ccache", "nvcc", "--generate-code=arch=compute_100,code=sm_100"], ("100",)),
        (["nvcc", "-arch=sm_86", "-c", "x.cu"], ("86",)),
        (["nvcc", "--gpu-architecture", "compute_75"], ("75",)),
        # nvcc behind the buildtools wrapper: the flags are still nvcc's
        (
            ["python", "-I", "devicewrap.py", "c.json", "-gencode=arch=compute_80,code=sm_80"],
            ("80",),
        ),
        (["c++", "-O3", "-c", "x.cpp", "-o", "x.o"], ()),
        (["clang++", "-arch", "x86_64", "-c", "x.cpp"], ()),  # not a GPU arch
    ],
)
def test_nvcc_archs_in_every_form(words: list[str], archs: tuple[str, ...]) -> None:
    assert nvcc_archs(words) == archs


def test_a_real_ninja_log_gives_each_units_seconds() -> None:
    timed = read_ninja_log(FIXTURES / "ninja_cpu.ninja_log")
    objects = f"{CPU_PROJECT}/build/temp.linux-x86_64-cpython-311/csrc"
    assert timed[f"{objects}/binding.o"] == pytest.approx(117.833)
    assert timed[f"{objects}/shift.o"] == pytest.approx(155.804 - 144.540)
    assert len(timed) == 5


def test_a_ninja_log_keeps_the_last_entry_of_an_output_and_skips_what_is_not_one(
    tmp_path: Path,
) -> None:
    log = tmp_path / ".ninja_log"
    log.write_text(
        "# ninja log v5\n0\t100\t1\t/o/a.o\tabc\n"
        "garbage\n5\tx\t1\t/o/b.o\th\n9\t3\t1\t/o/c.o\th\n"  # malformed, end before start
        "0\t2500\t1\t/o/a.o\tabc\n"
    )
    assert read_ninja_log(log) == {"/o/a.o": 2.5}
    log.write_text("not a ninja log\n0\t100\t1\t/o/a.o\tabc\n")
    assert read_ninja_log(log) == {}
    assert read_ninja_log(tmp_path / "absent") == {}
    (tmp_path / "dir").mkdir()
    assert read_ninja_log(tmp_path / "dir") == {}  # not a regular file


def test_a_serial_setuptools_build_counts_commands_against_the_projects_sources() -> None:
    lines = _lines("serial_cpu.log")
    compiles = [i for i, ln in enumerate(lines) if " -c csrc/" in ln]
    assert len(compiles) == 5
    tracker = UnitTracker(started=0.0, project_dir=Path("/tmp/eus"), sources=lambda: EXT_UNITS)
    for t, line in enumerate(lines[: compiles[2] + 1]):
        tracker.feed(line, float(t))
    now = float(compiles[2]) + 30.0
    progress = tracker.progress(now, None)
    # the third command runs: two done, at most five in all
    assert (progress.done, progress.total, progress.bounded) == (2, 5, True)
    assert progress.running is not None and len(progress.running) == 1
    assert progress.running[0].seconds == 30.0
    assert progress.running[0].name in EXT_UNITS
    for t, line in enumerate(lines[compiles[2] + 1 :], start=compiles[2] + 1):
        tracker.feed(line, float(t))
    final = tracker.progress(float(len(lines)), None)
    assert (final.done, final.running) == (5, ())  # the link command ended the last unit


def test_a_serial_unit_that_is_not_one_of_the_sources_makes_the_total_unknown() -> None:
    tracker = UnitTracker(started=0.0, sources=lambda: frozenset({"csrc/a.cpp"}))
    tracker.feed("gcc -pthread -fPIC -c csrc/a.cpp -o build/a.o", 1.0)
    assert tracker.progress(2.0, None).total == 1
    tracker.feed("x86_64-linux-gnu-g++ -c generated/b.cpp -o build/b.o", 3.0)
    progress = tracker.progress(4.0, None)
    assert (progress.done, progress.total, progress.bounded) == (1, None, False)
    # lines that only look like commands count for nothing
    tracker.feed("gcc: warning: something", 5.0)
    tracker.feed("ccache -s", 5.0)
    assert tracker.progress(6.0, None).done == 1


def test_eta_from_the_rate_units_were_done_at() -> None:
    assert UnitProgress(done=3, total=12, elapsed=60.0).eta() == pytest.approx(180.0)
    assert UnitProgress(done=0, total=12, elapsed=60.0).eta() is None
    assert UnitProgress(done=3, total=None, elapsed=60.0).eta() is None
    assert UnitProgress(done=12, total=12, elapsed=60.0).eta() == 0.0


def _proc_copy(tmp_path: Path, units_dir: Path) -> Path:
    proc = tmp_path / "proc"
    shutil.copytree(FIXTURES / "proc_nvcc", proc)
    ninja = (proc / "ninja.txt").read_text().split()[0]
    (proc / ninja / "cwd").symlink_to(units_dir)
    return proc


def test_the_running_unit_and_nvccs_step_from_a_real_proc_snapshot(tmp_path: Path) -> None:
    proc = _proc_copy(tmp_path, NVCC_PROJECT)
    name = UnitTracker(started=0.0, project_dir=NVCC_PROJECT).name
    units = running_units(NVCC_PROJECT, name=name, proc=proc, hz=100)
    assert units is not None and len(units) == 1
    (unit,) = units
    # ninja's child (sh -c nvcc ...) started at tick 140099; uptime 1412.94 s
    assert (unit.name, unit.archs, unit.step) == ("csrc/scatter.cu", 6, "arch 2/6 sm_80 cicc")
    assert unit.seconds == pytest.approx(1412.94 - 1400.99)
    assert unit.describe() == "csrc/scatter.cu 12 s, 6 archs, arch 2/6 sm_80 cicc"


def test_no_unit_is_read_from_another_jobs_ninja_or_an_unreadable_proc(tmp_path: Path) -> None:
    proc = _proc_copy(tmp_path, Path("/elsewhere/objects"))
    name = UnitTracker(started=0.0).name
    assert running_units(NVCC_PROJECT, name=name, proc=proc, hz=100) is None
    assert running_units(NVCC_PROJECT, name=name, proc=tmp_path / "absent", hz=100) is None
    (proc / "30447" / "stat").write_text("garbage")  # a process that is not one any more
    (proc / "30440" / "cwd").unlink()
    (proc / "30440" / "cwd").symlink_to(NVCC_PROJECT)
    units = running_units(NVCC_PROJECT, name=name, proc=proc, hz=100)
    assert units is not None and units[0].name == "csrc/scatter.cu"


def test_the_watch_reads_only_what_the_log_gains_and_keeps_a_cut_line(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("[9/9] c++ -c old.cpp -o old.o\n")  # an earlier stage's output
    now = [100.0]
    watch = CompileWatch(log, clock=lambda: now[0])
    assert watch.poll().seen is False
    with log.open("a") as fh:
        fh.write("[1/4] c++ -c a.cpp -o a.o\n[2/4] c++ -c b.cp")
    now[0] = 160.0
    progress = watch.poll()
    assert (progress.done, progress.total, progress.elapsed) == (1, 4, 60.0)
    with log.open("a") as fh:
        fh.write("p -o b.o\n" + "x" * 300_000 + "\n" + "progress\r[3/4] c++ -c c.cpp -o c.o\n")
    progress = watch.poll()
    assert (progress.done, progress.total) == (3, 4)
    assert watch.tracker.outputs == {"a.o": "a.cpp", "b.o": "b.cpp", "c.o": "c.cpp"}
    with log.open("a") as fh:  # a line with no end in sight is let go, not kept in memory
        fh.write("y" * 300_000)
    watch.poll()
    with log.open("a") as fh:
        fh.write("y" * 10 + "\n[4/4] c++ -c d.cpp -o d.o\n")
    assert watch.poll().done == 4
    log.write_text("")  # rewritten: read from its new end
    assert watch.poll().done == 4


def test_the_watch_names_the_slowest_units_this_compile_ran(tmp_path: Path) -> None:
    units_dir = tmp_path / "objects"
    units_dir.mkdir()
    shutil.copy(FIXTURES / "ninja_cpu.ninja_log", units_dir / ".ninja_log")
    log = tmp_path / "job.log"
    log.write_text("")
    watch = CompileWatch(
        log, clock=lambda: 0.0, project_dir=CPU_PROJECT, units_dir=units_dir, proc=tmp_path
    )
    watch.poll()
    log.write_text("\n".join(_lines("ninja_cpu.log")) + "\n")
    watch.poll()
    slowest = watch.slowest(3)
    assert [n for n, _ in slowest] == ["csrc/binding.cpp", "csrc/shift.cpp", "csrc/clamp.cpp"]
    assert slowest[0][1] == pytest.approx(117.833)
    # a unit ninja's log holds from an earlier build, not run now, is not one of them
    quiet = CompileWatch(log, clock=lambda: 0.0, units_dir=units_dir, proc=tmp_path)
    quiet.poll()
    assert quiet.slowest() == []


def test_following_reports_from_a_thread_and_polls_once_more_at_the_end(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("")
    reports: list[UnitProgress] = []
    watch = CompileWatch(log, clock=lambda: 0.0)
    with watch.following(period=3600.0, report=reports.append):
        log.write_text("[1/1] c++ -c a.cpp -o a.o\n")
    # the period never passed: no report, but the last lines were read at the end
    assert reports == []
    assert watch.tracker.outputs == {"a.o": "a.cpp"} and watch.error is None


def test_a_containers_build_output_gives_its_counts_but_no_running_units(tmp_path: Path) -> None:
    # the docker backend: the container's output reaches the job's log, its processes and
    # its .ninja_log do not (the captured build's paths as the container has them)
    container = (FIXTURES / "ninja_cpu.log").read_text().replace(str(CPU_PROJECT), "/project")
    log = tmp_path / "job.log"
    log.write_text("")
    now = [0.0]
    watch = CompileWatch(log, clock=lambda: now[0], project_dir=tmp_path / "project")
    watch.poll()
    lines = container.splitlines(keepends=True)
    first = next(i for i, ln in enumerate(lines) if ln.startswith("[2/5]"))
    log.write_text("".join(lines[: first + 1]))
    now[0] = 80.0
    progress = watch.poll()
    assert (progress.done, progress.total, progress.running) == (2, 5, None)
    assert progress.eta() == pytest.approx(120.0)
    assert set(watch.tracker.outputs.values()) == {"csrc/binding.cpp", "csrc/clamp.cpp"}
    assert watch.slowest() == []


def test_before_ninjas_first_line_its_build_ninja_bounds_the_total(tmp_path: Path) -> None:
    assert planned_units(FIXTURES / "ninja_cpu.build.ninja") == 5  # the real file torch wrote
    units_dir = tmp_path / "objects"
    units_dir.mkdir()
    (units_dir / "build.ninja").write_text(
        "rule cc\n  command = c++ -c $in -o $out\nbuild a$:b.o: cc a.cpp\nbuild all: phony a$:b.o\n"
    )
    assert planned_units(units_dir / "build.ninja") == 1
    shutil.copy(FIXTURES / "ninja_cpu.build.ninja", units_dir / "build.ninja")
    log = tmp_path / "job.log"
    log.write_text("")
    proc = _proc_copy(tmp_path, units_dir)  # a ninja works in units_dir
    watch = CompileWatch(log, clock=lambda: 30.0, units_dir=units_dir, proc=proc)
    progress = watch.poll()
    assert (progress.done, progress.total, progress.bounded) == (0, 5, True)
    assert progress.running is not None and len(progress.running) == 1
    log.write_text("[1/3] c++ -c a.cpp -o a.o\n")  # an incremental build runs fewer
    progress = watch.poll()
    assert (progress.done, progress.total, progress.bounded) == (1, 3, False)
    assert planned_units(tmp_path / "absent") is None


def test_an_error_while_following_ends_the_watching_not_the_build(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("")

    calls = iter([1.0])  # the start is read; any later reading fails: a bug in a poll

    def broken() -> float:
        return next(calls, None) or _raise()

    watch = CompileWatch(log, clock=broken)
    with watch.following(period=3600.0, report=lambda _: None):
        pass
    assert watch.error == "RuntimeError: the clock broke"


def _raise() -> float:
    raise RuntimeError("the clock broke")
