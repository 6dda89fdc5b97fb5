"""Regenerate the hostile wheels of this directory: `python tests/corpus/wheels/make.py`.

Each case is one small file crafted by hand (zip members, metadata, build records) so that
the corpus test (tests/integration/test_hostile_corpus.py) can feed it to `buildtools check`
and `buildtools index`; expect.tsv says what each must end in.
"""

from __future__ import annotations

import io
import json
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from fixtures.crafted import make_so  # noqa: E402

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


if __name__ == "__main__":
    main()
