"""wheelmeta: relabel/retag round trips keep a valid RECORD and never touch the input."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import zipfile
from pathlib import Path

import pytest
from fixtures.crafted import make_so, make_wheel
from fixtures.factories import built_record, make_job
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packaging.version import Version

from buildtools.model import BuildRecord, build_record_problems
from buildtools.wheel.meta import (
    BUILD_RECORD_NAME,
    PlatformTag,
    WheelName,
    platform_tag_satisfies,
    read_build_record,
    read_metadata,
    relabel_wheel,
    retag_wheel,
    torch_requirements,
    with_local_version,
)

RECORD = {"schema": 1, "torch": "2.11.0+cu130", "accelerator": "cu130", "cxx11_abi": True}


def assert_valid_record(wheel: Path) -> dict[str, tuple[str, str]]:
    """Every file is listed once with a matching sha256 and size; RECORD lists itself."""
    with zipfile.ZipFile(wheel) as zf:
        names = [i.filename for i in zf.infolist()]
        record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.StringIO(zf.read(record_name).decode())))
        listed = {r[0]: (r[1], r[2]) for r in rows}
        assert len(listed) == len(rows), "a file is listed twice"
        assert set(listed) == set(names)
        assert listed[record_name] == ("", "")
        for name in names:
            if name == record_name:
                continue
            data = zf.read(name)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert listed[name] == (f"sha256={digest.decode()}", str(len(data))), name
        assert names[-1] == record_name, "RECORD must be the last entry"
    return listed


@pytest.fixture
def raw_wheel(tmp_path: Path) -> Path:
    return make_wheel(
        tmp_path / "in",
        name="ext_ok",
        version="0.1.0",
        files={
            "ext_ok/__init__.py": b"from ._C import *\n",
            "ext_ok/_C.cpython-311-x86_64-linux-gnu.so": make_so(needed=["libc10.so"]),
            "ext_ok-0.1.0.data/scripts/ext-ok-tool": b"#!python\n",
        },
        requires=[
            "numpy>=1.20",
            "torch>=2.0",
            'torch[opt-einsum]; extra == "full"',
            "Torch ; python_version >= '3.9'",
        ],
        dist_info_files={"RECORD.jws": b"signature", "top_level.txt": b"ext_ok\n"},
    )


def test_relabel_roundtrip(raw_wheel: Path, tmp_path: Path) -> None:
    before = raw_wheel.read_bytes()
    out = relabel_wheel(
        raw_wheel,
        out_dir=tmp_path / "out",
        local_version="pt211cu130",
        requires_dist_torch="torch==2.11.*",
        build_record=RECORD,
    )
    assert raw_wheel.read_bytes() == before, "the input wheel was modified"
    assert out.name == "ext_ok-0.1.0+pt211cu130-cp311-cp311-linux_x86_64.whl"
    listed = assert_valid_record(out)
    dist = "ext_ok-0.1.0+pt211cu130.dist-info"
    assert f"{dist}/METADATA" in listed
    assert f"{dist}/{BUILD_RECORD_NAME}" in listed
    assert "ext_ok-0.1.0+pt211cu130.data/scripts/ext-ok-tool" in listed
    assert not any(n.startswith("ext_ok-0.1.0.dist-info/") for n in listed)
    assert f"{dist}/RECORD.jws" not in listed, "stale signatures must be dropped"
    meta = read_metadata(out)
    assert meta["version"] == ["0.1.0+pt211cu130"]
    assert meta["requires-dist"] == [
        "numpy>=1.20",
        "torch==2.11.*",
        'torch[opt-einsum]; extra == "full"',
    ]
    assert torch_requirements(out) == ["torch==2.11.*"]
    assert read_build_record(out) == BuildRecord.from_json(RECORD)
    assert WheelName.parse(out.name).version == "0.1.0+pt211cu130"


def test_relabel_is_deterministic_and_keeps_timestamps(raw_wheel: Path, tmp_path: Path) -> None:
    kwargs = {
        "local_version": "pt211cu130",
        "requires_dist_torch": "torch==2.11.*",
        "build_record": RECORD,
    }
    a = relabel_wheel(raw_wheel, out_dir=tmp_path / "a", **kwargs)  # type: ignore[arg-type]
    b = relabel_wheel(raw_wheel, out_dir=tmp_path / "b", **kwargs)  # type: ignore[arg-type]
    assert a.read_bytes() == b.read_bytes()
    with zipfile.ZipFile(a) as zf:
        names = zf.namelist()
        assert {i.date_time for i in zf.infolist()} == {(2024, 5, 6, 7, 8, 10)}
    payload = [n for n in names if ".dist-info/" not in n]
    assert payload == sorted(payload)
    assert names.index(payload[-1]) < min(i for i, n in enumerate(names) if ".dist-info/" in n)


def test_relabel_with_source_date_epoch_forgets_when_and_where_it_was_built(
    tmp_path: Path,
) -> None:
    """Two raw wheels of the same files, zipped at other times with other modes: one result."""

    def raw(directory: Path, date: tuple[int, int, int, int, int, int], mode: int) -> Path:
        directory.mkdir()
        path = directory / "ext_ok-0.1.0-cp311-cp311-linux_x86_64.whl"
        files = {
            "ext_ok/__init__.py": b"",
            "ext_ok/tool.sh": b"#!/bin/sh\n",
            "ext_ok-0.1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: ext_ok\n"
            b"Version: 0.1.0\n",
            "ext_ok-0.1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nTag: cp311-cp311-linux_x86_64\n",
            "ext_ok-0.1.0.dist-info/RECORD": b"",
        }
        with zipfile.ZipFile(path, "w") as zf:
            for name in reversed(sorted(files)):  # another order too
                info = zipfile.ZipInfo(name, date_time=date)
                info.external_attr = (0o100775 if name.endswith(".sh") else mode) << 16
                zf.writestr(info, files[name])
        return path

    kwargs = {
        "local_version": "pt213cpu",
        "requires_dist_torch": "torch==2.13.*",
        "build_record": RECORD,
        "source_date_epoch": 1_700_000_000,
    }
    a = relabel_wheel(
        raw(tmp_path / "a", (2026, 1, 1, 1, 1, 2), 0o100664),
        out_dir=tmp_path / "out-a",
        **kwargs,  # type: ignore[arg-type]
    )
    b = relabel_wheel(
        raw(tmp_path / "b", (2026, 11, 23, 13, 0, 0), 0o100600),
        out_dir=tmp_path / "out-b",
        **kwargs,  # type: ignore[arg-type]
    )
    assert a.read_bytes() == b.read_bytes()
    with zipfile.ZipFile(a) as zf:
        assert {i.date_time for i in zf.infolist()} == {(2023, 11, 14, 22, 13, 20)}
        modes = {i.filename: i.external_attr >> 16 for i in zf.infolist()}
    assert modes["ext_ok/tool.sh"] == 0o100755 and modes["ext_ok/__init__.py"] == 0o100644


def test_reproducible_build_environment(tmp_path: Path) -> None:
    from buildtools.wheelbuild.environment import reproducible_env, source_date_epoch

    site = tmp_path / "env" / "site-packages"
    env = reproducible_env({"CFLAGS": "-O2"}, project_dir=tmp_path, site_packages=site)
    assert env["SOURCE_DATE_EPOCH"] == "315532800"
    # the project's absolute path, the relative one ccache's base_dir makes of it from the
    # object directory (build/torch-buildtools/<tree>), torch's headers
    maps = [f"{tmp_path}=.", "../../..=.", f"{site}=/site-packages"]
    flags = " ".join(f"-ffile-prefix-map={m} -fdebug-prefix-map={m}" for m in maps)
    assert env["CFLAGS"] == f"-O2 {flags}"
    assert env["CXXFLAGS"] == flags
    assert "NVCC_APPEND_FLAGS" not in env
    cuda = reproducible_env(
        {"NVCC_APPEND_FLAGS": "--threads 2"}, project_dir=tmp_path, device=True, cuda_version="13.0"
    )
    assert cuda["NVCC_APPEND_FLAGS"] == (
        f"--threads 2 -Xcompiler -ffile-prefix-map={tmp_path}=. -Xcompiler -ffile-prefix-map=../../..=."
        " -frandom-seed=torch-buildtools"  # nvcc's module ids without cudafe++'s pid
    )
    cuda12 = reproducible_env({}, project_dir=tmp_path, device=True, cuda_version="12.6")
    assert "frandom-seed" not in cuda12["NVCC_APPEND_FLAGS"]  # nvcc 12 has no such option
    seeded = {"NVCC_APPEND_FLAGS": "--frandom-seed mine"}  # the project's own seed wins
    assert (
        "torch-buildtools"
        not in reproducible_env(seeded, project_dir=tmp_path, device=True, cuda_version="13.0")[
            "NVCC_APPEND_FLAGS"
        ]
    )
    # a path nvcc's -Xcompiler or CFLAGS would split is left unmapped, not broken
    spaced = reproducible_env({}, project_dir=tmp_path / "my project")
    assert "my project" not in spaced["CFLAGS"] and "../../..=." in spaced["CFLAGS"]
    assert source_date_epoch({"SOURCE_DATE_EPOCH": "1700000000"}) == 1_700_000_000
    assert source_date_epoch({"SOURCE_DATE_EPOCH": "yesterday"}) == 315532800


def test_relabel_replaces_existing_local_label_and_adds_missing_pin(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, version="1.2.0+cu126", files={"m.py": b""})
    out = relabel_wheel(
        wheel,
        out_dir=tmp_path / "out",
        local_version="pt211cu130",
        requires_dist_torch="torch ==2.11.*",
        build_record=RECORD,
    )
    assert out.name.startswith("ext_ok-1.2.0+pt211cu130-")
    assert read_metadata(out)["requires-dist"] == ["torch==2.11.*"]
    assert_valid_record(out)


def test_relabel_with_platform_tag(raw_wheel: Path, tmp_path: Path) -> None:
    out = relabel_wheel(
        raw_wheel,
        out_dir=tmp_path / "out",
        local_version="pt211cpu",
        requires_dist_torch="torch==2.11.*",
        build_record=RECORD,
        platform_tag="manylinux_2_27_x86_64.manylinux_2_28_x86_64",
    )
    assert out.name.endswith("-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl")
    with zipfile.ZipFile(out) as zf:
        wheel_txt = zf.read("ext_ok-0.1.0+pt211cpu.dist-info/WHEEL").decode()
    tags = [line.split(": ", 1)[1] for line in wheel_txt.splitlines() if line.startswith("Tag:")]
    assert tags == ["cp311-cp311-manylinux_2_27_x86_64", "cp311-cp311-manylinux_2_28_x86_64"]
    assert "Root-Is-Purelib: false" in wheel_txt
    assert_valid_record(out)


def test_retag_only_changes_the_platform(raw_wheel: Path, tmp_path: Path) -> None:
    out = retag_wheel(raw_wheel, out_dir=tmp_path / "out", platform_tag="manylinux_2_28_x86_64")
    assert out.name == "ext_ok-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert read_metadata(out)["version"] == ["0.1.0"]
    assert read_build_record(out) is None
    assert_valid_record(out)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"local_version": "pt 211"}, "not a valid local version label"),
        ({"local_version": "+pt211"}, "not a valid local version label"),
        ({"requires_dist_torch": "numpy==1.*"}, "must be a requirement on torch"),
        ({"requires_dist_torch": "torch=2.11"}, "is not a requirement"),
        ({"build_record": {"when": object()}}, "not JSON-serializable"),
    ],
)
def test_relabel_rejects_bad_input(
    raw_wheel: Path, tmp_path: Path, kwargs: dict[str, object], match: str
) -> None:
    args: dict[str, object] = {
        "local_version": "pt211cu130",
        "requires_dist_torch": "torch==2.11.*",
        "build_record": RECORD,
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        relabel_wheel(raw_wheel, out_dir=tmp_path / "out", **args)  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_never_overwrites_the_input(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, version="0.1.0+pt211cu130", files={"m.py": b""})
    with pytest.raises(ValueError, match="would replace its input"):
        relabel_wheel(
            wheel,
            out_dir=tmp_path,
            local_version="pt211cu130",
            requires_dist_torch="torch==2.11.*",
            build_record=RECORD,
        )


def test_read_build_record_missing_and_invalid(tmp_path: Path) -> None:
    assert read_build_record(make_wheel(tmp_path / "a", files={"m.py": b""})) is None
    bad = make_wheel(tmp_path / "b", files={"m.py": b""}, dist_info_files={BUILD_RECORD_NAME: b"{"})
    with pytest.raises(ValueError, match="not valid JSON"):
        read_build_record(bad)
    arr = make_wheel(
        tmp_path / "c", files={"m.py": b""}, dist_info_files={BUILD_RECORD_NAME: b"[]"}
    )
    with pytest.raises(ValueError, match="not a JSON object"):
        read_build_record(arr)


def test_build_record_schema() -> None:
    record = built_record(make_job(torch="2.11.0", accelerator="cu130"))
    assert build_record_problems(record) == []
    assert json.loads(json.dumps(record)) == record
    problems = build_record_problems({"schema": 2, "torch": 211, "cxx11_abi": "yes"})
    assert "accelerator: missing" in problems
    assert "torch: expected str, got int" in problems
    assert "cxx11_abi: expected bool, got str" in problems
    assert "schema: 2 is not supported (this buildtools reads 1)" in problems


def test_with_local_version() -> None:
    assert with_local_version("1.2.0", "pt211cu130") == "1.2.0+pt211cu130"
    assert with_local_version("1.2.0+old.label", "PT211") == "1.2.0+pt211"
    assert with_local_version("1.2.0.post1", "pt211.cu130") == "1.2.0.post1+pt211.cu130"


def test_wheel_name_parse() -> None:
    name = WheelName.parse("pkg-1.0-1b-cp311-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
    assert name.build == "1b"
    assert name.platforms == ("manylinux_2_17_x86_64", "manylinux2014_x86_64")
    assert name.filename == "pkg-1.0-1b-cp311-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    with pytest.raises(ValueError, match="not a wheel file name"):
        WheelName.parse("pkg-1.0.tar.gz")


@pytest.mark.parametrize(
    ("actual", "promised", "ok"),
    [
        ("manylinux_2_28_x86_64", "manylinux_2_28_x86_64", True),
        ("manylinux_2_17_x86_64.manylinux2014_x86_64", "manylinux_2_28_x86_64", True),
        ("manylinux2014_x86_64", "manylinux_2_28_x86_64", True),
        ("manylinux_2_34_x86_64", "manylinux_2_28_x86_64", False),
        ("linux_x86_64", "manylinux_2_28_x86_64", False),
        ("manylinux_2_28_aarch64", "manylinux_2_28_x86_64", False),
        ("musllinux_1_2_x86_64", "manylinux_2_28_x86_64", False),
        ("manylinux_2_34_x86_64", "linux_x86_64", True),
    ],
)
def test_platform_tag_satisfies(actual: str, promised: str, ok: bool) -> None:
    assert platform_tag_satisfies(actual, promised) is ok


def test_platform_tag_parse() -> None:
    assert PlatformTag.parse("manylinux1_x86_64").libc == (2, 5)
    assert PlatformTag.parse("musllinux_1_2_aarch64") == PlatformTag(
        family="musllinux", libc=(1, 2), arch="aarch64"
    )
    with pytest.raises(ValueError, match="not a Linux platform tag"):
        PlatformTag.parse("win_amd64")


_member = st.text(alphabet="abcdefghij_", min_size=1, max_size=8)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    files=st.dictionaries(
        st.tuples(_member, _member).map(lambda t: f"pkg_{t[0]}/{t[1]}.py"),
        st.binary(max_size=200),
        max_size=6,
    ),
    local=st.from_regex(r"\A[a-z0-9]{1,6}(\.[a-z0-9]{1,4})?\Z"),
)
def test_relabel_record_always_valid(
    tmp_path_factory: pytest.TempPathFactory, files: dict[str, bytes], local: str
) -> None:
    tmp = tmp_path_factory.mktemp("prop")
    wheel = make_wheel(tmp / "in", files=files, requires=["torch"])
    out = relabel_wheel(
        wheel,
        out_dir=tmp / "out",
        local_version=local,
        requires_dist_torch="torch==2.13.*",
        build_record=RECORD,
    )
    listed = assert_valid_record(out)
    assert set(files) <= set(listed)
    # numeric local segments are normalized ("00" → "0"), as PEP 440 says
    assert read_metadata(out)["version"] == [str(Version(f"0.1.0+{local}"))]
