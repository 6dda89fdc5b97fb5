"""Smoke tests without processes: classification, planning, reports (JSON, JUnit, GitHub)."""

from __future__ import annotations

import io
import json
import signal
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from fixtures.fakes import ANY, Call, FakeRunner

from buildtools.smoke.child import (
    CHILD_TAG,
    DUPLICATE_DIAGNOSIS,
    ChildReport,
    Stage,
    classify,
    duplicate_libs,
    output_tail,
    parse_child_report,
)
from buildtools.smoke.gpu import DriverFacts
from buildtools.smoke.run import SmokeOptions, run_smoke, smoke_argv
from buildtools.smoke.smoke_report import (
    ReportPaths,
    RunnerInfo,
    SmokeReport,
    SmokeResult,
    SmokeStatus,
    github_annotations,
    junit_xml,
    publish,
    step_summary,
)
from buildtools.smoke.wheelsources import (
    SmokeTarget,
    WheelSource,
    bundled_torch_libs,
    choose_cell,
    detect_accelerator,
    import_names,
    parse_find_links,
    plan_targets,
)
from buildtools.torchinstall import GpuInfo, TorchInstall

TORCH_LIB = "/venv/lib/python3.12/site-packages/torch/lib"
GRAFTED = "/env/lib/python3.12/site-packages/bt_scatter.libs"

# What torch 2.13.0+cpu printed when the grafted ext_ok fixture was imported beside it.
CONJUGATE_ABORT = """\
BUILDTOOLS_SMOKE {"event": "import", "module": "ext_ok"}
terminate called after throwing an instance of 'c10::Error'
  what():  Tried to register multiple backend fallbacks for the same dispatch key Conjugate; \
previous registration registered at /__w/pytorch/pytorch/aten/src/ATen/ConjugateFallback.cpp:17
frame #0: c10::Error::Error(...) + 0x9d (0x7ffb41b7db8d in /tmp/gx/ext_ok.libs/libc10-52d951ec.so)
frame #1: c10::Dispatcher::registerFallback(...) (in /tmp/gx/ext_ok.libs/libtorch_cpu-872a1bfe.so)
Fatal Python error: Aborted
"""


def _child(*lines: dict[str, object]) -> str:
    return "".join(CHILD_TAG + json.dumps(line) + "\n" for line in lines)


# --------------------------------------------------------------------------- child report


def test_parse_child_report_follows_the_import_and_the_maps() -> None:
    maps = {"libc10": [f"{TORCH_LIB}/libc10.so"], "libtorch_cpu": [f"{TORCH_LIB}/libtorch_cpu.so"]}
    out = _child(
        {"event": "import", "module": "torch"},
        {"event": "imported", "module": "torch", "version": "2.11.0+cu130", "cuda": "13.0"},
        {"event": "import", "module": "bt_scatter"},
        {"event": "imported", "module": "bt_scatter"},
        {"event": "maps", "libs": maps},
    )
    report = parse_child_report("warning: noise\n" + out + CHILD_TAG + "{not json\n")
    assert report.imported == ("torch", "bt_scatter")
    assert report.importing is None
    assert report.torch is not None and report.torch["version"] == "2.11.0+cu130"
    assert report.maps == maps


def test_parse_child_report_remembers_the_import_that_never_returned() -> None:
    report = parse_child_report(CONJUGATE_ABORT)
    assert report.importing == "ext_ok" and report.maps is None


def test_duplicate_libs_names_both_paths() -> None:
    found = duplicate_libs(
        {
            "libc10": [f"{GRAFTED}/libc10-be5e17cd.so", f"{TORCH_LIB}/libc10.so"],
            "libtorch_cpu": [f"{TORCH_LIB}/libtorch_cpu.so"],
        }
    )
    assert found == [
        f"libc10 is mapped 2 times: {GRAFTED}/libc10-be5e17cd.so and {TORCH_LIB}/libc10.so"
    ]
    assert duplicate_libs(None) == []


# --------------------------------------------------------------------------- classify


def test_passed() -> None:
    status, diagnosis, findings = classify(Stage(name="smoke", returncode=0, output="smoke: OK"))
    assert (status, diagnosis, findings) == (SmokeStatus.PASSED, None, [])


