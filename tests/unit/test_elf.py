"""ELF facts (buildtools.wheel.elf) on crafted ELF files and real nvcc objects: SONAME, needed
libraries, paths, versioned undefined symbols, the C++ ABI they imply, and the device code
(CUDA fatbins, HIP offload bundles) with its architectures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fixtures.crafted import (
    C10_ERROR_CXX11,
    C10_ERROR_OLD,
    FATBIN_ELF,
    FATBIN_LTO,
    FATBIN_PTX,
    Undef,
    fatbin,
    make_so,
    offload_bundle,
)

from buildtools.wheel.elf import (
    cxx_abi_of,
    demangle,
    inspect_elf,
    parse_fatbin,
    parse_offload_bundles,
    strip_graft_hash,
)

CUDA_FIXTURES = Path(__file__).parents[1] / "fixtures" / "cuda"
UNDEFINED = "_ZN3c1023definitely_not_in_torchEi"
STRING_CXX11 = "_ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE9_M_createERmm"


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_elf_dynamic_facts(tmp_path: Path) -> None:
    so = make_so(
        soname="libx.so",
        needed=["libc10.so", "libc.so.6"],
        rpath="/a:/b",
        runpath="$ORIGIN/../torch/lib",
        exports=["foo", "_ZN3c103barEv"],
        undefined=[
            Undef("memcpy", "GLIBC_2.14", "libc.so.6"),
            Undef(STRING_CXX11, "GLIBCXX_3.4.21", "libstdc++.so.6"),
            UNDEFINED,
            Undef("__gmon_start__", weak=True),
        ],
    )
    info = inspect_elf(write(tmp_path / "libx.so", so))
    assert info.machine == "EM_X86_64"
    assert info.soname == "libx.so"
    assert info.needed == ("libc10.so", "libc.so.6")
    assert info.rpath == ("/a", "/b")
    assert info.runpath == ("$ORIGIN/../torch/lib",)
    assert info.exported == {"foo", "_ZN3c103barEv"}
    assert [(s.name, s.version, s.library) for s in info.undefined] == [
        (UNDEFINED, None, None),
        (STRING_CXX11, "GLIBCXX_3.4.21", "libstdc++.so.6"),
        ("memcpy", "GLIBC_2.14", "libc.so.6"),
    ]
    assert str(info.undefined[2]) == "memcpy@GLIBC_2.14"
    assert info.undefined[0].demangled == "c10::definitely_not_in_torch(int)"
    assert info.cxx_abi == "cxx11"
    assert info.cuda is None and info.hip is None and not info.has_device_code


def test_elf_cache_follows_mtime_and_size(tmp_path: Path) -> None:
    path = write(tmp_path / "libx.so", make_so(soname="libx.so"))
    first = inspect_elf(path)
    assert inspect_elf(path) is first
    write(path, make_so(soname="libx.so", exports=["more"]))
    os.utime(path, ns=(1, 1))
    assert inspect_elf(path).exported == {"more"}


def test_elf_rejects_non_elf(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a readable ELF"):
        inspect_elf(write(tmp_path / "x.so", b"\x7fELF" + b"\0" * 10))


@pytest.mark.parametrize(
    ("name", "archs"),
    [
        ("kernel_sm75_sm80_compute90.o", {"sm_75", "sm_80", "compute_90"}),
        ("kernel_sm90a_sm100f_sm120_compute120.o", {"sm_90a", "sm_100f", "sm_120", "compute_120"}),
        (
            "kernel_rdc_sm100a_lto80.o",
            {"sm_100a", "compute_90a", "lto_80", "sm_110f", "compute_120f"},
        ),
    ],
)
def test_real_nvcc_objects(name: str, archs: set[str]) -> None:
    info = inspect_elf(CUDA_FIXTURES / name)
    assert info.cuda is not None
    assert info.cuda_archs == archs
    assert info.cuda.complete


def test_crafted_fatbin_in_a_shared_object(tmp_path: Path) -> None:
    # two containers, as when several objects are linked into one .so
    data = (
        fatbin([(FATBIN_ELF, 75, 0), (FATBIN_ELF, 80, 0)])
        + b"\0" * 8
        + fatbin([(FATBIN_ELF, 90, 0x100000), (FATBIN_PTX, 120, 0), (FATBIN_LTO, 86, 0)])
    )
    assert parse_fatbin(data) == {"sm_75", "sm_80", "sm_90a", "compute_120", "lto_86"}
    info = inspect_elf(write(tmp_path / "k.so", make_so(sections={".nv_fatbin": data})))
    assert info.cuda_archs == {"sm_75", "sm_80", "sm_90a", "compute_120", "lto_86"}


def test_hip_offload_bundles(tmp_path: Path) -> None:
    data = (
        offload_bundle(["host-x86_64-unknown-linux-gnu-", "hipv4-amdgcn-amd-amdhsa--gfx90a"])
        + b"\0" * 16
        + offload_bundle(["hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"], compress=True)
    )
    assert parse_offload_bundles(data) == {"gfx90a", "gfx942"}
    info = inspect_elf(write(tmp_path / "h.so", make_so(sections={".hip_fatbin": data})))
    assert info.hip is not None
    assert info.hip_archs == {"gfx90a", "gfx942"}
    assert info.hip.complete


@pytest.mark.parametrize(
    ("name", "plain"),
    [
        ("libc10-bd5b4540.so", "libc10.so"),
        ("libcudart-1a2b3c4d.so.13", "libcudart.so.13"),
        ("libnvrtc-builtins-0123abcd.so.13.0", "libnvrtc-builtins.so.13.0"),
        ("libtorch_cpu.so", "libtorch_cpu.so"),
        ("libfoo-notahash.so", "libfoo-notahash.so"),
    ],
)
def test_strip_graft_hash(name: str, plain: str) -> None:
    assert strip_graft_hash(name) == plain


def test_demangle() -> None:
    assert demangle(UNDEFINED) == "c10::definitely_not_in_torch(int)"
    assert demangle("memcpy") == "memcpy"
    assert demangle("_Znot_really") == "_Znot_really"


@pytest.mark.parametrize(
    ("symbols", "abi"),
    [
        ([C10_ERROR_CXX11], "cxx11"),
        ([C10_ERROR_OLD], "pre-cxx11"),
        ([C10_ERROR_CXX11, C10_ERROR_OLD], "mixed"),
        (["_ZN2at6TensorD1Ev", "memcpy"], None),
        # string_view is in both ABIs and says nothing
        (["_ZN3c106detail5checkESt17basic_string_viewIcSt11char_traitsIcEE"], None),
    ],
)
def test_cxx_abi_of(symbols: list[str], abi: str | None) -> None:
    assert cxx_abi_of(symbols) == abi
