"""The stable-ABI facts: header declarations, the merged per-release document, its loader,
and the range reader that takes a member out of a remote wheel."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
import zlib
from pathlib import Path

import pytest
from fixtures.fakehttp import FakeHttp
from packaging.tags import Tag
from packaging.version import Version

from buildtools.errors import KnowledgeError, NetworkError
from buildtools.knowledge.shimheaders import (
    Declaration,
    abi_version,
    calls,
    declarations,
    is_inline_header,
    is_shim_header,
)
from buildtools.knowledge.stableabi import (
    FactsLibrary,
    FactsRelease,
    ReleaseInput,
    dump_facts,
    load_stable_abi,
    merge,
    shim_like,
)
from buildtools.torchindex.members import extract, listing, read_small
from buildtools.torchindex.simple import IndexFile

# the shape of torch 2.13.0's torch/csrc/stable/c/shim.h and aoti_torch/c/shim.h
SHIM = """\
#ifndef STABLE_TORCH_SHIM
#define STABLE_TORCH_SHIM
#include <torch/csrc/inductor/aoti_torch/c/macros.h>
#ifdef __cplusplus
extern "C" {
#endif
AOTI_TORCH_EXPORT int32_t aoti_torch_dtype_float32();
// AOTI_TORCH_EXPORT int32_t aoti_torch_commented_out();
/* AOTI_TORCH_EXPORT int32_t aoti_torch_in_block_comment(); */
#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_10_0
AOTI_TORCH_EXPORT AOTITorchError torch_call_dispatcher(
    const char* opName,
    StableIValue* stack,
    uint64_t extension_build_version);
#ifdef USE_CUDA
AOTI_TORCH_EXPORT AOTITorchError
torch_get_current_cuda_blas_handle(void** ret);
#endif // USE_CUDA
#endif // TORCH_FEATURE_VERSION >= TORCH_VERSION_2_10_0
#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_12_0
AOTI_TORCH_EXPORT int32_t aoti_torch_dtype_float8_e8m0fnu();
#else
AOTI_TORCH_EXPORT int32_t aoti_torch_old_spelling();
#endif
#ifdef __cplusplus
}
#endif
#endif // STABLE_TORCH_SHIM
"""
MACROS = """\
#ifdef __GNUC__
#define AOTI_TORCH_EXPORT __attribute__((__visibility__("default")))
#else
#define AOTI_TORCH_EXPORT __declspec(dllexport)
#endif
"""
VERSION_H = """\
#pragma once
#define TORCH_VERSION_MAJOR 2

#define TORCH_VERSION_MINOR 13

#define TORCH_VERSION_PATCH 0

