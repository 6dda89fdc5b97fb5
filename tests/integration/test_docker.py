"""`buildtools build --backend docker --offline` for real: the example's CPU cell built by
cibuildwheel in a builder image made FROM a local base (docker/local-base.sh; no registry
is needed), with the network off and torch from the prefetched wheels; the wheel then
passes the checks on the host and imports in a clean venv outside the container.

The base image is made once per recipe (its tag hashes the script and the CPython builds
it copies) and reused by later runs; the builder image, the prefetched wheels and the
host's torch env are cached the same way, so a re-run pays for the container build only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from fixtures.cli import HOST, HOST_CELL, REPO, buildtools, cache_dir

pytestmark = pytest.mark.docker


@pytest.fixture(scope="session")
def local_base() -> str:
    """The manylinux-like base image for the host's Python, made once per recipe."""
    missing = [tool for tool in ("debootstrap", "chroot") if shutil.which(tool) is None]
    if missing or os.geteuid() != 0:
        reason = (
            f"making the local base image needs root and {', '.join(missing) or 'debootstrap'}"
            " (apt-get install -y debootstrap)"
        )
        if "docker" in os.environ.get("BUILDTOOLS_REQUIRE", ""):
            pytest.fail(f"BUILDTOOLS_REQUIRE=docker, but {reason}")
        pytest.skip(reason)
    proc = subprocess.run(
        ["bash", str(REPO / "docker" / "local-base.sh"), "--python", HOST],
        text=True,
        capture_output=True,
        check=False,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def docker_build(local_base: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CPU cell built by the docker backend, offline, FROM the local base.

    The example, with one build requirement of its own that buildtools does not provide
    (setuptools-scm, which brings vcs-versioning): prefetched, and installed by before-build.
    """
    tmp = tmp_path_factory.mktemp("docker")
    project = tmp / "scatter"
    shutil.copytree(
        REPO / "examples" / "scatter", project, ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"torch"]', '"torch", "setuptools-scm>=9"]'))
    matrix = tmp / "matrix.yaml"
    matrix.write_text(
        textwrap.dedent(f"""\
        project: {{path: {project}, abi: per-python}}
        axes:
          torch: ["2.13.0"]
          accelerator: [cpu]
          python: ["{HOST}"]
        accelerators:
          cpu:
            torch_index: https://download.pytorch.org/whl/cpu
            image: {local_base}
        """)
    )
    wheelhouse = tmp / "wheelhouse"
    proc = buildtools(
        *("build", "--matrix", str(matrix), "--backend", "docker", "--offline"),
        *("--wheelhouse", str(wheelhouse), "--no-live"),
    )
    log = wheelhouse / "logs" / f"{HOST_CELL}.log"
    assert proc.returncode == 0, (
        proc.stdout + proc.stderr + (log.read_text() if log.exists() else "")
    )
    return wheelhouse


def test_cpu_cell_builds_in_the_container_offline(docker_build: Path) -> None:
    report = json.loads((docker_build / "report.json").read_text())
    assert report["backend"] == "docker"
    assert "--backend docker --offline" in report["reproduce"]
    (cell,) = report["cells"]
    assert cell["cell"] == HOST_CELL and cell["status"] == "built", cell
    assert not [f for f in cell["findings"] if f["severity"] == "error"], cell["findings"]
    log = Path(cell["log"]).read_text()
    # cibuildwheel ran the plan's steps in the container, with the network off ...
    assert "--network=none" in log
    assert "[buildtools] network interfaces: lo\n" in log
    # ... torch came from the mounted prefetched wheels, at the job's pin: by uv (offline,
    # the prefetched wheels its only source), or by pip where no uv binary could be had
    if "# installs in the container: uv (" in log:
        assert 'UV_OFFLINE="1"' in log and 'UV_FIND_LINKS="/buildtools/wheels"' in log
        assert "$ uv pip install --python" in log and " + torch==2.13.0+cpu" in log
        assert "build[uv]" in log  # cibuildwheel's test venv too
    else:
        assert "# installs in the container: pip (no uv: " in log
        assert "Processing /buildtools/wheels/torch-2.13.0+cpu-" in log
    # the project's own build requirement, with its dependency, from the prefetched wheels
    # (uv says `+ setuptools-scm==10.3.4`, pip names the file `setuptools_scm-10.3.4-…`)
    for name in (r"setuptools[-_]scm", r"vcs[-_]versioning"):
        assert re.search(name + r"(?:==|-)\d", log), name
    assert "[buildtools] torch 2.13.0+cpu (CUDA None, HIP None)" in log
    # the CPU image has no CUDA/ROCm toolchain; one that had would be hidden from the build
    assert "[buildtools] CPU cell: the image has no CUDA/ROCm toolchain in sight" in log
    # ... the derived-exclude repair ran inside, and the import test passed there
    assert "-m auditwheel repair" in log and "--exclude libtorch_cpu.so" in log
    assert "[buildtools] import bt_scatter._C: ok (torch 2.13.0+cpu)" in log
    wheel = Path(cell["wheel"])
    assert wheel.parent == docker_build and wheel.name.startswith("bt_scatter-0.1.0+pt213cpu-")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert not [n for n in names if "libtorch" in n or "libc10" in n], names
        record = next(n for n in names if n.endswith("buildtools.json"))
        assert json.loads(zf.read(record))["torch"] == "2.13.0+cpu"


def test_the_containers_compiles_went_through_the_jobs_mounted_ccache(docker_build: Path) -> None:
    """The image's ccache, in front of c++ (masquerade links on PATH), wrote the job's cache
    on the host: a second container build of the same code hits it."""
    report = json.loads((docker_build / "report.json").read_text())
    log = Path(report["cells"][0]["log"]).read_text()
    assert 'PATH="/opt/buildtools/ccache:' in log  # first, before uv's directory if any
    assert "TORCH_NO_COMPILER_WRAPPER" in log
    cache = cache_dir() / "ccache" / HOST_CELL
    bookkeeping = {"ccache.conf", "stats", "CACHEDIR.TAG"}
    entries = [p for p in cache.rglob("*") if p.is_file() and p.name not in bookkeeping]
    assert entries, f"no compiler cache entries in {cache}"


def test_wheel_imports_in_a_clean_env_outside_the_container(
    docker_build: Path, tmp_path: Path
) -> None:
    wheel = next(docker_build.glob("bt_scatter-*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", "torch==2.13.0", str(wheel)],
        check=True,
        timeout=900,
    )
    smoke = REPO / "examples" / "scatter" / "smoke.py"
    proc = subprocess.run(
        [str(py), str(smoke)], cwd=tmp_path, text=True, capture_output=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
