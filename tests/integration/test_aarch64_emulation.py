"""An aarch64 (Grace Hopper / Grace Blackwell) CPU cell built and smoke-tested on an x86_64
machine under QEMU user emulation: the arm64 local base (docker/local-base.sh --arch arm64),
`buildtools build --backend docker --offline` of the aarch64 cell, the host's checks (ELF machine,
platform tag), and the wheel's import check and smoke.py in an arm64 container.

Runs where a binfmt handler for aarch64 is registered (marker `emulation`; `.ci/run`
registers one where it is root with apt), skips with the reason elsewhere. The cell is
torch 2.10.0 CPU for Python 3.11: the newest torch whose PyPI aarch64 wheel is CPU-only
(2.11 on are CUDA builds there; the CPU ones live on download.pytorch.org), for the Python
of the Debian bookworm base. The CUDA cell is opt-in (`cuda_toolchain` as well).
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

from buildtools.wheel.elf import inspect_elf

pytestmark = [pytest.mark.docker, pytest.mark.emulation]

REPO = Path(__file__).resolve().parents[2]
CELL = "torch2.10.0-cpu-cp311-aarch64"


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "torch-buildtools"
    return Path(os.environ.get("BUILDTOOLS_CACHE_DIR", default))


@pytest.fixture(scope="module")
def arm_base() -> str:
    """The arm64 base image (Debian bookworm, its Python 3.11), made once per recipe."""
    if os.geteuid() != 0:
        pytest.skip("making the arm64 base image needs root (debootstrap, chroot)")
    proc = subprocess.run(
        ["bash", str(REPO / "docker" / "local-base.sh"), "--arch", "arm64"],
        text=True,
        capture_output=True,
        check=False,
        timeout=3600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def arm_build(arm_base: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("aarch64")
    matrix = tmp / "matrix.yaml"
    matrix.write_text(
        textwrap.dedent(f"""\
        project: {{path: {REPO / "examples" / "scatter"}, abi: per-python}}
        axes:
          torch: ["2.10.0"]
          accelerator: [cpu]
          python: ["3.11"]
          platform: [linux_aarch64]
        accelerators:
          cpu: {{image: {arm_base}}}
        """)
    )
    wheelhouse = tmp / "wheelhouse"
    env = {**os.environ, "BUILDTOOLS_CACHE_DIR": str(cache_dir())}
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "buildtools", "build", "--matrix", str(matrix)),
            *("--backend", "docker", "--offline", "--wheelhouse", str(wheelhouse), "--no-live"),
        ],
        cwd=REPO,
        env=env,
        text=True,
        capture_output=True,
        check=False,
        timeout=5400,
    )
    log = wheelhouse / "logs" / f"{CELL}.log"
    assert proc.returncode == 0, (
        proc.stdout + proc.stderr + (log.read_text() if log.exists() else "")
    )
    return wheelhouse


def test_aarch64_cell_builds_under_emulation(arm_build: Path) -> None:
    report = json.loads((arm_build / "report.json").read_text())
    (cell,) = report["cells"]
    assert cell["cell"] == CELL and cell["status"] == "built", cell
    assert not [f for f in cell["findings"] if f["severity"] == "error"], cell["findings"]
    log = Path(cell["log"]).read_text()
    assert "linux_aarch64 on x86_64: emulated (qemu-aarch64" in log
    if os.uname().machine == "x86_64" and shutil.which("apt-get"):
        # the fast path (backends/docker/cross.py): x86_64 cross g++ and uv, run natively
        assert "[buildtools] compiler: the x86_64 cross g++ " in log, log[-3000:]
        assert "/buildtools/job/cross/c++ -shared" in log  # the link too (LDSHARED from CC)
        assert "$ uv pip install --python" in log
    wheel = Path(cell["wheel"])
    assert wheel.name.startswith("bt_scatter-0.1.0+pt210cpu-cp311-cp311-") and wheel.name.endswith(
        "_aarch64.whl"
    )
    with zipfile.ZipFile(wheel) as zf:
        so = next(n for n in zf.namelist() if n.endswith(".so"))
        data = zf.read(so)
    path = arm_build / "ext.so"
    path.write_bytes(data)
    assert inspect_elf(path).machine == "EM_AARCH64"


def test_aarch64_wheel_imports_and_smokes_in_an_arm64_container(
    arm_build: Path, arm_base: str
) -> None:
    wheel = next(arm_build.glob("bt_scatter-*aarch64.whl"))
    script = " && ".join(
        [
            "set -e",
            'test "$(uname -m)" = aarch64',
            "/opt/python/cp311-cp311/bin/python -m venv /tmp/v",
            # the wheels --offline prefetched: the container needs no network
            "/tmp/v/bin/pip install --quiet --no-index --find-links /pf torch==2.10.0 /w/"
            + wheel.name,
            "cd /tmp && /tmp/v/bin/python -c 'import bt_scatter, torch; print(torch.__version__)'",
            "/tmp/v/bin/python /smoke.py",
        ]
    )
    proc = subprocess.run(
        [
            *("docker", "run", "--rm", "--platform", "linux/arm64", "--network=none"),
            *("-v", f"{arm_build}:/w:ro", "-v", f"{cache_dir() / 'prefetch'}:/pf:ro"),
            *("-v", f"{REPO / 'examples' / 'scatter' / 'smoke.py'}:/smoke.py:ro"),
            *(arm_base, "bash", "-c", script),
        ],
        text=True,
        capture_output=True,
        check=False,
        timeout=3600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2.10.0" in proc.stdout
