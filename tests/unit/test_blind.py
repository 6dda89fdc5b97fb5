"""A CPU cell's build environment: no CUDA/ROCm variable, no device program on PATH."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from buildtools.ecosystem import load_ecosystem
from buildtools.toolchain.blind import blind_path, hide_device_toolchain


def _names(directory: str) -> list[str]:
    return sorted(p.name for p in Path(directory).iterdir())


def _bin(directory: Path, *names: str) -> Path:
    directory.mkdir(parents=True)
    for name in names:
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)
    return directory


def test_a_directory_holding_nvcc_is_replaced_by_links_to_everything_else(
    tmp_path: Path,
) -> None:
    shared = _bin(tmp_path / "usr-local-bin", "nvcc", "docker", "git")
    clean = _bin(tmp_path / "bin", "gcc")
    path = os.pathsep.join([str(clean), str(shared), str(tmp_path / "missing")])
    new, hidden = blind_path(path, ["nvcc", "hipcc"], mirror_root=tmp_path / "mirrors")
    first, mirror, missing = new.split(os.pathsep)
    assert first == str(clean) and missing == str(tmp_path / "missing")
    assert _names(mirror) == ["docker", "git"]
    assert (Path(mirror) / "git").resolve() == shared / "git"
    assert hidden == ((str(shared), mirror, "nvcc"),)
    # the same directory with the same entries: the same mirror, made once
    again, _ = blind_path(path, ["nvcc", "hipcc"], mirror_root=tmp_path / "mirrors")
    assert again == new
    # a new tool in the directory: a new mirror that has it
    (shared / "ninja").write_text("")
    newer, _ = blind_path(path, ["nvcc"], mirror_root=tmp_path / "mirrors")
    assert "ninja" in _names(newer.split(os.pathsep)[1])


def test_every_device_variable_and_program_of_the_data_is_hidden(tmp_path: Path) -> None:
    eco = load_ecosystem()
    toolkit = _bin(tmp_path / "toolkit", *eco.device_programs, "ptxas-like-other")
    env = {
        **{name: "/opt/toolkit" for name in eco.device_env},
        "PATH": str(toolkit),
        "CC": "gcc",
    }
    blinded = hide_device_toolchain(env, mirror_root=tmp_path / "m")
    assert not set(eco.device_env) & set(blinded.env)
    assert blinded.env["CC"] == "gcc"
    assert _names(blinded.env["PATH"]) == ["ptxas-like-other"]
    assert blinded.unset == eco.device_env
    assert blinded.describe().startswith("unset CUDA_HOME, CUDA_PATH")
    assert f"of {toolkit}" in blinded.describe()
    assert {"nvcc", "hipcc", "nvidia-smi"} <= set(eco.device_programs)
    assert {"CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "HIP_PATH"} <= set(eco.device_env)


def test_nothing_to_hide_leaves_the_environment_as_it_was(tmp_path: Path) -> None:
    clean = _bin(tmp_path / "bin", "gcc")
    blinded = hide_device_toolchain({"PATH": str(clean)}, mirror_root=tmp_path / "m")
    assert blinded.env == {"PATH": str(clean)} and blinded.describe() == ""
    assert not (tmp_path / "m").exists()


def test_the_startup_line_gives_an_interpreter_the_same_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The docker backend's build interpreter applies it at startup (a .pth line)."""
    shared = _bin(tmp_path / "usr-local-bin", "nvcc", "git")
    path = os.pathsep.join(["/venv/bin", str(shared), "/usr/bin"])
    env = {"PATH": path, "CUDA_HOME": "/usr/local/cuda", "HOME": "/root"}
    blinded = hide_device_toolchain(env, mirror_root=tmp_path / "m")
    line = blinded.startup_line()
    assert line.startswith("import os;") and line.count("\n") == 1
    for key in ("PATH", "CUDA_HOME", "HOME"):
        monkeypatch.setenv(key, env[key])
    exec(line)  # what site.addpackage does with an `import` line of a .pth file
    assert "CUDA_HOME" not in os.environ
    assert os.environ["PATH"] == blinded.env["PATH"]
