"""`buildtools build` for real: torch 2.13.0 CPU env, PEP 517 build, auditwheel, checks.

Build once, install elsewhere: the wheel is installed into a fresh venv next to torch and
imported there, not in the environment that built it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import HOST, HOST_CELL, REPO, buildtools
from fixtures.envs import cache_dir, fresh_venv


def test_default_build_produces_checked_wheel(example_wheelhouse: Path) -> None:
    report = json.loads((example_wheelhouse / "report.json").read_text())
    assert report["schema"] == "torch-buildtools/run-report/v1"
    (cell,) = [c for c in report["cells"] if c["status"] != "excluded-by-compat"]
    assert cell["cell"] == HOST_CELL
    assert cell["status"] == "built"
    assert not [f for f in cell["findings"] if f["severity"] == "error"]
    wheel = Path(cell["wheel"])
    assert wheel.parent == example_wheelhouse
    assert wheel.name.startswith("bt_scatter-0.1.0+pt213cpu-")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        libs = [
            n for n in names if "/lib" in n and ".so" in n and "bt_scatter" not in n.split("/")[-1]
        ]
        assert not [n for n in names if "libtorch" in n or "libc10" in n], names
        assert not libs, libs
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        assert "Requires-Dist: torch==2.13.*" in zf.read(meta).decode()


def test_wheel_installs_and_imports_in_a_fresh_venv(
    example_wheelhouse: Path, tmp_path: Path
) -> None:
    wheel = next(example_wheelhouse.glob("bt_scatter-*.whl"))
    py = fresh_venv(tmp_path / "venv", "torch==2.13.0", wheel)
    smoke = REPO / "examples" / "scatter" / "smoke.py"
    proc = subprocess.run(
        [str(py), str(smoke)], cwd=tmp_path, text=True, capture_output=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_failed_build_names_log_and_keeps_good_wheel(
    example_wheelhouse: Path, tmp_path: Path
) -> None:
    wheelhouse = tmp_path / "wh"
    shutil.copytree(example_wheelhouse, wheelhouse)
    good = {p.name: p.read_bytes() for p in wheelhouse.glob("*.whl")}
    broken = tmp_path / "broken"
    shutil.copytree(
        REPO / "examples" / "scatter", broken, ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
    cpp = broken / "csrc" / "scatter.cpp"
    cpp.write_text(cpp.read_text() + "\nthis is not C++;\n")
    proc = buildtools(
        "build", "--wheelhouse", str(wheelhouse), "--project", str(broken), "--no-live"
    )
    assert proc.returncode == 8, proc.stdout + proc.stderr
    log = wheelhouse / "logs" / f"{HOST_CELL}.log"
    assert f"{HOST_CELL}: " in proc.stderr and str(log) in proc.stderr
    assert "this is not C++" in log.read_text() or "error" in log.read_text()
    assert {p.name: p.read_bytes() for p in wheelhouse.glob("*.whl")} == good


def test_bad_matrix_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "matrix.yaml"
    bad.write_text(
        textwrap.dedent("""\
        axes:
          torch: ["2.13.0"]
          accelerator: [cpu]
          python: ["3.11"]
          platfrom: [linux_x86_64]
        """)
    )
    proc = buildtools("build", "--matrix", str(bad), "--wheelhouse", str(tmp_path / "wh"))
    assert proc.returncode == 3
    assert "matrix.yaml:5: axes.platfrom: unknown key" in proc.stderr
    assert "did you mean 'platform'?" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "wh").exists()


def _missing_python() -> str | None:
    """A Python torch 2.13 supports that this machine lacks (to make one job fail early)."""
    from buildtools.errors import ToolMissingError
    from buildtools.knowledge import load_knowledge
    from buildtools.toolchain.findpython import find_python

    for python in reversed(load_knowledge().torch_release("2.13").python):
        try:
            find_python(python, env=dict(os.environ), home=Path.home())
        except ToolMissingError:
            return python
    return None


def test_one_failing_job_does_not_stop_the_others(example_wheelhouse: Path, tmp_path: Path) -> None:
    missing = _missing_python()
    if missing is None:
        pytest.skip("every Python torch 2.13 supports is installed here; no job can fail early")
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        textwrap.dedent(f"""\
        project: {{path: {REPO / "examples" / "scatter"}}}
        axes:
          torch: ["2.13.0"]
          accelerator: [cpu]
          python: ["{missing}", "{HOST}"]
        accelerators:
          cpu: {{torch_index: https://download.pytorch.org/whl/cpu}}
        """)
    )
    wheelhouse = tmp_path / "wh"
    proc = buildtools(
        "build", "--matrix", str(matrix), "--wheelhouse", str(wheelhouse), "--no-live"
    )
    # the only failure is a missing tool (an interpreter): its exit code, 6
    assert proc.returncode == 6, proc.stdout + proc.stderr
    report = json.loads((wheelhouse / "report.json").read_text())
    status = {c["cell"]: c for c in report["cells"]}
    failed = status[f"torch2.13.0-cpu-cp{missing.replace('.', '')}"]
    assert failed["status"] == "failed"
    assert f"install one with: pyenv install {missing}" in failed["reason"]
    assert status[HOST_CELL]["status"] == "built"
    assert Path(status[HOST_CELL]["wheel"]).is_file()


CUDA_CELL = "torch2.11.0-cu130-cp312"


@pytest.fixture(scope="module")
def cuda_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wheelhouse = tmp_path_factory.mktemp("wheelhouse-cuda")
    proc = buildtools(
        "build",
        "--profile",
        "release",
        "--only",
        CUDA_CELL,
        "--wheelhouse",
        str(wheelhouse),
        "--no-live",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return wheelhouse


@pytest.mark.cuda_toolchain
def test_cuda_cell_builds_device_code_for_every_promised_arch(
    cuda_build: Path, tmp_path: Path
) -> None:
    from buildtools.wheel.elf import inspect_elf

    report = json.loads((cuda_build / "report.json").read_text())
    (cell,) = [c for c in report["cells"] if c["cell"] == CUDA_CELL]
    assert cell["status"] == "built"
    assert not [f for f in cell["findings"] if f["severity"] == "error"]
    wheel = Path(cell["wheel"])
    assert wheel.name.startswith("bt_scatter-0.1.0+pt211cu130-cp312-cp312-")
    with zipfile.ZipFile(wheel) as zf:
        (so,) = [n for n in zf.namelist() if n.endswith(".so")]
        zf.extract(so, tmp_path)
        assert not [
            n for n in zf.namelist() if "libcudart" in n or "libtorch" in n or "libc10" in n
        ]
    cuda = inspect_elf(tmp_path / so).cuda
    assert cuda is not None
    assert {"sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"} <= cuda.archs


@pytest.mark.cuda_toolchain
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to compare with 1")
def test_cuda_wheel_is_the_same_bytes_on_a_machine_with_fewer_cores(
    cuda_build: Path, tmp_path: Path
) -> None:
    # MAX_JOBS and nvcc --threads follow the cores; they must not reach the wheel (its
    # build record carried nvcc_threads: a 1-core and a 2-core machine made other bytes)
    wheelhouse = tmp_path / "one-core"
    argv = [sys.executable, "-m", "buildtools", "build", "--profile", "release"]
    argv += ["--only", CUDA_CELL, "--wheelhouse", str(wheelhouse), "--no-live"]
    proc = subprocess.run(
        argv,
        cwd=REPO,
        env={**os.environ, "BUILDTOOLS_CACHE_DIR": str(cache_dir())},
        text=True,
        capture_output=True,
        check=False,
        timeout=1800,
        preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MAX_JOBS=1" in proc.stdout + proc.stderr  # the scheduler saw one core
    (one,) = wheelhouse.glob("bt_scatter-*.whl")
    (two,) = cuda_build.glob("bt_scatter-*.whl")
    assert one.name == two.name
    assert one.read_bytes() == two.read_bytes(), _differing_members(one, two)


def _differing_members(a: Path, b: Path) -> list[str]:
    with zipfile.ZipFile(a) as za, zipfile.ZipFile(b) as zb:
        return [n for n in za.namelist() if za.read(n) != zb.read(n)]


@pytest.mark.cuda_toolchain
@pytest.mark.parametrize("forced", [True, False], ids=["shim", "no-shim"])
def test_cuda_cell_of_a_setup_gated_on_is_available(tmp_path: Path, forced: bool) -> None:
    """setup.py asks torch.cuda.is_available() (False here): never a CPU-only wheel labelled cu130.

    With the build shim the device code is compiled anyway; without it the no-device-code
    check rejects the cell and the wheel lands in rejected/, not in the wheelhouse.
    """
    env = "" if forced else "    build_env: {BUILDTOOLS_FORCE_CUDA_AVAILABLE: '0'}\n"
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        textwrap.dedent(f"""\
        project: {{path: {REPO / "tests" / "fixtures" / "ext_cuda_gate"}}}
        axes:
          torch: ["2.11.0"]
          accelerator: [cu130]
          python: ["3.12"]
        accelerators:
          cuda: {{torch_index: "https://download.pytorch.org/whl/{{accelerator}}"}}
          cu130:
            arch_list: "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
        """)
        + env
    )
    wheelhouse = tmp_path / "wh"
    proc = buildtools(
        "build", "--matrix", str(matrix), "--wheelhouse", str(wheelhouse), "--no-live"
    )
    if forced:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert len(list(wheelhouse.glob("ext_cuda_gate-0.1.0+pt211cu130-*.whl"))) == 1
        log = (wheelhouse / "logs" / "torch2.11.0-cu130-cp312.log").read_text()
        assert "torch.cuda.is_available() forced to True" in log
    else:
        assert proc.returncode == 9, proc.stdout + proc.stderr
        assert "no-device-code" in proc.stderr
        assert not list(wheelhouse.glob("*.whl"))
        assert list((wheelhouse / "rejected").glob("ext_cuda_gate-0.1.0+pt211cu130-*.whl"))


def test_incremental_tree_never_reuses_stale_objects(
    example_wheelhouse: Path, tmp_path: Path
) -> None:
    """Editing only a header must reach the compiler (setuptools alone would skip the build)."""
    project = tmp_path / "scatter"
    shutil.copytree(
        REPO / "examples" / "scatter", project, ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
    first = buildtools(
        "build", "--project", str(project), "--wheelhouse", str(tmp_path / "wh1"), "--no-live"
    )
    assert first.returncode == 0, first.stdout + first.stderr
    header = project / "csrc" / "scatter.h"
    header.write_text(header.read_text() + '\n#error "only the header changed"\n')
    second = buildtools(
        "build", "--project", str(project), "--wheelhouse", str(tmp_path / "wh2"), "--no-live"
    )
    assert second.returncode == 8, second.stdout + second.stderr
    assert "only the header changed" in (tmp_path / "wh2" / "logs" / f"{HOST_CELL}.log").read_text()
