"""Regenerate the hostile wheels of this directory: `python tests/corpus/wheels/make.py`.

Each case is one small file crafted by hand (zip members, metadata, build records) so that
the corpus test (tests/integration/test_hostile_corpus.py) can feed it to `buildtools check`
and `buildtools index`; expect.tsv says what each must end in. The archives zipfile will
not write (encrypted, PPMd, links, lying CRCs and sizes, overlapping members) are written
byte by byte by `fixtures.hostile.zip_bytes`. The bombs are small files that inflate to
hundreds of MB; `bench/bombs.py` makes the 2 GB ones and measures what they cost.
"""

from __future__ import annotations

import io
import json
import struct
import sys
import zipfile
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from fixtures.crafted import make_so, make_wheel, offload_bundle  # noqa: E402
from fixtures.hostile import Member, patch_section, wheel_members, zip_bytes  # noqa: E402

TAG = "cp312-cp312-manylinux_2_28_x86_64"
RECORD = {"schema": 1, "torch": "2.13.0+cpu", "accelerator": "cpu", "cxx11_abi": True}


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return buf.getvalue()


def _wheel(
    name: str = "hostile",
    version: str = "1.0+pt213cpu",
    extra: dict[str, bytes] | None = None,
    *,
    record: object = RECORD,
    metadata_name: str | None = None,
    dist_info: str | None = None,
) -> bytes:
    di = dist_info or f"{name}-{version}.dist-info"
    members = {
        f"{name}/__init__.py": b"",
        f"{di}/METADATA": (
            f"Metadata-Version: 2.1\nName: {metadata_name or name}\nVersion: {version}\n"
            "Requires-Dist: torch==2.13.*\n"
        ).encode(),
        f"{di}/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {TAG}\n".encode(),
        f"{di}/buildtools.json": record
        if isinstance(record, bytes)
        else json.dumps(record).encode(),
        **(extra or {}),
    }
    members[f"{di}/RECORD"] = b""
    return _zip(members)