def test_abort_of_a_grafted_libtorch_is_diagnosed_as_duplicate_libtorch() -> None:
    bundled = ("ext_ok.libs/libc10-52d951ec.so", "ext_ok.libs/libtorch_cpu-872a1bfe.so")
    stage = Stage(name="import", returncode=-signal.SIGABRT, output=CONJUGATE_ABORT)
    status, diagnosis, findings = classify(
        stage, child=parse_child_report(CONJUGATE_ABORT), bundled=bundled
    )
    assert status is SmokeStatus.ABORTED
    assert diagnosis is not None
    assert diagnosis.startswith(
        "import of ext_ok: SIGABRT (what():  Tried to register multiple backend fallbacks"
    )
    assert DUPLICATE_DIAGNOSIS in diagnosis
    assert findings == [f"the wheel bundles {bundled[0]}, {bundled[1]}"]


def test_the_duplicate_message_alone_is_enough() -> None:
    """A wheel that bundles nothing itself (another package did) still gets the diagnosis."""
    stage = Stage(name="smoke", returncode=134, output=CONJUGATE_ABORT)  # 128+6 from a shell
    status, diagnosis, _ = classify(stage)
    assert status is SmokeStatus.ABORTED
    assert diagnosis is not None and DUPLICATE_DIAGNOSIS in diagnosis


def test_an_ordinary_abort_is_not_blamed_on_libtorch() -> None:
    out = "terminate called after throwing an instance of 'std::runtime_error'\n  what():  boom\n"
    status, diagnosis, _ = classify(Stage(name="smoke", returncode=-6, output=out))
    assert status is SmokeStatus.ABORTED
    assert diagnosis == "smoke: SIGABRT: what():  boom"


def test_segfault() -> None:
    out = "Fatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):\n"
    status, diagnosis, _ = classify(Stage(name="smoke", returncode=-11, output=out))
    assert status is SmokeStatus.SEGFAULT
    assert diagnosis == "smoke: SIGSEGV: segmentation fault"


def test_segfault_with_a_second_libc10_mapped_names_the_likely_cause() -> None:
    child = ChildReport(maps={"libc10": [f"{GRAFTED}/libc10-1.so", f"{TORCH_LIB}/libc10.so"]})
    status, diagnosis, findings = classify(
        Stage(name="smoke", returncode=139, output=""), child=child
    )
    assert status is SmokeStatus.SEGFAULT
    assert diagnosis == f"smoke: SIGSEGV: segmentation fault (likely cause: {DUPLICATE_DIAGNOSIS})"
    assert findings[0].startswith("libc10 is mapped 2 times")


def test_other_signals_are_failures_named_by_signal() -> None:
    status, diagnosis, _ = classify(Stage(name="smoke", returncode=-9, output=""))
    assert (status, diagnosis) == (SmokeStatus.FAILED, "smoke: killed by SIGKILL")


def test_timeout_reports_the_last_output() -> None:
    stage = Stage(
        name="smoke",
        returncode=124,
        output="$ python hang.py\nstep 1 of 3\nwaiting for the kernel\n[buildtools] timed out after 5 s\n",
        timed_out=True,
        timeout=5.0,
    )
    status, diagnosis, _ = classify(stage)
    assert status is SmokeStatus.TIMEOUT
    assert diagnosis == (
        "smoke: killed after 5 s without finishing; last output: waiting for the kernel"
    )


def test_timeout_in_an_import_names_the_module() -> None:
    out = _child({"event": "import", "module": "bt_scatter"})
    stage = Stage(name="import", returncode=124, output=out, timed_out=True, timeout=60.0)
    status, diagnosis, _ = classify(stage, child=parse_child_report(out))
    assert status is SmokeStatus.TIMEOUT
    assert diagnosis is not None and diagnosis.startswith("import of bt_scatter: killed after 60 s")


def test_wrong_result_quotes_the_smoke_commands_own_message() -> None:
    out = "ok   cuda float32 ...\nFAIL cuda float16 rel_err=1e-1\nsmoke: FAIL (seed 7; replay with --seed 7)\n"
    status, diagnosis, _ = classify(Stage(name="smoke", returncode=1, output=out))
    assert status is SmokeStatus.WRONG_RESULT
    assert diagnosis == "smoke command exited 1: FAIL cuda float16 rel_err=1e-1"


