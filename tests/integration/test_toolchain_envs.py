"""Real toolchains, and the example extension built with them.

- CPU: torch 2.13.0 / Python 3.11 env → `python -m build --wheel --no-isolation` of
  examples/scatter → the wheel installed into a fresh venv next to torch → smoke.py.
- CUDA (marker cuda_toolchain, downloads ~3 GB once): torch 2.11.0+cu130 / Python 3.12 with
  no system CUDA, the compiler from NVIDIA's PyPI wheels → a wheel with device code for
  every promised arch, kept in $BUILDTOOLS_ARTIFACTS (default /tmp/artifacts) for GPU runs.

Envs live in $BUILDTOOLS_CACHE_DIR (default ~/.cache/torch-buildtools) and are reused across
runs. Timings are printed (run with -s to see them).
"""

from __future__ import annotations

import os
import shutil
import struct
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from fixtures.cli import REPO
from fixtures.envs import cache_dir, fresh_venv
from fixtures.factories import make_job

from buildtools.context import RunContext
from buildtools.model import BuildJob
from buildtools.process import SubprocessRunner
from buildtools.toolchain.envs import Toolchain
from buildtools.toolchain.findpython import find_python
from buildtools.toolchain.prepare import prepare_toolchain

EXAMPLE = REPO / "examples" / "scatter"
CUDA_ARCHS = "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
RUNNER = SubprocessRunner()


def host_env() -> dict[str, str]:
    """The test process's environment without any system CUDA: the toolchain must bring one."""
    env = {k: v for k, v in os.environ.items() if k not in {"CUDA_HOME", "CUDA_PATH"}}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if "cuda" not in p.lower()
    )
    return env


def prepare(job: BuildJob, python: str, log_path: Path) -> tuple[Toolchain, float]:
    started = time.monotonic()
    with log_path.open("a", encoding="utf-8") as log:
        tc = prepare_toolchain(
            job,
            python,
            cache_dir=cache_dir(),
            ctx=RunContext(processes=RUNNER, env=host_env(), log=log),
        )
    seconds = time.monotonic() - started
    print(f"\n[{job.id}] toolchain {'reused' if tc.reused else 'created'} in {seconds:.1f} s")
    return tc, seconds


def build_env(tc: Toolchain, base: Mapping[str, str], **extra: str) -> dict[str, str]:
    env = dict(base)
    for key, value in tc.build_env:
        env[key] = f"{value}{os.pathsep}{env['PATH']}" if key == "PATH" else value
    env.update(extra)
    return env


def build_wheel(tc: Toolchain, tmp: Path, **extra: str) -> tuple[Path, float, str]:
    """Build examples/scatter from a private copy (parallel builds share no build/)."""
    src = tmp / "src"
    shutil.copytree(
        EXAMPLE, src, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "*.so")
    )
    log_path = tmp / "build.log"
    started = time.monotonic()
    with log_path.open("w", encoding="utf-8") as log:
        result = RUNNER.run(
            [
                str(tc.python),
                "-m",
                "build",
                "--wheel",
                "--no-isolation",
                "--outdir",
                str(tmp / "dist"),
            ],
            cwd=src,
            env=build_env(tc, host_env(), **extra),
            log=log,
        )
    seconds = time.monotonic() - started
    output = log_path.read_text(encoding="utf-8")
    assert result.ok, output[-6000:]
    (wheel,) = (tmp / "dist").glob("*.whl")
    print(f"built {wheel.name} ({wheel.stat().st_size / 1e6:.2f} MB) in {seconds:.1f} s")
    return wheel, seconds, output


def fatbin_archs(library: Path) -> tuple[set[int], set[int]]:
    """(SASS archs, PTX archs) in a shared object's .nv_fatbin section."""
    with library.open("rb") as fh:
        section = ELFFile(fh).get_section_by_name(".nv_fatbin")
        data = section.data() if section is not None else b""
    elf: set[int] = set()
    ptx: set[int] = set()
    off = 0
    while off + 16 <= len(data):
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, off)
        if magic != 0xBA55ED50:  # containers are 8-byte aligned
            off += 8
            continue
        pos, end = off + header_size, off + header_size + fat_size
        while pos < end:
            kind, _v, entry_header, padded = struct.unpack_from("<HHIQ", data, pos)
            sm = struct.unpack_from("<I", data, pos + 0x1C)[0]
            (ptx if kind == 1 else elf).add(sm)
            pos += entry_header + padded
        off = end
    return elf, ptx


def metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return zf.read(name).decode()


