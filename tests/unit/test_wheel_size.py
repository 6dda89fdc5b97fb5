"""wheel-size: thresholds, severities, the device code per arch; cuda_compress in the plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fixtures.crafted import make_wheel

from buildtools.errors import ConfigError
from buildtools.knowledge import load_knowledge
from buildtools.matrix.config import parse_matrix
from buildtools.matrix.yamlsource import SourceMap
from buildtools.model import Severity
from buildtools.planner import plan
from buildtools.wheel.checks import Expectation, check_wheel
from buildtools.wheel.devicesize import cuda_sizes

CUDA = Path(__file__).resolve().parents[1] / "fixtures" / "cuda"
KB = load_knowledge()


def _wheel(tmp_path: Path) -> Path:
    kernel = (CUDA / "kernel_sm75_sm80_compute90.o").read_bytes()
    return make_wheel(tmp_path, files={"ext_ok/_C.so": kernel, "ext_ok/pad.bin": b"x" * 4096})


def _size_findings(wheel: Path, **limits: int) -> list[Any]:
    expect = Expectation(build_record=False, **limits)
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