def test_undefined_symbol_is_an_import_error() -> None:
    out = (
        _child({"event": "import", "module": "ext"})
        + "Traceback (most recent call last):\n"
        + "ImportError: /env/ext.so: undefined symbol: _ZN3c1023definitely_not_in_torchEi\n"
    )
    stage = Stage(name="import", returncode=1, output=out)
    status, diagnosis, _ = classify(stage, child=parse_child_report(out))
    assert status is SmokeStatus.IMPORT_ERROR
    assert diagnosis == (
        "import of ext: ImportError: /env/ext.so: undefined symbol: "
        "_ZN3c1023definitely_not_in_torchEi"
    )


def test_an_import_error_inside_the_smoke_command_is_an_import_error() -> None:
    out = (
        "ImportError: libtorch_cpu.so: cannot open shared object file: No such file or directory\n"
    )
    status, _, _ = classify(Stage(name="smoke", returncode=1, output=out))
    assert status is SmokeStatus.IMPORT_ERROR


def test_a_clean_import_with_two_copies_mapped_fails() -> None:
    child = ChildReport(
        imported=("torch", "bt_scatter"),
        maps={"libc10": [f"{GRAFTED}/libc10-be5e17cd.so", f"{TORCH_LIB}/libc10.so"]},
    )
    status, diagnosis, findings = classify(
        Stage(name="smoke", returncode=0, output="smoke: OK"), child=child
    )
    assert status is SmokeStatus.FAILED
    assert diagnosis is not None
    assert diagnosis.startswith("the smoke command passed, but " + DUPLICATE_DIAGNOSIS)
    assert f"{GRAFTED}/libc10-be5e17cd.so and {TORCH_LIB}/libc10.so" in diagnosis
    assert len(findings) == 1


def test_two_copies_mapped_outweigh_what_the_smoke_command_made_of_them() -> None:
    child = ChildReport(
        maps={"libc10": [f"{GRAFTED}/libc10-be5e17cd.so", f"{TORCH_LIB}/libc10.so"]}
    )
    out = "smoke: FAIL: a second libtorch is mapped: {...}\n"
    status, diagnosis, _ = classify(Stage(name="smoke", returncode=2, output=out), child=child)
    assert status is SmokeStatus.FAILED
    assert diagnosis is not None and diagnosis.startswith(
        "smoke exited 2 (smoke: FAIL: a second libtorch is mapped: {...}); " + DUPLICATE_DIAGNOSIS
    )


def test_pip_failure() -> None:
    out = "ERROR: Could not find a version that satisfies the requirement torch==2.12.*\n"
    status, diagnosis, _ = classify(Stage(name="install", returncode=1, output=out))
    assert status is SmokeStatus.FAILED
    assert diagnosis == f"install: pip could not install the wheel: {out.strip()}"


def test_output_tail_keeps_the_line_that_explains_the_crash() -> None:
    out = "terminate called after throwing\n" + "".join(
        f'  File "x.py", line {i}\n' for i in range(200)
    )
    tail = output_tail(out)
    assert tail.startswith("terminate called after throwing\n[…]\n")
    assert tail.endswith('File "x.py", line 199')
    assert len(tail.splitlines()) <= 62


# --------------------------------------------------------------------------- wheels, planning


def test_bundled_torch_libs_and_import_names() -> None:
    names = [
        "bt_scatter/__init__.py",
        "bt_scatter/_C.cpython-312-x86_64-linux-gnu.so",
        "bt_scatter.libs/libc10-be5e17cd.so",
        "bt_scatter.libs/libtorch_cpu-2e1034d4.so",
        "bt_scatter.libs/libcudart-96c42e41.so.13",
        "bt_scatter.libs/libgomp-e28fb289.so.1",
        "ext_ok.cpython-311-x86_64-linux-gnu.so",
        "bt_scatter-0.1.0.dist-info/METADATA",
    ]
    assert bundled_torch_libs(names) == (
        "bt_scatter.libs/libc10-be5e17cd.so",
        "bt_scatter.libs/libtorch_cpu-2e1034d4.so",
    )
    assert import_names(names) == ("bt_scatter", "ext_ok")
    assert import_names(names, "pkg_a\npkg_b\n") == ("pkg_a", "pkg_b")


