"""Crafted wheel archives (`buildtools.wheel.archive`): whatever an archive holds, opening and
reading it ends in the wheel or in one ArchiveError / UnsafeArtefactError, within limits.

The generator is `fixtures.hostile.zip_bytes`: hypothesis draws members whose every header
field may lie (method, flags, mode, CRC, size, offset, name), and byte-level corruptions of
a valid wheel; the corpus (tests/corpus/wheels/) holds the named shapes.
"""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest
from fixtures.hostile import Member, wheel_members, zip_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from buildtools.errors import UnsafeArtefactError
from buildtools.wheel.archive import ArchiveError, ArchiveLimits, open_wheel

TAG = "cp312-cp312-manylinux_2_28_x86_64"
NAME = f"hostile-1.0+pt213cpu-{TAG}.whl"
REPO = Path(__file__).resolve().parents[2]
HYPOTHESIS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

names = st.one_of(
    st.sampled_from(["hostile/_C.so", "hostile/x.py", "hostile-1.0+pt213cpu.dist-info/METADATA"]),
    st.text(min_size=1, max_size=40),
    st.text(alphabet="a/._-\\", min_size=1, max_size=12),
    st.just("a" * 2000),
)
members = st.builds(
    Member,
    name=names,
    data=st.binary(max_size=64) | st.just(b"\0" * (2 << 20)),
    method=st.sampled_from([0, 8, 8, 8, 12, 14, 98]),
    flags=st.sampled_from([0, 0, 0x1, 0x8, 0x20, 0x40, 0x800]),
    mode=st.sampled_from([0o100644, 0o100755, 0, 0o120777, 0o010644, 0o020644, 0o040755]),
    crc=st.none() | st.integers(0, 2**32 - 1),
    file_size=st.none() | st.integers(0, 2**32 - 1),
    offset=st.none() | st.integers(0, 200),
)


def _open_and_read(path: Path, limits: ArchiveLimits | None = None) -> list[str]:
    """Open, verify every member and read each fully; the names, or the one error."""
    kwargs = {"limits": limits} if limits else {}
    with open_wheel(path, **kwargs) as archive:  # type: ignore[arg-type]
        archive.verify()
        for name in archive.names:
            assert len(archive.read(name, max_bytes=archive.info(name).file_size)) == (
                archive.info(name).file_size
            )
        return archive.names


def _clean_outcome(path: Path) -> list[str] | None:
    try:
        return _open_and_read(path)
    except (ArchiveError, UnsafeArtefactError) as exc:
        message = str(exc)
        assert "\n" not in message and message.startswith(path.name), message
        assert len(message) < 600, message
        return None


@HYPOTHESIS
@given(extra=st.lists(members, max_size=4), count=st.none() | st.integers(0, 65_535))
def test_archives_whose_headers_lie_open_or_fail_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, extra: list[Member], count: int | None
) -> None:
    path = tmp_path_factory.mktemp("w") / NAME
    path.write_bytes(zip_bytes(wheel_members(extra=extra), count=count))
    opened = _clean_outcome(path)
    if opened is not None:  # what got through is what pip installs: checked by the reader
        for member in extra:
            if member.name in opened:
                assert not stat.S_ISLNK(member.mode) and member.method in (0, 8)
                assert not member.flags & 0x61
        assert len(opened) == len(set(opened))


@HYPOTHESIS
@given(data=st.data())
def test_corrupted_bytes_of_a_wheel_open_or_fail_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    good = bytearray(zip_bytes(wheel_members(extra=[Member("hostile/_C.so", b"\x7fELF" * 300)])))
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(good) - 1))
        good[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.none() | st.integers(0, len(good)))
    path = tmp_path_factory.mktemp("w") / NAME
    path.write_bytes(bytes(good[:cut] if cut is not None else good))
    _clean_outcome(path)


@pytest.mark.parametrize(
    ("limits", "extra", "fragment"),
    [
        (ArchiveLimits(members=5), [Member(f"hostile/{i}.py") for i in range(5)], "members"),
        (ArchiveLimits(member_bytes=1000), [Member("hostile/a.bin", b"x" * 1001)], "a member"),
        (
            ArchiveLimits(total_bytes=3000),
            [Member(f"hostile/{i}.bin", b"x" * 1000) for i in range(4)],
            "together",
        ),
        (
            ArchiveLimits(ratio=10, ratio_floor=1000),
            [Member("hostile/a.bin", b"\0" * 100_000)],
            "a zip bomb?",
        ),
        (ArchiveLimits(name_bytes=50), [Member("hostile/" + "n" * 60)], "has a name of"),
        (ArchiveLimits(central_directory=300), [Member("hostile/a.py")], "central directory"),
        (
            ArchiveLimits(text_bytes=100),
            [Member("hostile/a.txt", b"x" * 1000)],
            "is 1000 bytes (at most 100 bytes here)",
        ),
    ],
    ids=["members", "member-bytes", "total-bytes", "ratio", "name-bytes", "directory", "text"],
)
def test_each_limit_bounds_what_an_archive_may_cost(
    tmp_path: Path, limits: ArchiveLimits, extra: list[Member], fragment: str
) -> None:
    path = tmp_path / NAME
    path.write_bytes(zip_bytes(wheel_members(extra=extra)))
    _open_and_read(path)  # within the default limits: a wheel
    # every limit but the text one is judged on opening; the text one on reading
    with (
        pytest.raises(ArchiveError, match=re.escape(fragment)),
        open_wheel(path, limits=limits) as archive,
    ):
        archive.read("hostile/a.txt")


def test_a_zip_bomb_is_refused_before_a_byte_is_inflated(tmp_path: Path) -> None:
    """The ratio is judged on the directory: refused with the member never opened."""
    path = tmp_path / NAME
    path.write_bytes(zip_bytes(wheel_members(extra=[Member("hostile/_C.so", b"\0" * (64 << 20))])))
    assert path.stat().st_size < 100_000
    with pytest.raises(ArchiveError, match=r"inflates 1,0[0-9][0-9] times"), open_wheel(path):
        pass


def test_every_verb_opens_wheels_through_the_bounded_reader() -> None:
    """No module but the reader (and the writer of relabelled wheels) opens a zip itself."""
    readers = []
    for module in sorted((REPO / "buildtools").rglob("*.py")):
        text = module.read_text()
        for m in re.finditer(r"zipfile\.ZipFile\(([^)]*)\)", text):
            writes = '"w"' in m[1] or "'w'" in m[1]
            if not writes:
                readers.append(f"{module.relative_to(REPO)}: {m[0]}")
    assert readers == ["buildtools/wheel/archive.py: zipfile.ZipFile(source)"]
