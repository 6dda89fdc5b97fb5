"""`buildtools smoke` with real child processes on the CPU machine (torch 2.13.0+cpu).

Each failure mode has its own fixture (tests/fixtures/smoke_*): an extension whose static
initializer throws (import aborts), one that aborts, segfaults or adds off by one on
request, smoke scripts that hang or report a wrong result; plus the real thing, ext_ok
with libc10/libtorch grafted by a naive auditwheel repair, imported beside torch.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

import pytest
from fixtures.cli import REPO
from fixtures.envs import (
    FIXTURES,
    TorchEnv,
    cache_dir,
    grafted_wheel,
)
from fixtures.factories import built_record, make_job

from buildtools.files import sha256_file
from buildtools.process import SubprocessRunner
from buildtools.smoke.run import SmokeOptions, run_smoke
from buildtools.smoke.smoke_report import RunnerInfo, SmokeReport, SmokeResult, SmokeStatus
from buildtools.smoke.wheelsources import WheelSource, collect_wheels
from buildtools.wheel.meta import relabel_wheel
from buildtools.wheel.repair import Grafting, RepairTools, plan_repair, run_repair, scan_torch_libs

TORCH = "2.13.0"
SCRIPTS = FIXTURES / "smoke_scripts"
RUNNER = SubprocessRunner()

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc/self/maps is Linux")


@pytest.fixture(scope="session")
def torch_version(torch213: TorchEnv) -> str:
    result = RUNNER.run(
        [str(torch213.python), "-c", "import torch; print(torch.__version__)"], capture=True
    )
    assert result.ok, result.output
    return result.output.strip().splitlines()[-1]


def _recorded(wheel: Path, torch_version: str, out_dir: Path, accelerator: str = "cpu") -> Path:
    """`wheel` as buildtools ships it: a build record for torch 2.13.0 (`accelerator`)."""
    job = make_job(
        torch=TORCH, accelerator=accelerator, python="3.11", requires_dist=f"torch=={TORCH}"
    )
    record = built_record(job, torch=torch_version, python="3.11")
    return relabel_wheel(
        wheel,
        out_dir=out_dir,
        local_version=f"pt213{accelerator}",
        requires_dist_torch=f"torch=={TORCH}",
        build_record=record,
    )


@pytest.fixture(scope="session")
def wheels(
    fixture_wheel: Callable[[str], Path],
    torch_version: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("recorded")
    built = {
        name: fixture_wheel(name)
        for name in ("smoke_crash", "smoke_abort_init", "ext_ok", "ext_undefined", "ext_guarded")
    }
    return {name: _recorded(w, torch_version, out / name) for name, w in built.items()}


def _smoke(
    torch213: TorchEnv,
    sources: Sequence[WheelSource],
    tmp_path: Path,
    *,
    command: str | None,
    timeout: float = 120.0,
    torch_source: str = "system",
    torch_index: str | None = None,
    optional_modules: frozenset[str] = frozenset(),
) -> SmokeReport:
    opts = SmokeOptions(
        optional_modules=optional_modules,
        out_dir=tmp_path / "out",
        cache_dir=cache_dir(),
        env=dict(os.environ),
        smoke_command=command,
        project_dir=SCRIPTS,
        torch_source=torch_source,  # type: ignore[arg-type]
        torch_python=torch213.python,
        torch_index=torch_index,
        timeout=timeout,
    )
    return run_smoke(sources, opts=opts, runner=RUNNER, accelerator="cpu", out=io.StringIO())


def _one(
    torch213: TorchEnv,
    wheel: Path,
    tmp_path: Path,
    *,
    command: str | None,
    timeout: float = 120.0,
    optional_modules: frozenset[str] = frozenset(),
) -> SmokeResult:
    report = _smoke(
        torch213,
        [WheelSource(path=wheel, origin=str(wheel))],
        tmp_path,
        command=command,
        timeout=timeout,
        optional_modules=optional_modules,
    )
    assert len(report.results) == 1
    return report.results[0]


def test_passing_wheel(torch213: TorchEnv, wheels: dict[str, Path], tmp_path: Path) -> None:
    res = _one(torch213, wheels["smoke_crash"], tmp_path, command="python ok.py")
    assert res.status is SmokeStatus.PASSED, res
    assert res.stage == "smoke" and res.diagnosis is None
    assert res.sha256 == sha256_file(wheels["smoke_crash"])
    assert res.cell == f"torch{TORCH}-cpu-cp311"
    # the installed package was tested, not a source tree: it lives in the fresh venv
    assert "/env/lib/python3.11/site-packages/smoke_crash" in res.output
    assert "smoke: OK" in res.output


def test_abort_from_a_static_initializer(
    torch213: TorchEnv, wheels: dict[str, Path], tmp_path: Path
) -> None:
    res = _one(torch213, wheels["smoke_abort_init"], tmp_path, command="python ok.py")
    assert res.status is SmokeStatus.ABORTED, res
    assert res.stage == "import"
    assert res.diagnosis is not None
    assert res.diagnosis.startswith("import of smoke_abort_init: SIGABRT: ")
    assert "thrown from a static initializer" in res.diagnosis
    assert "terminate called after throwing an instance of 'std::runtime_error'" in res.output


def test_abort_at_runtime(torch213: TorchEnv, wheels: dict[str, Path], tmp_path: Path) -> None:
    res = _one(torch213, wheels["smoke_crash"], tmp_path, command="python abort.py")
    assert res.status is SmokeStatus.ABORTED, res
    assert res.stage == "smoke"
    assert "smoke_crash: calling abort()" in res.output
    assert "duplicate libtorch" not in (res.diagnosis or "")


def test_segfault(torch213: TorchEnv, wheels: dict[str, Path], tmp_path: Path) -> None:
    res = _one(torch213, wheels["smoke_crash"], tmp_path, command="python segfault.py")
    assert res.status is SmokeStatus.SEGFAULT, res
    assert res.diagnosis == "smoke: SIGSEGV: segmentation fault"
    assert "writing through a null pointer" in res.output
    assert "Fatal Python error: Segmentation fault" in res.output  # faulthandler's stack


def test_hang_is_killed_at_the_timeout(
    torch213: TorchEnv, wheels: dict[str, Path], tmp_path: Path
) -> None:
    res = _one(torch213, wheels["smoke_crash"], tmp_path, command="python hang.py", timeout=20)
    assert res.status is SmokeStatus.TIMEOUT, res
    assert res.diagnosis is not None
    assert res.diagnosis.startswith("smoke: killed after 20 s without finishing; last output: ")
    assert "waiting forever" in res.diagnosis
    assert "waiting forever" in res.output


def test_wrong_result(torch213: TorchEnv, wheels: dict[str, Path], tmp_path: Path) -> None:
    res = _one(torch213, wheels["smoke_crash"], tmp_path, command="python wrong.py")
    assert res.status is SmokeStatus.WRONG_RESULT, res
    assert res.diagnosis == "smoke command exited 1: smoke: FAIL: add(2, 2) = 5, expected 4"


def test_undefined_symbol_is_an_import_error(
    torch213: TorchEnv, wheels: dict[str, Path], tmp_path: Path
) -> None:
    res = _one(torch213, wheels["ext_undefined"], tmp_path, command=None)
    assert res.status is SmokeStatus.IMPORT_ERROR, res
    assert res.diagnosis is not None
    assert "undefined symbol: _ZN3c1023definitely_not_in_torchEi" in res.diagnosis


def test_naively_repaired_wheel_aborts_with_the_duplicate_libtorch_diagnosis(
    torch213: TorchEnv,
    fixture_wheel: Callable[[str], Path],
    torch_version: str,
    integration_log: IO[str],
    tmp_path: Path,
) -> None:
    """What really happens on CPU: ext_ok with libc10/libtorch_cpu grafted aborts at import."""
    raw = fixture_wheel("ext_ok")
    grafted = grafted_wheel(
        raw, torch213, RUNNER, plat="manylinux_2_34_x86_64", log=integration_log
    )
    wheel = _recorded(grafted, torch_version, tmp_path / "recorded")
    res = _one(torch213, wheel, tmp_path, command="python first_op.py")
    assert res.status is SmokeStatus.ABORTED, res
    assert res.stage == "import"
    assert res.diagnosis is not None
    assert (
        "duplicate libtorch: the wheel bundles its own libc10/libtorch; repair with excludes"
        in (res.diagnosis)
    )
    assert "ext_ok.libs/libc10-" in res.diagnosis and "ext_ok.libs/libtorch_cpu-" in res.diagnosis
    # torch 2.13.0+cpu: the grafted libtorch_cpu's static registrations collide with torch's
    assert "Tried to register multiple backend fallbacks for the same dispatch key Conjugate" in (
        res.output
    )


@pytest.fixture(scope="session")
def c10_only(
    torch213: TorchEnv,
    fixture_wheel: Callable[[str], Path],
    torch_version: str,
    integration_log: IO[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Path:
    """ext_ok repaired with an incomplete exclude list: only libc10.so is grafted."""
    raw = fixture_wheel("ext_ok")
    out = tmp_path_factory.mktemp("c10only")
    plan = plan_repair(
        raw,
        dest_dir=out / "repaired",
        plat="manylinux_2_34_x86_64",
        tools=RepairTools(python=sys.executable),
        grafting=Grafting(
            excludes=("libtorch_cpu.so", "libtorch_python.so"),
            library_dirs=scan_torch_libs(torch213.site_packages).library_dirs,
        ),
    )
    repaired = run_repair(plan, runner=RUNNER, log=integration_log)
    return _recorded(repaired, torch_version, out / "recorded")


def test_a_second_libc10_is_seen_in_the_maps(
    torch213: TorchEnv, c10_only: Path, tmp_path: Path
) -> None:
    """Importing works, so only /proc/self/maps shows the second copy; both paths named."""
    res = _one(torch213, c10_only, tmp_path, command=None)
    assert res.status is SmokeStatus.FAILED, res
    assert res.stage == "import"
    dup = next(f for f in res.findings if f.startswith("libc10 is mapped 2 times: "))
    assert "/torch/lib/libc10.so" in dup
    assert "/site-packages/ext_ok.libs/libc10-" in dup
    assert res.diagnosis is not None and "duplicate libtorch" in res.diagnosis


def test_a_second_libc10_aborts_at_the_first_op(
    torch213: TorchEnv, c10_only: Path, tmp_path: Path
) -> None:
    """What really happens on CPU with torch 2.13: the first op through ext_ok aborts."""
    res = _one(torch213, c10_only, tmp_path, command="python first_op.py")
    assert res.status is SmokeStatus.ABORTED, res
    assert res.stage == "smoke"
    assert "PyTorch was compiled without Python support" in res.output
    assert res.diagnosis is not None and "duplicate libtorch" in res.diagnosis
    assert any(f.startswith("libc10 is mapped 2 times: ") for f in res.findings)


def test_find_links_page_installs_the_published_wheel(
    torch213: TorchEnv, wheels: dict[str, Path], tmp_path: Path
) -> None:
    wheel = wheels["smoke_crash"]
    site = tmp_path / "site"
    site.mkdir()
    (site / wheel.name).write_bytes(wheel.read_bytes())
    digest = sha256_file(wheel)
    quoted = wheel.name.replace("+", "%2B")
    page = site / "index.html"
    page.write_text(
        f'<html><body><a href="{quoted}#sha256={digest}">{wheel.name}</a></body></html>'
    )
    sources = collect_wheels([], [str(page)], download_dir=tmp_path / "downloads")
    assert [s.name for s in sources] == [wheel.name]
    report = _smoke(torch213, sources, tmp_path, command="python ok.py")
    res = report.results[0]
    assert res.status is SmokeStatus.PASSED, res
    assert res.source == page.parent.as_uri() + "/" + quoted
    log = Path(res.log or "").read_text()
    assert f"--find-links {page}" in log and "smoke-crash==0.1.0+pt213cpu" in log

    # a page whose digest does not match what it serves
    page.write_text(f'<a href="{quoted}#sha256={"0" * 64}">x</a>')
    bad = collect_wheels([], [str(page)], download_dir=tmp_path / "downloads2")
    res = _smoke(torch213, bad, tmp_path / "bad", command="python ok.py").results[0]
    assert res.status is SmokeStatus.FAILED
    assert res.diagnosis == f"sha256 mismatch: the page says {'0' * 64}"


def test_torch_from_an_index(torch213: TorchEnv, wheels: dict[str, Path], tmp_path: Path) -> None:
    """`index`: a cached torch-only torch213 made by pip (here pip's own configured source)."""
    empty_index = tmp_path / "empty-index"
    empty_index.mkdir()
    report = _smoke(
        torch213,
        [WheelSource(path=wheels["smoke_crash"], origin="x")],
        tmp_path,
        command="python ok.py",
        torch_source="index",
        torch_index=empty_index.as_uri(),
    )
    res = report.results[0]
    assert res.status is SmokeStatus.PASSED, res
    assert res.torch_source == "index"
    assert "/smoke/torch/py3.11-torch2.13.0+cpu-" in Path(res.log or "").read_text()


def test_cli_writes_reports_and_exits_non_zero(
    torch213: TorchEnv, wheels: dict[str, Path], tmp_path: Path
) -> None:
    house = tmp_path / "wheelhouse"
    house.mkdir()
    for name in ("smoke_crash", "smoke_abort_init"):
        (house / wheels[name].name).write_bytes(wheels[name].read_bytes())
    summary = tmp_path / "summary.md"
    run_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run_env.update(
        GITHUB_ACTIONS="true",
        GITHUB_STEP_SUMMARY=str(summary),
        PYTHONPATH=str(REPO),
        BUILDTOOLS_CACHE_DIR=str(cache_dir()),
    )
    argv = [
        sys.executable,
        "-m",
        "buildtools",
        "smoke",
        str(house),
        "--smoke-command",
        "python ok.py",
        "--project",
        str(SCRIPTS),
        "--accelerator",
        "cpu",
        "--torch-python",
        str(torch213.python),
        "--out",
        str(tmp_path / "results"),
    ]
    proc = subprocess.run(
        argv, env=run_env, cwd=tmp_path, capture_output=True, text=True, check=False, timeout=600
    )
    assert proc.returncode == 12, proc.stdout + proc.stderr
    assert "1 wheel(s) failed the smoke test" in proc.stderr
    assert "::error file=" in proc.stdout and "title=smoke aborted%3A smoke_abort_init" in (
        proc.stdout
    )
    report = json.loads((tmp_path / "results" / "report.json").read_text())
    assert report["schema"] == "torch-buildtools/smoke-report/v1"
    assert {(r["wheel"].split("-")[0], r["status"]) for r in report["results"]} == {
        ("smoke_crash", "passed"),
        ("smoke_abort_init", "aborted"),
    }
    assert all(len(r["sha256"]) == 64 for r in report["results"])
    suite = ET.parse(tmp_path / "results" / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("errors") == "1" and suite.get("tests") == "2"
    assert "| ❌ aborted |" in summary.read_text()


# --------------------------------------------------------------------------- issue 22


def test_a_compiled_module_the_package_swallows_fails_the_wheel(
    torch213: TorchEnv, wheels: dict[str, Path], tmp_path: Path
) -> None:
    """`import ext_guarded` succeeds (it guards `_accel`); loading `_accel` by name does not."""
    res = _one(torch213, wheels["ext_guarded"], tmp_path, command=None)
    assert res.status is SmokeStatus.IMPORT_ERROR, res
    assert res.stage == "import"
    assert res.diagnosis is not None
    assert res.diagnosis.startswith("import of ext_guarded succeeded, but compiled module ")
    assert "ext_guarded._accel (ext_guarded/_accel.cpython-311-x86_64-linux-gnu.so)" in (
        res.diagnosis
    )
    assert "undefined symbol: _ZN7guarded14missing_kernelEi" in res.diagnosis
    assert "undefined symbol guarded::missing_kernel(int)" in res.diagnosis  # demangled
    outcomes = {m.name: (m.outcome, m.mapped) for m in res.modules}
    assert outcomes == {
        "ext_guarded._core": ("loaded", None),
        "ext_guarded._accel": ("failed", None),
        # a plain library: not imported by name; the package's ctypes.CDLL mapped it
        "ext_guarded._helper": ("skipped", True),
    }
    helper = next(m for m in res.modules if m.name == "ext_guarded._helper")
    assert helper.detail is not None and helper.detail.startswith("no PyInit__helper: ")


def test_the_same_module_declared_optional_is_reported_not_failed(
    torch213: TorchEnv, wheels: dict[str, Path], tmp_path: Path
) -> None:
    res = _one(
        torch213,
        wheels["ext_guarded"],
        tmp_path,
        command=None,
        optional_modules=frozenset({"ext_guarded._accel"}),
    )
    assert res.status is SmokeStatus.PASSED, res
    accel = next(m for m in res.modules if m.name == "ext_guarded._accel")
    assert accel.outcome == "optional-failed"
    assert accel.detail is not None and "guarded::missing_kernel(int)" in accel.detail
    assert any(
        f.startswith("optional module ext_guarded._accel did not load: ") for f in (res.findings)
    )
    report = SmokeReport(runner=_report_runner(), results=(res,))
    modules = report.to_json()["results"][0]["modules"]
    assert {m["module"]: m["outcome"] for m in modules} == {
        "ext_guarded._accel": "optional-failed",
        "ext_guarded._core": "loaded",
        "ext_guarded._helper": "skipped",
    }


def _report_runner() -> RunnerInfo:
    return RunnerInfo(
        accelerator="cpu",
        gpu=None,
        driver=None,
        torch=TORCH,
        torch_cuda=None,
        python="3.11",
        date="2026-11-25T00:00:00+00:00",
        host="test",
    )


@pytest.mark.parametrize("how", ["--accelerator cuda", "declared cuda, --accelerator auto"])
def test_a_cuda_smoke_with_a_cpu_torch_is_refused_before_installing(
    torch213: TorchEnv,
    fixture_wheel: Callable[[str], Path],
    torch_version: str,
    tmp_path: Path,
    how: str,
) -> None:
    """On this GPU-less machine, with torch 2.13.0+cpu: exit 17, one line, nothing installed."""
    wheel = _recorded(fixture_wheel("smoke_crash"), torch_version, tmp_path / "cu", "cu130")
    run_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run_env.update(PYTHONPATH=str(REPO), BUILDTOOLS_CACHE_DIR=str(cache_dir()))
    argv = [sys.executable, "-m", "buildtools", "smoke", str(wheel), "--system-torch"]
    argv += ["--torch-python", str(torch213.python), "--out", str(tmp_path / "results")]
    argv += ["--smoke-command", "python ok.py", "--project", str(SCRIPTS)]
    if how.startswith("declared"):
        run_env["BUILDTOOLS_RUNNER_ACCELERATOR"] = "cuda"
    else:
        argv += ["--accelerator", "cuda"]
    proc = subprocess.run(
        argv, env=run_env, cwd=tmp_path, capture_output=True, text=True, check=False, timeout=600
    )
    assert proc.returncode == 17, proc.stdout + proc.stderr
    error = proc.stderr.strip().splitlines()[0]
    assert error.startswith("error: no GPU visible: ")
    assert f"torch {torch_version} (CPU) in {torch213.python}" in error
    assert "likely cause: " in error
    report = json.loads((tmp_path / "results" / "report.json").read_text())
    assert [r["status"] for r in report["results"]] == ["no-device"]
    assert report["runner"]["device_check"] in proc.stderr
    assert not (tmp_path / "results" / "logs").exists()  # no wheel was installed
