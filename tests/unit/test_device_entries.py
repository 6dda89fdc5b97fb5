"""Each piece of device code with its bytes (devicecode.DeviceEntry, devicesize.arch_sizes),
read from real nvcc 13.0 and clang 15 output (tests/fixtures/cuda/, make_fixtures.sh).

Two builds of one kernel, plain and `--compress-mode=size`, check the compressed entries'
headers against each other: what a compressed entry says it inflates to is the plain
entry's payload. The HIP code objects' sizes are what `clang-offload-bundler --unbundle`
wrote for each target of ext_gfx90a_gfx1030.so (gfx90a 4560 bytes, gfx1030 3664).
"""

from __future__ import annotations

import io
from pathlib import Path

from elftools.elf.elffile import ELFFile
from fixtures.crafted import FATBIN_ELF, compressed_bundle, fatbin

from buildtools.wheel.devicecode import DeviceEntry, bundle_ids, fatbin_archs
from buildtools.wheel.devicesize import arch_sizes, cuda_sizes
from buildtools.wheel.elf import DeviceCode, inspect_elf

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cuda"


def _section(name: str, section: str) -> bytes:
    with (FIXTURES / name).open("rb") as f:
        found = ELFFile(f).get_section_by_name(section)
        assert found is not None, (name, section)
        data: bytes = found.data()
        return data


def _cuda(name: str) -> DeviceCode:
    code = inspect_elf(FIXTURES / name).cuda
    assert code is not None
    return code


def test_plain_cubins_are_their_header_and_payload() -> None:
    assert _cuda("ext_sm80_sm90.so").entries == (
        DeviceEntry(arch="sm_80", stored=64 + 3240, compressed=False, inflated=3240),
        DeviceEntry(arch="sm_90", stored=64 + 3704, compressed=False, inflated=3704),
    )
    # the whole fatbin section is its 16-byte container header and these two entries
    assert len(_section("ext_sm80_sm90.so", ".nv_fatbin")) >= 16 + 3304 + 3768


def test_compressed_cubins_say_so_and_inflate_to_the_plain_ones() -> None:
    plain = {e.arch: e for e in _cuda("ext_sm80_sm90.so").entries}
    zstd = _cuda("ext_sm80_sm90_zstd.so").entries
    assert [(e.arch, e.stored, e.compressed) for e in zstd] == [
        ("sm_80", 64 + 848, True),
        ("sm_90", 64 + 952, True),
    ]
    for entry in zstd:
        assert entry.inflated == plain[entry.arch].inflated
        assert (entry.stored or 0) < (plain[entry.arch].stored or 0)


def test_ptx_is_compressed_by_default_and_variants_keep_their_suffix() -> None:
    entries = {e.arch: e for e in _cuda("kernel_sm90a_sm100f_sm120_compute120.o").entries}
    assert set(entries) == {"sm_90a", "sm_100f", "sm_120", "compute_120"}
    assert entries["compute_120"].compressed and entries["compute_120"].inflated == 649
    assert not entries["sm_120"].compressed
    rdc = {e.arch: e for e in _cuda("kernel_rdc_sm100a_lto80.o").entries}
    # -rdc: nvcc compresses the relocatable cubins and the LTO IR too
    assert rdc["sm_100a"].compressed and rdc["sm_100a"].inflated == 5424
    assert rdc["lto_80"].compressed and rdc["lto_80"].inflated == 2392


def test_sizes_per_arch_sum_every_entry_and_say_which_are_compressed() -> None:
    both = _section("ext_sm80_sm90.so", ".nv_fatbin") + _section(
        "ext_sm80_sm90_zstd.so", ".nv_fatbin"
    )
    entries: list[DeviceEntry] = []
    archs, complete = fatbin_archs(io.BytesIO(both), 0, len(both), entries)
    assert (archs, complete) == ({"sm_80", "sm_90"}, True)
    sizes = arch_sizes(DeviceCode(kind="cuda", archs=frozenset(archs), entries=tuple(entries)))
    assert str(sizes["sm_80"]) == "4216 bytes, 1 of 2 entries compressed, 6480 inflated"
    assert str(arch_sizes(_cuda("ext_sm80_sm90_zstd.so"))["sm_90"]) == (
        "1016 bytes compressed, 3704 inflated"
    )
    assert str(arch_sizes(_cuda("ext_sm80_sm90.so"))["sm_90"]) == "3768 bytes"
    # what wheel-size lists: the stored bytes per arch
    assert cuda_sizes(FIXTURES / "ext_sm80_sm90_zstd.so") == {"sm_80": 912, "sm_90": 1016}


def test_hip_code_objects_are_sized_per_target() -> None:
    code = inspect_elf(FIXTURES / "ext_gfx90a_gfx1030.so").hip
    assert code is not None and code.complete
    assert sorted(code.entries, key=lambda e: e.arch) == [
        DeviceEntry(arch="gfx1030", stored=3664, compressed=False, inflated=3664),
        DeviceEntry(arch="gfx90a", stored=4560, compressed=False, inflated=4560),
    ]
    assert str(arch_sizes(code)["gfx90a"]) == "4560 bytes"


def test_a_compressed_bundle_says_the_inflated_size_and_no_stored_share() -> None:
    """clang's --offload-compress: one stream for every target, no bytes of one's own."""
    data = compressed_bundle(_section("ext_gfx90a_gfx1030.so", ".hip_fatbin"))
    entries: list[DeviceEntry] = []
    ids, complete = bundle_ids(io.BytesIO(data), 0, len(data), entries=entries)
    assert complete and "hipv4-amdgcn-amd-amdhsa--gfx90a" in ids
    assert sorted(entries, key=lambda e: e.arch) == [
        DeviceEntry(arch="gfx1030", stored=None, compressed=True, inflated=3664),
        DeviceEntry(arch="gfx90a", stored=None, compressed=True, inflated=4560),
    ]
    code = DeviceCode(kind="hip", archs=frozenset({"gfx90a"}), entries=tuple(entries))
    assert str(arch_sizes(code)["gfx90a"]) == "4560 bytes inflated, in a compressed bundle"
    assert code.sizes == ()  # no bytes in the file to attribute


def test_sizes_never_exceed_the_section_a_file_claims_more_than() -> None:
    """A container and a bundle entry claiming more bytes than there are: bounded, and the
    bundle's read is incomplete."""
    data = fatbin([(FATBIN_ELF, 80, 0)], payload=1 << 20)[: 16 + 64 + 100]
    entries: list[DeviceEntry] = []
    fatbin_archs(io.BytesIO(data), 0, len(data), entries)
    [entry] = entries
    assert entry.stored is not None and entry.stored <= len(data)
    bundle = bytearray(_section("ext_gfx90a_gfx1030.so", ".hip_fatbin"))
    cut = bytes(bundle[: len(bundle) // 2])
    entries = []
    _ids, complete = bundle_ids(io.BytesIO(cut), 0, len(cut), entries=entries)
    assert not complete
    assert all(e.stored is not None and e.stored <= len(cut) for e in entries)