# ----------------------------------------------------------------------------------- CPU


@pytest.fixture(scope="module")
def cpu_toolchain(tmp_path_factory: pytest.TempPathFactory) -> Toolchain:
    log = tmp_path_factory.mktemp("cpu-env") / "toolchain.log"
    tc, _ = prepare(make_job(accelerator="cpu", torch="2.13.0", python="3.11"), "3.11", log)
    return tc


def test_cpu_toolchain_matches_cell_and_is_reused(cpu_toolchain: Toolchain, tmp_path: Path) -> None:
    tc = cpu_toolchain
    assert tc.torch.version == "2.13.0+cpu"
    assert tc.torch.cuda is None
    assert tc.torch.hip is None
    assert tc.torch.cxx11_abi
    assert tc.python_version.startswith("3.11.")
    assert (tc.site_packages / "torch").is_dir()
    again, seconds = prepare(
        make_job(accelerator="cpu", torch="2.13.0", python="3.11"), "3.11", tmp_path / "log"
    )
    assert again.reused
    assert (again.key, again.root) == (tc.key, tc.root)
    assert seconds < 60


def test_cpu_wheel_installs_elsewhere_and_passes_smoke(
    cpu_toolchain: Toolchain, tmp_path: Path
) -> None:
    wheel, _, output = build_wheel(cpu_toolchain, tmp_path, MAX_JOBS="2")
    assert wheel.name == "bt_scatter-0.1.0-cp311-cp311-linux_x86_64.whl"
    assert "building the CPU op only" in output
    assert "Requires-Dist: torch==2.13.*" in metadata(wheel)

    # Build once, install elsewhere: a fresh venv with only torch and the wheel.
    venv = tmp_path / "smoke-env"
    env = host_env()
    base = find_python("3.11", env=env, home=Path.home())
    python = fresh_venv(venv, "torch==2.13.0", wheel, python=base, env=env)
    smoke = RUNNER.run(
        [str(python), str(EXAMPLE / "smoke.py")],
        cwd=tmp_path,
        env=env,
        capture=True,
    )
    print(smoke.output)
    assert smoke.ok, smoke.output
    assert "smoke: OK" in smoke.output
    assert "checking the CPU op only" in smoke.output
    assert f"from {venv}" in smoke.output  # the installed copy, not the source tree


# ---------------------------------------------------------------------------------- CUDA


@pytest.mark.cuda_toolchain
def test_cuda13_toolchain_from_pypi_builds_device_code(tmp_path: Path) -> None:
    job = make_job(accelerator="cu130", torch="2.11.0", python="3.12", arch_list=CUDA_ARCHS)
    tc, _ = prepare(job, "3.12", tmp_path / "toolchain.log")
    assert tc.torch.version == "2.11.0+cu130"
    assert tc.torch.cuda == "13.0"
    assert tc.cuda_home == tc.site_packages / "nvidia" / "cu13"
    env = dict(tc.build_env)
    assert env["CUDA_HOME"] == str(tc.cuda_home)
    assert env["PATH"].split(os.pathsep)[0] == str(tc.cuda_home / "bin")

    wheel, seconds, output = build_wheel(
        tc, tmp_path, FORCE_CUDA="1", TORCH_CUDA_ARCH_LIST=CUDA_ARCHS, MAX_JOBS="2"
    )
    assert wheel.name == "bt_scatter-0.1.0-cp312-cp312-linux_x86_64.whl"
    assert f"{tc.cuda_home}/bin/nvcc" in output  # the wheels' nvcc, no other
    assert "Requires-Dist: torch==2.11.*" in metadata(wheel)

    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(unpacked)
    (library,) = (unpacked / "bt_scatter").glob("_C*.so")
    elf, ptx = fatbin_archs(library)
    assert elf == {75, 80, 86, 90, 100, 120}
    assert ptx == {120}

    # Without a GPU the CUDA build still imports against its torch and passes the CPU check.
    smoke = RUNNER.run(
        [str(tc.python), str(EXAMPLE / "smoke.py")],
        cwd=tmp_path,
        env={**host_env(), "PYTHONPATH": str(unpacked)},
        capture=True,
    )
    assert smoke.ok, smoke.output
    assert "kernels: CPU, CUDA" in smoke.output
    print(smoke.output.splitlines()[-1])

    artifacts = Path(os.environ.get("BUILDTOOLS_ARTIFACTS", "/tmp/artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    shutil.copy2(wheel, artifacts / wheel.name)
    print(f"CUDA build: {seconds:.0f} s; wheel kept at {artifacts / wheel.name}")
