"""Adopting an extension as a new user would: what its setup.py does on a build machine.

A CPU cell of an extension whose setup.py adds its CUDA module whenever `nvcc` runs (as
torchsort's does) builds a CPU wheel on a machine with a CUDA toolkit: the test puts its
own `nvcc` first on PATH and sets CUDA_HOME, so it does not depend on this machine's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import textwrap
import zipfile
from pathlib import Path

import pytest
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


def test_check_finds_the_environment_of_the_build_record(tmp_path: Path) -> None:
    """No --torch: the environment `build` made for the record's torch; a pass names it and
    the device code of each shared object. Without one, the exact commands to make one."""
    _, matrix = _probe_project(tmp_path)
    env = {**os.environ, "BUILDTOOLS_CACHE_DIR": str(cache_dir())}
    wheelhouse = tmp_path / "wh"
    built = buildtools(
        "build", "--matrix", str(matrix), "--wheelhouse", str(wheelhouse), "--no-live", env=env
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = wheelhouse.glob("*.whl")
    proc = buildtools("check", str(wheel), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"checked against torch 2.13.0+cpu ({cache_dir()}" in proc.stdout
    assert re.search(r"ext_nvcc_probe/cpu\.[^ ]+\.so: no device code", proc.stdout)
    if importlib.util.find_spec("torch") is None:  # nothing here to fall back on
        empty = {**env, "BUILDTOOLS_CACHE_DIR": str(tmp_path / "empty-cache")}
        missing = buildtools("check", str(wheel), env=empty)
        assert missing.returncode == 6, missing.stdout + missing.stderr
        # argv lists joined by shlex: a plain requirement needs no quotes
        assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in (
            missing.stderr
        )
        assert f"buildtools check {wheel} --torch /tmp/torch-2.13.0-cpu/lib/python" in (
            missing.stderr
        )


def test_smoke_then_build_finds_the_cell_unchanged(tmp_path: Path) -> None:
    """A repository whose matrix.yaml says `path: .` (what init writes): smoke-results/, the
    site and the report written into it are no sources, so the next build is skipped."""
    root = tmp_path / "repo"
    shutil.copytree(REPO / "tests" / "fixtures" / "ext_nvcc_probe", root)
    (root / "matrix.yaml").write_text(
        textwrap.dedent(f"""\
        project:
          path: .
          smoke: python -c "import torch, ext_nvcc_probe.cpu as m; assert m.twice(torch.ones(2)).sum() == 4"
        axes:
          torch: ["2.13.0"]
          accelerator: [cpu]
          python: ["{HOST}"]
        """)
    )
    env = {**os.environ, "BUILDTOOLS_CACHE_DIR": str(cache_dir())}
    first = buildtools("build", "--no-live", cwd=root, env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    smoke = buildtools("smoke", "--accelerator", "cpu", cwd=root, env=env)
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert (root / "smoke-results" / "report.json").is_file()
    index = buildtools("index", "wheelhouse", "--base-url", "", cwd=root, env=env)
    assert index.returncode == 0, index.stdout + index.stderr
    again = buildtools("build", "--no-live", cwd=root, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    report = json.loads((root / "wheelhouse" / "report.json").read_text())
    assert [c["status"] for c in report["cells"]] == ["skipped-unchanged"], again.stdout


def test_init_then_the_first_next_command_works_with_buildtools_from_a_checkout(
    tmp_path: Path,
) -> None:
    """What a new user runs: `buildtools init .` in their repository, then the first command
    it prints. The noxfile installs buildtools from where the running one came from (this
    checkout, when it is installed from one: its direct_url.json)."""
    nox = shutil.which("nox")
    if nox is None:
        pytest.skip("nox is not installed (python3 -m pip install nox)")
    root = tmp_path / "ext"
    shutil.copytree(REPO / "tests" / "fixtures" / "ext_nvcc_probe", root)
    env = {k: v for k, v in os.environ.items() if k != "BUILDTOOLS_INSTALL"}
    env["BUILDTOOLS_CACHE_DIR"] = str(cache_dir())
    init = buildtools("init", ".", cwd=root, env=env)
    assert init.returncode == 0, init.stdout + init.stderr
    assert "CUDA decided by: probing the build machine (runs nvcc, reads CUDA_HOME)" in init.stdout
    assert "host-toolchain-probe" in init.stdout
    first = next(
        line.split("#")[0].strip()
        for line in init.stdout.split("\nnext:\n", 1)[1].splitlines()
        if line.strip()
    )
    assert first == "nox -s plan -- --profile release"
    from buildtools.adopt.origin import running_source

    source = running_source()
    if source[:1].isdigit():  # installed from an index, which does not serve it yet
        env["BUILDTOOLS_INSTALL"] = str(REPO)
    plan = subprocess.run(
        [nox, *first.split()[1:]],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    assert "torch2.13.0-cpu-cp" in plan.stdout and "cu130" in plan.stdout


def test_init_on_hostile_repositories_through_the_console_script(tmp_path: Path) -> None:
    """Issue 44's init cases as a user meets them (the real process, a real timeout): a
    setup.py and pyproject.toml of 300,000 blank lines (ran past 120 s), a setup.py linked to
    a file outside the repository, a --torch value with a newline."""
    root = tmp_path / "blank"
    root.mkdir()
    blank = "\n" * 300_000
    (root / "setup.py").write_text(
        blank + "from setuptools import setup\n" + blank + "py_limited_api = False\n"
        'setup(name="blank-ops", ext_modules=[])\n'
    )
    (root / "pyproject.toml").write_text(
        blank + "[build-system]\n" + blank + 'build-backend = "setuptools.build_meta"\n'
    )
    init = buildtools("init", ".", "--dry-run", "--torch", "2.13.0", cwd=root, timeout=120)
    assert init.returncode == 0, init.stdout[-2000:] + init.stderr[-2000:]
    assert "setuptools" in init.stdout and "--- would write" in init.stdout

    linked = tmp_path / "linked"
    linked.mkdir()
    outside = tmp_path / "outside.py"
    outside.write_text("SECRET = 'hunter2'\n")
    (linked / "setup.py").symlink_to(outside)
    refused = buildtools("init", ".", "--dry-run", cwd=linked, timeout=120)
    assert refused.returncode == 15, refused.stdout + refused.stderr
    assert refused.stderr.count("\n") == 1 and "leads out of" in refused.stderr
    assert "hunter2" not in refused.stdout + refused.stderr

    usage = buildtools("init", ".", "--torch", "2.11.0\n", cwd=root, timeout=120)
    assert usage.returncode == 2 and "Traceback" not in usage.stderr
    assert "argument --torch: '2.11.0\\n' is not a torch release" in usage.stderr
