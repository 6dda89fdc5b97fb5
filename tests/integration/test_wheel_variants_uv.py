"""The variant index as real installers read it: uv 0.13.10's wheel-variants preview picks the
variant for what the machine says (the NVIDIA provider's documented overrides), pip takes the
fallback from the same index, and neither needs the network (a file:// index, --offline).

The wheels are small crafted ones (the CUDA one with real nvcc 13.0 sm_80/sm_90 code,
tests/fixtures/cuda/), published with `publish` as `buildtools index` does; uv resolves with
`--no-deps --dry-run`, so nothing is installed. The full proof with the example's real wheels,
torch and its smoke is in docs/index.md, "Wheel variants".
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.crafted import make_wheel

from buildtools.index.publish import publish
from buildtools.index.settings import IndexSettings
from buildtools.index.wheels import read_wheel
from buildtools.knowledge import load_knowledge

UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
PY = f"cp{sys.version_info.major}{sys.version_info.minor}"
TAG = f"{PY}-{PY}-manylinux_2_28_x86_64"
CUDA_SO = Path(__file__).resolve().parents[1] / "fixtures" / "cuda" / "ext_sm80_sm90.so"
pytestmark = [
    pytest.mark.skipif(UV is None, reason="uv is not installed (a buildtools dependency)"),
    pytest.mark.skipif(sys.platform != "linux", reason="manylinux x86_64 wheels"),
]


def _wheel(directory: Path, accelerator: str, record: str) -> Path:
    files = {"bt_scatter/__init__.py": b"\n"}
    if accelerator != "cpu":
        files[f"bt_scatter/_C.{PY}.so"] = CUDA_SO.read_bytes()
    return make_wheel(
        directory,
        name="bt_scatter",
        version=f"0.1.0+pt213{accelerator}",
        tag=TAG,
        files=files,
        requires=["torch==2.13.*"],
        dist_info_files={"buildtools.json": record.encode()},
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("variants")
    head = '{"schema": 1, "cxx11_abi": true, '
    cpu = _wheel(tmp / "wh", "cpu", head + '"torch": "2.13.0+cpu", "accelerator": "cpu"}')
    cuda = _wheel(
        tmp / "wh",
        "cu130",
        head + '"torch": "2.13.0+cu130", "accelerator": "cu130", "cuda": "13.0", '
        '"arch_list": "8.0;9.0"}',
    )
    out = tmp / "site"
    publish(
        out,
        [read_wheel(cpu), read_wheel(cuda)],
        IndexSettings(wheel_variants=True),
        load_knowledge(),
    )
    return out


def _uv_picks(site: Path, tmp: Path, **env: str) -> str:
    assert UV is not None
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("NV_VARIANT", "UV_"))}
    proc = subprocess.run(
        [UV, "pip", "install", "--no-config", "--offline", "--cache-dir", str(tmp / "cache"),
         "--python", sys.executable, "--dry-run", "--no-deps",
         "--preview-features", "wheel-variants",
         "--index-url", (site / "wheel-variants").as_uri() + "/", "bt-scatter", "-v"],
        text=True, capture_output=True, timeout=120, check=False, env={**clean, **env},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = re.search(r"Selecting: bt-scatter==\S+ \[compatible\] \((\S+\.whl)\)", proc.stderr)
    assert found is not None, proc.stderr[-3000:]
    return found[1]


H100 = {
    "NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION": "13.0",
    "NV_VARIANT_PROVIDER_FORCE_SM_ARCH": "9.0",
}


@pytest.mark.parametrize(
    ("machine", "label"),
    [
        (H100, "-cu130.whl"),  # a CUDA 13 driver and an sm_90 GPU: the cu130 variant
        ({**H100, "NV_VARIANT_PROVIDER_FORCE_SM_ARCH": "7.0"}, "-cpu.whl"),  # no sm_70 code
        (
            {**H100, "NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION": "12.8"},
            "-cpu.whl",
        ),  # old driver
    ],
)
def test_uv_picks_the_variant_the_machine_supports(
    site: Path, tmp_path: Path, machine: dict[str, str], label: str
) -> None:
    picked = _uv_picks(site, tmp_path, **machine)
    assert picked == f"bt_scatter-0.1.0+pt213-{TAG}{label}"


def test_pip_without_variants_takes_the_fallback_of_the_same_index(
    site: Path, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--isolated", "download", "--no-deps", "--no-cache-dir", "-d",
         str(tmp_path / "dl"), "--index-url", (site / "wheel-variants").as_uri() + "/",
         "--python-version", f"{sys.version_info.major}.{sys.version_info.minor}",
         "--platform", "manylinux_2_28_x86_64", "--only-binary", ":all:", "bt-scatter", "-vv"],
        text=True, capture_output=True, timeout=120, check=False,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert [p.name for p in (tmp_path / "dl").iterdir()] == [f"bt_scatter-0.1.0+pt213-{TAG}.whl"]
    assert "Skipping link: invalid wheel filename" in proc.stdout  # the labelled twins