def cases() -> dict[str, bytes]:
    so = make_so(soname="_C.so", needed=["libc10.so"])
    good = _wheel(extra={"hostile/_C.so": so})
    return {
        "not-a-zip": b"this is not a zip file\n",
        "truncated": good[: len(good) // 2],
        "empty-zip": _zip({}),
        "zip-slip-member": _wheel(extra={"../../escaped.so": so}),
        "absolute-member": _wheel(extra={"/tmp/escaped.so": so}),
        "backslash-member": _wheel(extra={"hostile\\..\\..\\escaped.so": so}),
        "no-metadata": _zip({"hostile/__init__.py": b""}),
        "two-dist-infos": _wheel(extra={"other-1.0.dist-info/METADATA": b"Name: other\n"}),
        "record-not-json": _wheel(record=b"{not json"),
        "record-a-list": _wheel(record=[1, 2, 3]),
        "record-wrong-types": _wheel(record={**RECORD, "torch": 2.13, "cxx11_abi": "yes"}),
        "metadata-name-mismatch": _wheel(metadata_name="someone-else"),
        "corrupt-so": _wheel(extra={"hostile/_C.so": b"\x7fELF\x02\x01\x01" + b"\xff" * 64}),
        "so-is-text": _wheel(extra={"hostile/_C.so": b"#!/bin/sh\nrm -rf /\n"}),
    }


def _hip_bomb(inflated: int) -> bytes:
    """A `.hip_fatbin` holding one compressed offload bundle (CCOB v2, zlib) whose payload
    inflates to `inflated` bytes: a bundle header, then zeros."""
    head = offload_bundle(["hipv4-amdgcn-amd-amdhsa--gfx90a"])
    packer = zlib.compressobj(9)
    data = packer.compress(head)
    block = b"\0" * (1 << 20)
    for _ in range(inflated >> 20):
        data += packer.compress(block)
    data += packer.flush()
    total = 24 + len(data)
    return b"CCOB" + struct.pack("<HHIIQ", 2, 0, total, len(head) + inflated, 0) + data


def new_shapes() -> dict[str, dict[str, bytes]]:
    """The second pass's shapes (issue 24): case → {file name: bytes}."""
    so = make_so(soname="_C.so", needed=["libc10.so"])
    name = f"hostile-1.0+pt213cpu-{TAG}.whl"

    def one(*extra: Member, **kw: object) -> dict[str, bytes]:
        return {name: zip_bytes(wheel_members(extra=extra, **kw))}  # type: ignore[arg-type]

    nested = b"[" * 100_000 + b"]" * 100_000
    members = wheel_members(skip=["buildtools.json"])
    members.insert(1, Member("hostile-1.0+pt213cpu.dist-info/buildtools.json", nested))
    spellings = {}
    for spelled in ("hostile_x", "Hostile_X", "hostile.x"):
        body = zip_bytes(wheel_members(spelled, extra=[Member(f"{spelled}/v", spelled.encode())]))
        spellings[f"{spelled}-1.0+pt213cpu-{TAG}.whl"] = body
    cyrillic = "h\u043estile"  # the o is Cyrillic
    return {
        "encrypted-member": one(Member("hostile/_C.so", so, flags=0x1)),
        "ppmd-member": one(Member("hostile/_C.so", so, method=98)),
        "record-nested-deep": {name: zip_bytes(members)},
        "dynstr-size-2-64": one(
            Member("hostile/_C.so", patch_section(so, ".dynstr", "sh_size", 2**64 - 1))
        ),
        "dynstr-size-2-42": one(
            Member("hostile/_C.so", patch_section(so, ".dynstr", "sh_size", 2**42))
        ),
        "metadata-bomb": one(
            Member(
                "hostile-1.0+pt213cpu.dist-info/METADATA",
                b"Metadata-Version: 2.1\nName: hostile\nVersion: 1.0+pt213cpu\n\n"
                + b" " * (200 << 20),
            ),
            skip=["METADATA"],
        ),
        "so-bomb": one(Member("hostile/_C.so", so + b"\0" * (100 << 20))),
        # stored: the archive takes it; the bundle inside inflates to 300 MB
        "hip-bundle-bomb": one(
            Member(
                "hostile/_C.so",
                make_so(soname="_C.so", sections={".hip_fatbin": _hip_bomb(300 << 20)}),
                method=0,
            )
        ),
        "symlink-to-system-lib": one(
            Member("hostile/_C.so", b"/usr/lib/x86_64-linux-gnu/libc.so.6", mode=0o120777)
        ),
        "symlink-climbing-out": one(
            Member("hostile/data", b"../../../../etc/passwd", mode=0o120777)
        ),
        "no-wheel-file": one(skip=["WHEEL"]),
        "dist-info-of-another-project": one(dist_info="someone_else-2.0.dist-info"),
        "bad-crc": one(Member("hostile/_C.so", so, crc=0xDEADBEEF)),
        "duplicate-metadata": one(
            Member("hostile-1.0+pt213cpu.dist-info/METADATA", b"Name: other\nVersion: 9\n")
        ),
        "long-member-name": one(Member("hostile/" + "a" * 5000 + ".py", b"")),
        "cyrillic-project-name": {
            f"{cyrillic}-1.0+pt213cpu-{TAG}.whl": zip_bytes(wheel_members(cyrillic))
        },
        "fifo-member": one(Member("hostile/pipe", b"", mode=0o010644)),
        "overlapping-members": one(
            Member("hostile/a.py", b"x" * 64), Member("hostile/b.py", b"x" * 64, offset=0)
        ),
        "size-lies": one(Member("hostile/_C.so", so, file_size=len(so) * 2)),
        "three-spellings-of-one-name": spellings,
    }


SUFFIX = ".cpython-311-x86_64-linux-gnu.so"


def third_pass() -> dict[str, dict[str, bytes]]:
    """The third pass's shapes (issue 44): case → {file name: bytes}. The `smoke` cases are
    cp311 wheels the corpus test installs beside torch 2.13.0 (CPU) and smoke-tests."""
    import tempfile

    def built(record: dict[str, object], files: dict[str, bytes], **kw: object) -> dict[str, bytes]:
        with tempfile.TemporaryDirectory() as tmp:
            path = make_wheel(
                Path(tmp),
                name="hostile",
                version="1.0+pt213cpu",
                tag=str(kw.pop("tag", "cp311-cp311-linux_x86_64")),
                files={"hostile/__init__.py": b"", **files},
                requires=["torch==2.13.*"],
                dist_info_files={
                    "buildtools.json": json.dumps(record).encode(),
                    **kw.pop("dist_info", {}),  # type: ignore[dict-item]
                },
            )
            return {path.name: path.read_bytes()}

    smoke = {**RECORD, "python": "3.11", "cells": ["torch2.13.0-cpu-cp311"]}
    return {
        # class 9: a release and an accelerator torch never shipped name no page
        "record-torch-invented": built({**RECORD, "torch": "99.0.0+cpu"}, {}),
        "record-accelerator-invented": built(
            {**RECORD, "torch": "2.13.0+cu999", "accelerator": "cu999"}, {}
        ),
        # class 4: a number int() cannot read (Python's 4,300-digit limit)
        "record-cells-5000-digits": built(
            {**RECORD, "cells": ["torch2.13.0-cpu-cp3" + "9" * 5000]}, {}
        ),
        # class 2: a record field with ESC, C1 and bidi controls, shown by check
        "record-field-controls": built(
            {
                **RECORD,
                "arch_list": "8.0\x1b[2J\x9b31m\u202e;9.0",
                "torch": "2.13.0+cpu\x1b]0;x\x07",
            },
            {},
        ),
        # class 1: what an import returns is not the wheel's file
        "module-shadows-the-standard-library": built(
            smoke, {f"os{SUFFIX}": make_so(soname=f"os{SUFFIX}", exports=["PyInit_os"])}
        ),
        "module-init-of-another-name": built(
            smoke,
            {
                f"hostile/_renamed{SUFFIX}": make_so(
                    soname=f"_renamed{SUFFIX}", exports=["PyInit__original"]
                )
            },
        ),
        "top-level-names-the-standard-library": built(
            smoke, {}, dist_info={"top_level.txt": b"hostile\njson\n"}
        ),
        # class 2: an ImportError whose text is a workflow command and ESC sequences
        "import-error-workflow-command": built(
            smoke,
            {
                "hostile/__init__.py": b"raise ImportError("
                b"'\\x1b[2J\\n::warning title=pwned::injected\\n##[error]x\\u202e')\n"
            },
        ),
    }


FILES = {
    "not-a-zip": "not_a_zip-1.0-py3-none-any.whl",
    "truncated": f"truncated-1.0+pt213cpu-{TAG}.whl",
}


def main() -> None:
    for n, (slug, data) in enumerate(cases().items(), 1):
        name = FILES.get(slug, f"hostile-1.0+pt213cpu-{TAG}.whl")
        directory = HERE / f"{n:03d}-{slug}"
        directory.mkdir(exist_ok=True)
        for old in directory.glob("*.whl"):
            old.unlink()
        (directory / name).write_bytes(data)
    misnamed = HERE / "015-misnamed"
    misnamed.mkdir(exist_ok=True)
    (misnamed / "misnamed.whl").write_bytes(_wheel())
    for n, (slug, files) in enumerate(new_shapes().items(), 16):
        directory = HERE / f"{n:03d}-{slug}"
        directory.mkdir(exist_ok=True)
        for old in directory.glob("*.whl"):
            old.unlink()
        for file_name, data in files.items():
            (directory / file_name).write_bytes(data)
    for n, (slug, files) in enumerate(third_pass().items(), 36):
        directory = HERE / f"{n:03d}-{slug}"
        directory.mkdir(exist_ok=True)
        for old in directory.glob("*.whl"):
            old.unlink()
        for file_name, data in files.items():
            (directory / file_name).write_bytes(data)


if __name__ == "__main__":
    main()
