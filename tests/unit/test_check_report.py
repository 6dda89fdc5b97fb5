"""What `buildtools check` says on a pass: the device code found, the torch checked against,
and which cached environment has the torch of a wheel's build record."""

from __future__ import annotations

import json
from pathlib import Path

from buildtools.toolchain.envs import MARKER, find_toolchain
from buildtools.wheel.checks.elves import WheelElf, describe_device_code
from buildtools.wheel.elf import DeviceCode, ElfInfo


def _elf(cuda: DeviceCode | None = None, hip: DeviceCode | None = None) -> WheelElf:
    info = ElfInfo(
        path=Path("/x.so"),
        machine="EM_X86_64",
        soname=None,
        needed=(),
        rpath=(),
        runpath=(),
        exported=frozenset(),
        undefined=(),
        cuda=cuda,
        hip=hip,
        cxx_abi=None,
    )
    return WheelElf(arcname="pkg/_C.so", info=info, grafted=False)


def test_device_code_in_words() -> None:
    archs = frozenset({"sm_90", "sm_100", "sm_80", "compute_120"})
    cuda = DeviceCode(kind="cuda", archs=archs)
    assert describe_device_code(_elf(cuda)) == "CUDA sm_80 sm_90 sm_100, PTX compute_120"
    cubins = DeviceCode(kind="cuda", archs=frozenset({"sm_90"}), complete=False)
    assert describe_device_code(_elf(cubins)) == "CUDA sm_90, no PTX (some unreadable)"
    hip = DeviceCode(kind="hip", archs=frozenset({"gfx942", "gfx90a"}))
    assert describe_device_code(_elf(hip=hip)) == "ROCm gfx90a gfx942"
    assert describe_device_code(_elf()) == "no device code"


def _env(cache: Path, name: str, torch: str, python: str, *, complete: bool = True) -> Path:
    root = cache / "toolchains" / name
    site = root / "lib" / f"python{python.rsplit('.', 1)[0]}" / "site-packages"
    (site / "torch").mkdir(parents=True)
    if complete:
        marker = {"torch_version": torch, "fields": {"python": python}}
        (root / MARKER).write_text(json.dumps(marker))
    return site


def test_the_environment_of_a_build_record_is_found_by_its_torch(tmp_path: Path) -> None:
    other_python = _env(tmp_path, "a", "2.13.0+cpu", "3.12.1")
    same = _env(tmp_path, "b", "2.13.0+cpu", "3.11.7")
    _env(tmp_path, "c", "2.11.0+cu130", "3.11.7")
    _env(tmp_path, "d", "2.14.0+cpu", "3.11.7", complete=False)  # no marker: never used
    assert find_toolchain(tmp_path, torch_version="2.13.0+cpu", python="3.11.7") == same
    assert find_toolchain(tmp_path, torch_version="2.13.0+cpu", python="3.12") == other_python
    assert find_toolchain(tmp_path, torch_version="2.13.0+cpu", python=None) is not None
    assert find_toolchain(tmp_path, torch_version="2.14.0+cpu", python="3.11.7") is None
    assert find_toolchain(tmp_path / "nothing", torch_version="2.13.0+cpu", python=None) is None
