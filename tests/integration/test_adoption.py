"""Adopting an extension as a new user would: what its setup.py does on a build machine.

A CPU cell of an extension whose setup.py adds its CUDA module whenever `nvcc` runs (as
torchsort's does) builds a CPU wheel on a machine with a CUDA toolkit: the test puts its
own `nvcc` first on PATH and sets CUDA_HOME, so it does not depend on this machine's.
"""

from __future__ import annotations

import os
import shutil
import textwrap
import zipfile
from pathlib import Path

from fixtures.cli import HOST, REPO, buildtools
from fixtures.envs import cache_dir


def _probe_project(tmp_path: Path) -> tuple[Path, Path]:
    project = tmp_path / "ext_nvcc_probe"
    shutil.copytree(REPO / "tests" / "fixtures" / "ext_nvcc_probe", project)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        textwrap.dedent(f"""\
        project: {{path: {project}}}
        axes:
          torch: ["2.13.0"]
          accelerator: [cpu]
          python: ["{HOST}"]
        """)
    )
    return project, matrix


def _host_with_a_cuda_toolkit(tmp_path: Path) -> dict[str, str]:
    """This environment plus a directory with `nvcc` (and another tool) first on PATH."""
    bin_dir = tmp_path / "toolkit-bin"
    bin_dir.mkdir()
    for name in ("nvcc", "other-tool"):
        tool = bin_dir / name
        tool.write_text("#!/bin/sh\nexit 0\n")
        tool.chmod(0o755)
    return {
        **os.environ,
        "BUILDTOOLS_CACHE_DIR": str(cache_dir()),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "CUDA_HOME": str(tmp_path / "no-such-cuda"),
    }


def test_cpu_cell_of_a_setup_that_probes_nvcc_builds_a_cpu_wheel(tmp_path: Path) -> None:
    _, matrix = _probe_project(tmp_path)
    env = _host_with_a_cuda_toolkit(tmp_path)
    wheelhouse = tmp_path / "wh"
    proc = buildtools(
        "build", "--matrix", str(matrix), "--wheelhouse", str(wheelhouse), "--no-live", env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = wheelhouse.glob("ext_nvcc_probe-0.1.0+pt213cpu-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        modules = sorted(n for n in zf.namelist() if n.endswith(".so"))
    assert [m.split(".")[0] for m in modules] == ["ext_nvcc_probe/cpu"], modules
    log = (wheelhouse / "logs" / f"torch2.13.0-cpu-cp{HOST.replace('.', '')}.log").read_text()
    assert "no CUDA/ROCm toolchain visible: unset CUDA_HOME" in log
    assert f"hid nvcc of {tmp_path / 'toolkit-bin'}" in log