def test_parse_find_links() -> None:
    page = (
        '<a href="bt_scatter-0.1.0%2Bpt211cu130-cp312-cp312-manylinux_2_28_x86_64.whl'
        '#sha256=ABC">w</a><a href="../other/">dir</a>'
        '<a href="https://files.example/x-1.0-py3-none-any.whl">x</a>'
    )
    assert parse_find_links(page, "https://example.github.io/bt/whl/cu130/") == [
        (
            "https://example.github.io/bt/whl/cu130/"
            "bt_scatter-0.1.0%2Bpt211cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
            "abc",
        ),
        ("https://files.example/x-1.0-py3-none-any.whl", None),
    ]


def test_detect_accelerator() -> None:
    def exists(*present: str) -> Callable[[str], bool]:
        return lambda path: path in present

    def which(*present: str) -> Callable[[str], str | None]:
        return lambda name: f"/usr/bin/{name}" if name in present else None

    assert detect_accelerator(exists=exists("/dev/nvidiactl"), which=which()) == "cuda"
    assert detect_accelerator(exists=exists(), which=which("nvidia-smi")) == "cuda"
    assert detect_accelerator(exists=exists("/dev/kfd"), which=which()) == "rocm"
    assert detect_accelerator(exists=exists(), which=which()) == "cpu"


# nvcc 13.0 output with sm_75, sm_80 cubins and compute_90 PTX (tests/fixtures/cuda)
DEVICE_CODE = Path(__file__).resolve().parents[1] / "fixtures/cuda/kernel_sm75_sm80_compute90.o"


def _wheel(
    tmp_path: Path,
    name: str,
    record: dict[str, object] | None,
    members: dict[str, bytes] | None = None,
) -> Path:
    path = tmp_path / name
    project, version = name.split("-")[:2]
    dist = f"{project}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("bt_scatter/__init__.py", "")
        for member, data in (members or {}).items():
            zf.writestr(member, data)
        zf.writestr(
            f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n"
        )
        zf.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\n")
        if record is not None:
            zf.writestr(f"{dist}/buildtools.json", json.dumps(record))
        zf.writestr(f"{dist}/RECORD", "")
    return path


def _record(accelerator: str, torch: str, cuda: str | None = None) -> dict[str, object]:
    return {
        "schema": 1,
        "torch": torch,
        "accelerator": accelerator,
        "cuda": cuda,
        "cxx11_abi": True,
        "python": "3.12.1",
        "cells": [f"torch2.11.0-{accelerator}-cp312"],
    }


def test_plan_targets_skips_what_this_runner_cannot_test(tmp_path: Path) -> None:
    cu = _wheel(
        tmp_path,
        "bt_scatter-0.1.0+pt211cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
        _record("cu130", "2.11.0+cu130", "13.0"),
    )
    cpu = _wheel(
        tmp_path,
        "bt_scatter-0.1.0+pt211cpu-cp312-cp312-manylinux_2_28_x86_64.whl",
        _record("cpu", "2.11.0+cpu"),
    )
    bare = _wheel(tmp_path, "bare-1.0-cp312-cp312-linux_x86_64.whl", None)
    sources = [WheelSource(path=p, origin=str(p)) for p in (cu, cpu, bare)]

    on_cpu = plan_targets(sources, runner_accelerator="cpu")
    assert isinstance(on_cpu[0], SmokeResult) and on_cpu[0].status is SmokeStatus.SKIPPED
    assert on_cpu[0].diagnosis is not None and on_cpu[0].diagnosis.startswith(
        "built for cu130; this runner is cpu"
    )
    assert on_cpu[0].cell == "torch2.11.0-cu130-cp312" and len(on_cpu[0].sha256) == 64
    assert isinstance(on_cpu[1], SmokeTarget)  # CPU wheels are tested anywhere
    assert isinstance(on_cpu[2], SmokeResult) and "no build record" in (on_cpu[2].diagnosis or "")

    on_gpu = plan_targets(sources, runner_accelerator="cuda")
    target = on_gpu[0]
    assert isinstance(target, SmokeTarget)
    assert (target.torch, target.cuda, target.python) == ("2.11.0+cu130", "13.0", "3.12")
    assert target.modules == ("bt_scatter",) and target.cell == "torch2.11.0-cu130-cp312"


