"""ELF parsing of hostile objects (`buildtools.wheel.elf`, `wheel.devicecode`): whatever a
shared object's headers claim, reading it ends in its facts or in one ValueError, reads
nothing beyond the file, and stays within memory and time bounds.

The generator patches section header fields of a valid object (`fixtures.hostile.
patch_section`) to values hypothesis draws, extremes included (2**64 - 1, 2**42), and
corrupts random bytes; the corpus (tests/corpus/wheels/019-, 020-, 023-) holds the shapes
seen in the second probe.
"""

from __future__ import annotations

import io
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest
from fixtures.crafted import FATBIN_ELF, Undef, fatbin, make_so, offload_bundle
from fixtures.hostile import patch_section
from hypothesis import given, settings
from hypothesis import strategies as st

from buildtools.wheel.devicecode import bundle_ids, fatbin_archs
from buildtools.wheel.elf import ElfInfo, inspect_elf_file

SO = make_so(
    soname="_C.so",
    needed=["libc10.so"],
    undefined=[Undef("memcpy", "GLIBC_2.14", "libc.so.6"), "_ZN3c105ErrorC2Ev"],
    exports=["PyInit__C"],
    sections={".nv_fatbin": fatbin([(FATBIN_ELF, 80, 0)]), ".hip_fatbin": offload_bundle(["x"])},
)
SECTIONS = [".dynstr", ".dynsym", ".gnu.version", ".gnu.version_r", ".dynamic", ".nv_fatbin",
            ".hip_fatbin", ".shstrtab"]  # fmt: skip
FIELDS = ["sh_offset", "sh_size", "sh_link", "sh_info", "sh_type", "sh_entsize"]
EXTREMES = st.sampled_from([0, 1, 7, 2**31, 2**32 - 1, 2**42, 2**63, 2**64 - 1])


def _inspect(data: bytes) -> ElfInfo | None:
    """The facts, or None after one clean ValueError; bounded in time."""
    started = time.monotonic()
    try:
        return inspect_elf_file(io.BytesIO(data), path=Path("hostile/_C.so"))
    except ValueError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("hostile/_C.so: "), exc
        return None
    finally:
        assert time.monotonic() - started < 5


@settings(max_examples=300, deadline=None)
@given(
    section=st.sampled_from(SECTIONS),
    field=st.sampled_from(FIELDS),
    value=EXTREMES | st.integers(0, 2**32 - 1),
)
def test_section_headers_that_lie_are_refused_or_read_within_the_file(
    section: str, field: str, value: int
) -> None:
    if field in ("sh_type", "sh_link", "sh_info"):
        value &= 0xFFFFFFFF
    _inspect(patch_section(SO, section, field, value))


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_corrupted_bytes_of_an_object_end_in_its_facts_or_one_error(data: st.DataObject) -> None:
    corrupt = bytearray(SO)
    for _ in range(data.draw(st.integers(1, 12))):
        corrupt[data.draw(st.integers(0, len(corrupt) - 1))] = data.draw(st.integers(0, 255))
    _inspect(bytes(corrupt[: data.draw(st.integers(0, len(corrupt)))]))


@pytest.mark.parametrize("size", [2**64 - 1, 2**42], ids=["2^64-1", "2^42"])
def test_a_string_table_larger_than_the_file_is_never_read(size: int) -> None:
    with pytest.raises(ValueError, match=r"section '\.dynstr': .* lie beyond the file's"):
        inspect_elf_file(io.BytesIO(patch_section(SO, ".dynstr", "sh_size", size)), path=Path("x"))


def test_a_compressed_offload_bundle_is_inflated_only_as_far_as_its_header() -> None:
    head = offload_bundle(["hipv4-amdgcn-amd-amdhsa--gfx942"])
    packer = zlib.compressobj(9)
    payload = packer.compress(head) + b"".join(
        packer.compress(b"\0" * (1 << 20)) for _ in range(512)
    )
    payload += packer.flush()  # 512 MiB of zeros after the header, ~0.5 MB compressed
    import struct

    ccob = b"CCOB" + struct.pack("<HHIIQ", 2, 0, 24 + len(payload), len(head) + (512 << 20), 0)
    data = ccob + payload
    tracemalloc.start()
    try:
        ids, _complete = bundle_ids(io.BytesIO(data), 0, len(data))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "hipv4-amdgcn-amd-amdhsa--gfx942" in ids
    assert peak < 8 << 20, peak  # the 1 MiB header window and its buffers, not 512 MiB


@pytest.mark.parametrize("header_size", [0, 1, 47])
def test_fatbin_entries_that_do_not_advance_end_the_scan(header_size: int) -> None:
    import struct

    entry = bytearray(64)
    struct.pack_into("<HHIQ", entry, 0, 2, 0x0101, header_size, 0)
    data = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, 1 << 40) + bytes(entry) * 1000
    _archs, complete = fatbin_archs(io.BytesIO(data), 0, len(data))
    assert not complete