#define TORCH_VERSION_ABI_TAG 0
"""
INLINE = """\
inline Tensor empty_like(const Tensor& self) {
  TORCH_ERROR_CODE_CHECK(torch_call_dispatcher("aten::empty_like", "", stack, TORCH_ABI_VERSION));
  // torch_commented_call(x);
  const char* s = "aoti_torch_in_a_string(";
  return aoti_torch_get_dtype (x);
}
"""


def test_declarations_keep_their_guard_and_condition() -> None:
    got = declarations(SHIM)
    assert got["aoti_torch_dtype_float32"] == Declaration(
        name="aoti_torch_dtype_float32", guard=None
    )
    assert got["torch_call_dispatcher"].guard == "2.10.0"
    cuda = got["torch_get_current_cuda_blas_handle"]
    assert (cuda.guard, cuda.conditions) == ("2.10.0", ("USE_CUDA",))
    assert got["aoti_torch_dtype_float8_e8m0fnu"].guard == "2.12.0"
    # the #else branch of a feature guard: an older spelling, under the negated condition
    old = got["aoti_torch_old_spelling"]
    assert old.guard is None and old.conditions == ("!(2.12.0)",)
    assert "aoti_torch_commented_out" not in got and "aoti_torch_in_block_comment" not in got


def test_a_define_of_the_export_macro_is_no_declaration() -> None:
    assert declarations(MACROS) == {}


def test_calls_and_abi_version() -> None:
    assert calls(INLINE) == {"torch_call_dispatcher", "aoti_torch_get_dtype"}
    assert abi_version(VERSION_H) == "0x020d000000000000"
    assert abi_version("#pragma once\n") is None


def test_which_headers() -> None:
    assert is_shim_header("torch/csrc/inductor/aoti_torch/c/shim.h")
    assert is_shim_header("torch/csrc/inductor/aoti_torch/generated/c_shim_aten.h")
    assert is_shim_header("torch/csrc/stable/c/shim.h")
    assert not is_shim_header("torch/csrc/inductor/aoti_torch/utils.h")
    assert is_inline_header("torch/csrc/stable/ops.h")
    assert is_inline_header("torch/headeronly/util/Exception.h")
    assert not is_inline_header("torch/csrc/stable/c/shim.h") or is_shim_header(
        "torch/csrc/stable/c/shim.h"
    )
    assert shim_like("aoti_torch_get_dtype") and shim_like("torch_call_dispatcher")
    assert not shim_like("_ZN3c106detail14torchCheckFailEPKcS2_jS2_")


# --- merge, dump, load ---------------------------------------------------------------------


def _release(version: str) -> FactsRelease:
    return FactsRelease(
        version=version,
        wheel=f"torch-{version}-cp312-cp312-manylinux_2_28_x86_64.whl",
        url=f"https://files.example/torch-{version}.whl",
        sha256="0" * 64,
        abi_version=f"0x02{int(version.split('.')[1]):02x}000000000000",
        libraries=(
            FactsLibrary(
                member="torch/lib/libtorch_cpu.so", size=1, crc32="00000000", exports=9, shims=2
            ),
        ),
        declared=3,
    )


def _input(version: str, exported: set[str], inline: set[str] = frozenset()) -> ReleaseInput:  # type: ignore[assignment]
    decls = declarations(SHIM)
    return ReleaseInput(
        release=_release(version),
        declared={"torch/csrc/stable/c/shim.h": decls},
        inline_calls=frozenset(inline),
        exports={"libtorch_cpu.so": frozenset(exported), "libtorch_cuda.so": frozenset()},
    )


def test_merge_gives_first_and_last_release_and_skips_what_no_library_exports(
    tmp_path: Path,
) -> None:
    base = {"aoti_torch_dtype_float32", "torch_call_dispatcher", "aoti_torch_old_spelling"}
    doc = merge(
        [
            _input("2.12.0", base | {"aoti_torch_dtype_float8_e8m0fnu"}),
            _input("2.10.0", base, {"torch_call_dispatcher"}),
            _input(
                "2.13.0", base - {"aoti_torch_old_spelling"} | {"aoti_torch_dtype_float8_e8m0fnu"}
            ),
        ],
        about="test",
        source="test",
        platform="linux_x86_64",
    )
    rows = {s["name"]: s for s in doc["symbols"]}
    assert [r["version"] for r in doc["releases"]] == ["2.10.0", "2.12.0", "2.13.0"]
    assert rows["torch_call_dispatcher"] == {
        "name": "torch_call_dispatcher",
        "library": "libtorch_cpu.so",
        "since": "2.10.0",
        "header": "torch/csrc/stable/c/shim.h",
        "guard": "2.10.0",
        "inline": "2.10.0",
    }
    assert rows["aoti_torch_dtype_float8_e8m0fnu"]["since"] == "2.12.0"
    assert rows["aoti_torch_old_spelling"]["until"] == "2.12.0"
    assert "torch_get_current_cuda_blas_handle" not in rows  # declared, exported by none

    path = tmp_path / "stable_abi.json"
    path.write_text(dump_facts(doc))
    facts = load_stable_abi(path)
    assert facts.versions == ("2.10.0", "2.12.0", "2.13.0")
    shim = facts.symbol("aoti_torch_dtype_float8_e8m0fnu")
    assert shim is not None
    assert not facts.exports_in(shim, "2.10.0") and not facts.exports_in(shim, "2.11.0")
    assert facts.exports_in(shim, "2.12.1") and facts.exports_in(shim, "2.13.0")
    old = facts.symbol("aoti_torch_old_spelling")
    assert old is not None and not facts.exports_in(old, "2.13.0")
    assert len(path.read_text().splitlines()) > len(rows)  # one shim per line


def test_merge_refuses_a_shim_that_comes_back() -> None:
    base = {"aoti_torch_dtype_float32"}
    with pytest.raises(ValueError, match=r"torch_call_dispatcher: exported, then not in 2\.12\.0"):
        merge(
            [
                _input("2.10.0", base | {"torch_call_dispatcher"}),
                _input("2.12.0", base),
                _input("2.13.0", base | {"torch_call_dispatcher"}),
            ],
            about="t",
            source="t",
            platform="linux_x86_64",
        )


def test_the_packaged_facts_load_and_cover_the_window() -> None:
    facts = load_stable_abi()
    assert facts.oldest == "2.10.0"
    assert {"2.10.0", "2.11.0", "2.12.0", "2.13.0", "2.14.1", "2.15.0"} <= set(facts.versions)
    for release in facts.releases:  # each with its source: the wheel and the index's hash
        assert release.wheel.startswith(f"torch-{release.version}-")
        assert release.url.endswith(release.wheel) and len(release.sha256) == 64
    shim = facts.symbol("aoti_torch_get_dtype")
    assert shim is not None and shim.since == "2.10.0" and shim.library == "libtorch_cpu.so"
    newer = [s for s in facts.symbols.values() if Version(s.since) > Version("2.10.0")]
    assert newer, "no shim newer than 2.10.0: the facts would prove nothing about floors"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["symbols"][0].update(since="2.99.0"), "since: 2.99.0 is not one of"),
        (lambda d: d["symbols"].append(dict(d["symbols"][0])), "listed twice"),
        (lambda d: d["symbols"][0].update(name="bad name"), "symbols[0].name"),
        (lambda d: d["releases"].reverse(), "must be sorted oldest first"),
        (lambda d: d.pop("releases"), "releases: Field required"),
    ],
)
def test_bad_facts_are_refused_naming_the_key(tmp_path: Path, change, message: str) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads(
        dump_facts(
            merge(
                [
                    _input("2.10.0", {"torch_call_dispatcher"}),
                    _input("2.12.0", {"torch_call_dispatcher"}),
                ],
                about="t",
                source="t",
                platform="linux_x86_64",
            )
        )
    )
    change(doc)
    path = tmp_path / "stable_abi.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(KnowledgeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_stable_abi(path)


# --- members of a remote wheel ---------------------------------------------------------------


def _wheel(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _index_file(url: str, data: bytes) -> IndexFile:
    return IndexFile(
        filename=url.rsplit("/", 1)[1],
        url=url,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        version=Version("2.13.0"),
        build=(),
        tags=frozenset({Tag("cp312", "cp312", "manylinux_2_28_x86_64")}),
    )


def test_a_large_member_is_streamed_by_ranges_and_checked(tmp_path: Path) -> None:
    library = bytes(range(256)) * 4096 + zlib.compress(b"x" * 100_000)  # ~1 MiB, mixed
    data = _wheel(
        {
            "torch/include/torch/csrc/stable/c/shim.h": SHIM.encode(),
            "torch/lib/libtorch_cpu.so": library,
        }
    )
    url = "https://files.example/torch-2.13.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    http = FakeHttp()
    http.add_file(url, data)
    wheel = _index_file(url, data)
    members = {m.name: m for m in listing(wheel, http)}
    lib = members["torch/lib/libtorch_cpu.so"]
    out = io.BytesIO()
    before = len(http.requests)
    extract(wheel, http, lib, out, max_size=2 << 20, chunk=64 << 10)
    assert out.getvalue() == library
    ranges = [r.byte_range for r in http.requests[before:]]
    assert all(r is not None for r in ranges) and len(ranges) >= lib.compressed // (64 << 10)
    header = members["torch/include/torch/csrc/stable/c/shim.h"]
    assert read_small(wheel, http, header, max_size=1 << 20).decode() == SHIM
    with pytest.raises(NetworkError, match="over the 1000 read"):
        extract(wheel, http, lib, io.BytesIO(), max_size=1000, chunk=1 << 20)


def test_a_member_whose_bytes_do_not_match_its_crc_is_refused() -> None:
    data = bytearray(_wheel({"torch/lib/libc10.so": b"\x7fELF" + b"a" * 5000}))
    url = "https://files.example/torch-2.13.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    wheel = _index_file(url, bytes(data))
    http = FakeHttp()
    http.add_file(url, bytes(data))
    (member,) = listing(wheel, http)
    tampered = bytearray(data)
    start = member.offset + 30 + len(member.name)
    tampered[start + 5] ^= 0x01  # one bit of the deflate stream
    http.add_file(url, bytes(tampered))
    with pytest.raises(NetworkError, match=r"libc10\.so"):
        extract(wheel, http, member, io.BytesIO(), max_size=1 << 20, chunk=1 << 20)