def test_plan_targets_checks_the_pages_digest(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, "x-1.0-cp312-cp312-linux_x86_64.whl", _record("cpu", "2.11.0"))
    src = WheelSource(
        path=wheel, origin="https://x/x.whl", find_links="https://x/", expected_sha256="0" * 64
    )
    (result,) = plan_targets([src], runner_accelerator="cpu")
    assert isinstance(result, SmokeResult) and result.status is SmokeStatus.FAILED
    assert result.diagnosis == f"sha256 mismatch: the page says {'0' * 64}"


def test_smoke_argv_runs_the_project_script_with_the_envs_python(tmp_path: Path) -> None:
    (tmp_path / "smoke.py").write_text("")
    python = Path("/env/bin/python")
    argv = smoke_argv("python smoke.py --device cuda extra", python=python, project_dir=tmp_path)
    assert argv == [str(python), str(tmp_path / "smoke.py"), "--device", "cuda", "extra"]
    assert smoke_argv("pytest -x tests", python=python, project_dir=None) == [
        "pytest",
        "-x",
        "tests",
    ]


# --------------------------------------------------------------------------- reports


def _report() -> SmokeReport:
    runner = RunnerInfo(
        accelerator="cuda",
        gpu="NVIDIA H200",
        driver="580.159.04",
        torch="2.11.0+cu130",
        torch_cuda="13.0",
        python="3.12.3",
        date="2026-11-21T10:45:20+00:00",
        host="gpu-1",
    )
    results = (
        SmokeResult(
            wheel="a-1.0-cp312-cp312-linux_x86_64.whl",
            sha256="a" * 64,
            cell="torch2.11.0-cu130-cp312",
            status=SmokeStatus.PASSED,
            output="smoke: OK",
            duration=13.6,
            stage="smoke",
            source="wheelhouse/a-1.0-cp312-cp312-linux_x86_64.whl",
        ),
        SmokeResult(
            wheel="b-1.0-cp312-cp312-linux_x86_64.whl",
            sha256="b" * 64,
            cell="torch2.11.0-cu130-cp312",
            status=SmokeStatus.ABORTED,
            diagnosis="import of b: SIGABRT: duplicate libtorch, 50% sure | really",
            output="terminate called\x00\nwhat(): Conjugate",
            duration=7.7,
            stage="import",
            source="wheelhouse/b-1.0-cp312-cp312-linux_x86_64.whl",
        ),
        SmokeResult(
            wheel="c-1.0-cp312-cp312-linux_x86_64.whl",
            sha256="c" * 64,
            cell=None,
            status=SmokeStatus.WRONG_RESULT,
            diagnosis="smoke command exited 1: FAIL",
            source="https://example/c-1.0-cp312-cp312-linux_x86_64.whl",
        ),
        SmokeResult(
            wheel="d-1.0-cp312-cp312-linux_x86_64.whl",
            sha256="d" * 64,
            cell="torch2.13.0-rocm7.2-cp312",
            status=SmokeStatus.SKIPPED,
            diagnosis="built for rocm7.2; this runner is cuda",
        ),
    )
    return SmokeReport(runner=runner, results=results, command="buildtools smoke wheelhouse")


def test_json_has_what_the_index_gate_reads() -> None:
    data = _report().to_json()
    assert data["schema"] == "torch-buildtools/smoke-report/v1"
    assert data["runner"]["gpu"] == "NVIDIA H200" and data["runner"]["driver"] == "580.159.04"
    assert data["summary"] == {"aborted": 1, "passed": 1, "skipped": 1, "wrong-result": 1}
    first = data["results"][0]
    assert {k: first[k] for k in ("wheel", "sha256", "status")} == {
        "wheel": "a-1.0-cp312-cp312-linux_x86_64.whl",
        "sha256": "a" * 64,
        "status": "passed",
    }
    assert set(first) >= {"cell", "diagnosis", "output", "duration"}
    assert [r.wheel for r in _report().failed] == [
        "b-1.0-cp312-cp312-linux_x86_64.whl",
        "c-1.0-cp312-cp312-linux_x86_64.whl",
    ]


