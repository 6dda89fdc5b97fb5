"""wheel-size: thresholds (matrix.yaml build.size_*, applied by the build and by `buildtools
check` alike), severities, the device code per arch; cuda_compress in the plan."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from fixtures.crafted import make_site_packages, make_wheel
from fixtures.factories import make_job

from buildtools.cli.main import main
from buildtools.errors import ConfigError, ExitCode
from buildtools.knowledge import load_knowledge
from buildtools.matrix.config import load_matrix, parse_matrix
from buildtools.matrix.yamlsource import SourceMap
from buildtools.model import BuildJob, BuildRecord, Severity
from buildtools.planner import plan
from buildtools.wheel.checks import Expectation, check_wheel
from buildtools.wheel.checks.size import WHEEL_SIZE
from buildtools.wheel.devicesize import cuda_sizes
from buildtools.wheel.meta import relabel_wheel

CUDA = Path(__file__).resolve().parents[1] / "fixtures" / "cuda"
KB = load_knowledge()
SIZE = WHEEL_SIZE.name


def _wheel(tmp_path: Path) -> Path:
    kernel = (CUDA / "kernel_sm75_sm80_compute90.o").read_bytes()
    return make_wheel(tmp_path, files={"ext_ok/_C.so": kernel, "ext_ok/pad.bin": b"x" * 4096})


def _size_findings(
    wheel: Path, size_warning: int | None = None, size_error: int | None = None
) -> list[Any]:
    expect = Expectation(build_record=False, size_warning=size_warning, size_error=size_error)
    return [f for f in check_wheel(wheel, targets=[], expect=expect) if f.code == "wheel-size"]


def test_device_code_is_measured_per_arch_from_the_fatbin_entries() -> None:
    sizes = cuda_sizes(CUDA / "kernel_sm90a_sm100f_sm120_compute120.o")
    assert set(sizes) == {"sm_90a", "sm_100f", "sm_120", "compute_120"}
    assert all(size > 0 for size in sizes.values())


def test_a_wheel_over_the_warning_threshold_lists_its_device_code(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    size = wheel.stat().st_size
    assert _size_findings(wheel) == []  # far below PyPI's 100 MiB and GitHub's 2 GiB
    [warning] = _size_findings(wheel, size_warning=size - 1, size_error=size + 1)
    assert warning.severity is Severity.WARNING
    assert "above PyPI's default" in warning.message
    assert "device code per arch: sm_75 3.1 KiB, sm_80 3.2 KiB, compute_90 432 B" in (
        warning.message
    )
    assert "build.cuda_compress: size" in warning.message
    [error] = _size_findings(wheel, size_warning=1, size_error=size - 1)
    assert error.severity is Severity.ERROR and "GitHub release asset" in error.message


def _jobs(build: dict[str, Any], accelerators: list[str]) -> dict[str, Any]:
    data = {
        "project": {"path": "."},
        "axes": {"torch": ["2.13.0"], "accelerator": accelerators, "python": ["3.12"]},
        "build": build,
        "accelerators": {"cuda": {"build_env": {"NVCC_APPEND_FLAGS": "-lineinfo"}}},
    }
    mf = parse_matrix(data, SourceMap(path=Path("matrix.yaml"), lines={(): 1}), knowledge=KB)
    return {j.accelerator.name: j.env_dict for j in plan(mf, KB, host_python="3.12").jobs}


def test_cuda_compress_applies_to_cuda_12_8_and_newer_only() -> None:
    env = _jobs({"cuda_compress": "size"}, ["cpu", "cu126", "cu130"])
    assert env["cu130"]["NVCC_APPEND_FLAGS"] == "-lineinfo --compress-mode=size"
    assert env["cu126"]["NVCC_APPEND_FLAGS"] == "-lineinfo"  # nvcc 12.6 has no such option
    assert "NVCC_APPEND_FLAGS" not in env["cpu"]
    assert _jobs({}, ["cu130"])["cu130"]["NVCC_APPEND_FLAGS"] == "-lineinfo"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        ({"size_warning": "lots"}, "is not a size"),
        ({"cuda_compress": "tiny"}, "allowed"),
    ],
)
def test_bad_size_settings_name_the_key(build: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _jobs(build, ["cpu"])


def _built_wheel(tmp_path: Path) -> tuple[Path, BuildJob, BuildRecord]:
    """The crafted CUDA wheel as `buildtools build` leaves it: relabelled, with its record."""
    job = make_job(torch="2.13.0", accelerator="cu130", python="3.11", arch_list="7.5;8.0")
    record = BuildRecord.for_job(
        job,
        torch="2.13.0+cu130",
        cxx11_abi=True,
        python="3.11.9",
        device_runtime="13.0",
        fingerprint=None,
        source_fingerprint="0" * 64,
    )
    wheel = relabel_wheel(
        _wheel(tmp_path / "raw"),
        out_dir=tmp_path / "wheelhouse",
        local_version=job.local_version,
        requires_dist_torch=job.requires_dist,
        build_record=record.to_json(),
    )
    return wheel, job, record


def test_check_applies_the_matrix_size_limits_the_build_applies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`buildtools check --matrix M` judges a wheel's size by M's build.size_* as the build
    did (it used to judge by the defaults, and passed a wheel the build had failed)."""
    wheel, job, record = _built_wheel(tmp_path)
    size = wheel.stat().st_size
    project = tmp_path / "project"
    project.mkdir()
    matrix = project / "matrix.yaml"
    matrix.write_text(
        "project: {path: .}\n"
        "axes: {torch: ['2.13.0'], accelerator: [cu130], python: ['3.11']}\n"
        f"build: {{size_warning: {size // 2}, size_error: {size - 1}}}\n"
    )
    # the finding of the build's own check (wheelbuild.orchestrate: its record, its job)
    settings = load_matrix(matrix).matrix.build
    built = Expectation.of(record, settings=settings, job=job)
    [by_build] = [f for f in check_wheel(wheel, targets=[], expect=built) if f.code == SIZE]
    assert by_build.severity is Severity.ERROR and "(build.size_error)" in by_build.message

    site = make_site_packages(tmp_path / "site")
    argv = ["check", str(wheel), "--torch", str(site)]
    monkeypatch.delenv("BUILDTOOLS_MATRIX", raising=False)
    monkeypatch.chdir(tmp_path)  # no matrix.yaml here: the defaults (100 MiB, 2 GiB)

    def checked(*extra: str) -> tuple[int, str]:
        out = io.StringIO()
        return main([*argv, *extra], out), out.getvalue()

    code, text = checked()
    assert f"{SIZE}:" not in text, text
    code, text = checked("--matrix", str(matrix))
    assert code == ExitCode.CHECK_FAILED
    assert f"\n  error   {SIZE}: {by_build.message}\n" in text, text
    monkeypatch.chdir(project)  # ./matrix.yaml, as `buildtools build` there reads it
    assert checked()[1] == text
    monkeypatch.setenv("BUILDTOOLS_MATRIX", str(tmp_path / "missing.yaml"))
    assert checked()[1].count(f"{SIZE}:") == 0  # $BUILDTOOLS_MATRIX names none here
    # a named matrix that is not there: one line, the configuration's exit code
    assert checked("--matrix", str(tmp_path / "missing.yaml"))[0] == ExitCode.CONFIG
    assert capsys.readouterr().err.endswith(
        "missing.yaml: no such file; pass --matrix PATH or "
        "create matrix.yaml (see docs/matrix.md)\n"
    )