def test_junit_xml() -> None:
    root = ET.fromstring(junit_xml(_report()))
    suite = root.find("testsuite")
    assert suite is not None
    assert (
        suite.get("tests"),
        suite.get("failures"),
        suite.get("errors"),
        suite.get("skipped"),
    ) == (
        "4",
        "1",
        "1",
        "1",
    )
    cases = suite.findall("testcase")
    assert cases[0].get("classname") == "smoke.torch2.11.0-cu130-cp312"
    error = cases[1].find("error")
    assert error is not None and error.get("type") == "aborted"
    assert error.text == "terminate called\\x00\nwhat(): Conjugate"  # NUL is not XML: escaped
    failure = cases[2].find("failure")
    assert (
        failure is not None
        and failure.get("message") == "wrong-result: smoke command exited 1: FAIL"
    )
    assert cases[3].find("skipped") is not None


def test_github_annotations_escape_their_data() -> None:
    lines = github_annotations(_report())
    assert len(lines) == 2
    assert lines[0].startswith(
        "::error file=wheelhouse/b-1.0-cp312-cp312-linux_x86_64.whl,"
        "title=smoke aborted%3A b-1.0-cp312-cp312-linux_x86_64.whl::"
    )
    assert "50%25 sure" in lines[0] and "%0Awhat(): Conjugate" in lines[0]
    assert "\n" not in lines[0]
    assert lines[1].startswith("::error title=")  # a URL is no file in the workspace


def test_step_summary() -> None:
    md = step_summary(_report())
    assert "runner: cuda, NVIDIA H200, driver 580.159.04, torch 2.11.0\\+cu130" in md
    assert (
        "| `b-1.0-cp312-cp312-linux_x86_64.whl` | torch2.11.0-cu130-cp312 | ❌ aborted | 7.7 s |"
        in md
    )
    assert "duplicate libtorch, 50% sure \\| really" in md
    assert "<details><summary>b-1.0-cp312-cp312-linux_x86_64.whl: aborted</summary>" in md


@pytest.mark.parametrize("on_actions", [True, False])
def test_publish(tmp_path: Path, on_actions: bool) -> None:
    summary = tmp_path / "summary.md"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)} if on_actions else {}
    out = io.StringIO()
    paths = ReportPaths(json=tmp_path / "r" / "report.json", junit=tmp_path / "r" / "junit.xml")
    publish(_report(), paths=paths, env=env, out=out)
    assert json.loads(paths.json.read_text())["results"][1]["status"] == "aborted"
    assert paths.junit is not None and paths.junit.read_text().startswith("<?xml")
    assert ("::error " in out.getvalue()) is on_actions
    assert summary.exists() is on_actions


# --------------------------------------------------------------------------- covered cells


def _covering(abi: str, cells: list[str], torch: str, python: str) -> dict[str, object]:
    accel = cells[0].split("-")[1]
    return {
        "schema": 1,
        "torch": torch,
        "accelerator": accel,
        "cuda": "13.0" if accel.startswith("cu") else None,
        "cxx11_abi": True,
        "python": python,
        "abi": abi,
        "cells": cells,
    }


ABI3_CELLS = [f"torch2.11.0-cu130-cp3{m}" for m in (11, 12, 13)]
STABLE_CELLS = [f"torch{t}-cu130-cp3{m}" for t in ("2.11.0", "2.12.0", "2.13.0") for m in (11, 12)]


@pytest.mark.parametrize(
    ("cells", "runner_python", "runner_torch", "expected"),
    [
        # abi3 built on 3.11: a 3.12 runner tests the 3.12 cell
        (ABI3_CELLS, "3.12", "2.11.0+cu130", ("torch2.11.0-cu130-cp312", "2.11.0+cu130", "3.12")),
        (ABI3_CELLS, "3.13", None, ("torch2.11.0-cu130-cp313", "2.11.0+cu130", "3.13")),
        # a runner Python the wheel does not cover: the build's own cell
        (ABI3_CELLS, "3.10", "2.11.0+cu130", ("torch2.11.0-cu130-cp311", "2.11.0+cu130", "3.11")),
        (ABI3_CELLS, None, None, ("torch2.11.0-cu130-cp311", "2.11.0+cu130", "3.11")),
        # stable ABI over three torch releases: the runner's torch and Python
        (STABLE_CELLS, "3.12", "2.13.0+cu130", ("torch2.13.0-cu130-cp312", "2.13.0+cu130", "3.12")),
        (STABLE_CELLS, "3.11", "2.12.0+cu130", ("torch2.12.0-cu130-cp311", "2.12.0+cu130", "3.11")),
        # a torch outside the range: the built torch on the runner's Python
        (STABLE_CELLS, "3.12", "2.10.0+cu130", ("torch2.11.0-cu130-cp312", "2.11.0+cu130", "3.12")),
    ],
)
def test_plan_targets_tests_the_covered_cell_that_matches_the_runner(
    tmp_path: Path,
    cells: list[str],
    runner_python: str | None,
    runner_torch: str | None,
    expected: tuple[str, str, str],
) -> None:
    abi = "stable" if cells is STABLE_CELLS else "abi3"
    wheel = _wheel(
        tmp_path,
        "bt_scatter-0.1.0+pt211cu130-cp311-abi3-manylinux_2_28_x86_64.whl",
        _covering(abi, cells, "2.11.0+cu130", "3.11.9"),
    )
    (target,) = plan_targets(
        [WheelSource(path=wheel, origin=str(wheel))],
        runner_accelerator="cuda",
        runner_python=runner_python,
        runner_torch=runner_torch,
    )
    assert isinstance(target, SmokeTarget)
    assert (target.cell, target.torch, target.python) == expected
    assert target.covers == tuple(cells) and target.cuda == "13.0"


def test_choose_cell_prefers_the_runner_then_the_build() -> None:
    cells = ["torch2.11.0-cpu-cp311", "torch2.11.0-cpu-cp312", "torch2.13.0+cpu-current-cpu-cp312"]
    assert choose_cell(cells, built_torch="2.11.0+cpu", built_python="3.11") == (
        "torch2.11.0-cpu-cp311",
        "2.11.0",
        "3.11",
    )
    assert choose_cell(
        cells, built_torch="2.11.0+cpu", built_python="3.11", runner_python="3.12"
    ) == ("torch2.11.0-cpu-cp312", "2.11.0", "3.12")
    assert choose_cell(["not-a-cell"], built_torch="2.11.0", built_python="3.11") is None


def test_the_report_names_the_tested_cell_among_those_covered() -> None:
    res = SmokeResult(
        wheel="a-1.0-cp311-abi3-linux_x86_64.whl",
        sha256="a" * 64,
        cell="torch2.11.0-cu130-cp312",
        covers=tuple(ABI3_CELLS),
        status=SmokeStatus.PASSED,
    )
    assert res.to_json()["cell"] == "torch2.11.0-cu130-cp312"
    assert res.to_json()["covers"] == ABI3_CELLS
    assert res.cell_label == "torch2.11.0-cu130-cp312 (of 3 covered)"
    report = SmokeReport(runner=_report().runner, results=(res,))
    assert r"torch2.11.0-cu130-cp312 \(of 3 covered\)" in step_summary(report)


def _gpu_runner() -> FakeRunner:
    """pip >= 22.3 (it installs into the wheel's venv) and `python -m venv` that makes one."""

    def make_venv(call: Call) -> None:
        (Path(call.argv[-1]) / "bin").mkdir(parents=True, exist_ok=True)
        (Path(call.argv[-1]) / "bin" / "python").write_text("")

    return (
        FakeRunner()
        .on(ANY, "-m", "pip", "--version", output="pip 24.0 from /x (python 3.12)\n")
        .on(ANY, "-m", "venv", effect=make_venv)
    )


RUNNER_TORCH = TorchInstall(
    version="2.11.0+cu130",
    package_dir=Path("/runner/lib/python3.12/site-packages/torch"),
    cuda="13.0",
    imported=True,
    device_available=True,
    device_count=1,
    gpus=(GpuInfo(index=0, name="NVIDIA H100 80GB HBM3", capability=(9, 0)),),
)
DRIVER = DriverFacts(
    kind="cuda",
    driver="580.159.04",
    source="nvidia-smi",
    device_nodes=("/dev/nvidia0", "/dev/nvidiactl"),
)
DEVICE_MEMBERS = {"bt_scatter/_C.cpython-312-x86_64-linux-gnu.so": DEVICE_CODE.read_bytes()}


@pytest.fixture
def gpu_runner_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner's interpreter reports Python 3.12.3 with torch 2.11.0+cu130 and an H100."""
    monkeypatch.setattr(
        "buildtools.smoke.run.probe_torch", lambda *a, **k: ("3.12.3", RUNNER_TORCH)
    )


@pytest.mark.usefixtures("gpu_runner_torch")
def test_an_abi3_wheel_is_smoke_tested_on_a_runner_whose_python_is_not_the_builds(
    tmp_path: Path,
) -> None:
    wheel = _wheel(
        tmp_path,
        "bt_scatter-0.1.0+pt211cu130-cp311-abi3-manylinux_2_28_x86_64.whl",
        _covering("abi3", ABI3_CELLS[:2], "2.11.0+cu130", "3.11.9"),
        DEVICE_MEMBERS,
    )
    runner = _gpu_runner()
    opts = SmokeOptions(
        out_dir=tmp_path / "out",
        cache_dir=tmp_path / "cache",
        env={"PATH": "", "HOME": str(tmp_path)},
        torch_source="system",
        torch_python=Path("/runner/bin/python3.12"),
        driver=DRIVER,
    )
    out = io.StringIO()
    report = run_smoke(
        [WheelSource(path=wheel, origin=str(wheel))],
        opts=opts,
        runner=runner,
        accelerator="cuda",
        out=out,
    )
    (res,) = report.results
    assert res.status is SmokeStatus.PASSED, res.diagnosis
    assert res.cell == "torch2.11.0-cu130-cp312" and res.covers == tuple(ABI3_CELLS[:2])
    assert "cell torch2.11.0-cu130-cp312" in out.getvalue()
    assert report.to_json()["results"][0]["cell"] == "torch2.11.0-cu130-cp312"
    assert not report.failed


@pytest.mark.usefixtures("gpu_runner_torch")
def test_a_wheel_whose_cells_all_miss_the_runner_is_skipped_naming_them(tmp_path: Path) -> None:
    wheel = _wheel(
        tmp_path,
        "bt_scatter-0.1.0+pt211cu130-cp310-abi3-manylinux_2_28_x86_64.whl",
        _covering(
            "abi3", ["torch2.11.0-cu130-cp310", "torch2.11.0-cu130-cp311"], "2.11.0+cu130", "3.10.4"
        ),
    )
    opts = SmokeOptions(
        out_dir=tmp_path / "out",
        cache_dir=tmp_path / "cache",
        env={"PATH": "", "HOME": str(tmp_path)},
        torch_source="system",
        torch_python=Path("/runner/bin/python3.12"),
        driver=DRIVER,
    )
    report = run_smoke(
        [WheelSource(path=wheel, origin=str(wheel))],
        opts=opts,
        runner=_gpu_runner(),
        accelerator="cuda",
        out=io.StringIO(),
    )
    (res,) = report.results
    assert res.status is SmokeStatus.SKIPPED and res.cell == "torch2.11.0-cu130-cp310"
    assert res.diagnosis is not None
    assert "nor any other cell it covers: torch2.11.0-cu130-cp311" in res.diagnosis


def test_smoke_command_override_keeps_the_matrix_project(tmp_path: Path) -> None:
    """`--smoke-command` with `--matrix`: relative test paths still point into the project."""
    import argparse

    from buildtools.cli.smoke import _smoke_project

    (tmp_path / "ext").mkdir()
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        "version: 1\nproject:\n  path: ext\n  smoke: python -m pytest tests\n"
        "  smoke_requires: [pytest]\naxes:\n  torch: ['2.11.0']\n  accelerator: [cpu]\n"
        "  python: ['3.12']\n"
    )

    def call(**kw: object) -> tuple[str | None, Path | None, tuple[str, ...]]:
        ns = {"smoke_command": None, "matrix": None, "project": None} | kw
        got = _smoke_project(argparse.Namespace(**ns))
        return got.command, got.directory, got.requires

    project = (tmp_path / "ext").resolve()
    assert call(matrix=matrix) == ("python -m pytest tests", project, ("pytest",))
    one = "python -m pytest tests/test_one.py"
    assert call(matrix=matrix, smoke_command=one) == (one, project, ("pytest",))
    other = tmp_path / "other"
    assert call(matrix=matrix, smoke_command=one, project=other) == (
        one,
        other.resolve(),
        ("pytest",),
    )
    # no matrix named: the command alone, as before
    assert call(smoke_command=one) == (one, None, ())
