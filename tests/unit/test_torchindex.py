"""The knowledge base checked against recorded answers of the package index (no network)."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import zipfile
from pathlib import Path

import pytest
from fixtures.fakehttp import INDEX, FakeHttp
from packaging.tags import Tag
from packaging.version import Version

from buildtools.errors import KnowledgeError, NetworkError
from buildtools.knowledge import DATA_DIR, load_knowledge
from buildtools.torchindex import IndexReader, check_index, served_releases
from buildtools.torchindex.remote import TAIL, read_metadata
from buildtools.torchindex.served import cuda_from_metadata, describe_release
from buildtools.torchindex.simple import SIMPLE_JSON, IndexFile, parse_simple_json

KB = load_knowledge()


def reader(http: FakeHttp, cache: Path | None = None, **kw: object) -> IndexReader:
    return IndexReader(http, index_url=INDEX, cache_dir=cache, **kw)  # type: ignore[arg-type]


def test_recorded_index_checks_clean_and_names_the_release_it_does_not_serve() -> None:
    http = FakeHttp.from_recording()
    report, answer = check_index(KB, reader(http), since="2.14")
    assert [v for v, _ in report.checked] == ["2.14.1", "2.15.0"]
    summary = dict(report.checked)["2.15.0"]
    assert "3.11, 3.12, 3.13, 3.14, 3.15 + 3.14t + 3.15t" in summary
    assert "CUDA 13.2 (cuda-toolkit 13.2.2)" in summary
    # the recording leaves 2.14.0 out on purpose: the data lists it, so that is the one finding
    assert [str(d.version) for d in report.differences] == ["2.14.0"]
    diff = report.differences[0]
    assert "torch.yaml:" in diff.where and "releases[14] (minor 2.14): patches" in diff.where
    assert "the index serves no wheel of it" in diff.message
    assert answer.page.url == f"{INDEX}/torch/"


def test_never_a_whole_wheel_only_ranges_of_it() -> None:
    http = FakeHttp.from_recording()
    served_releases(reader(http), since="2.14")
    wheel_requests = [r for r in http.requests if r.url.endswith(".whl")]
    assert wheel_requests and all(r.byte_range is not None for r in wheel_requests)
    per_wheel: dict[str, int] = {}
    for r in wheel_requests:
        per_wheel[r.url] = per_wheel.get(r.url, 0) + r.bytes_read
    # two Linux platforms × two releases; each read costs the tail and one member
    assert len(per_wheel) == 4
    assert max(per_wheel.values()) < TAIL + 64 << 10


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (('pypi_cuda_toolkit: "13.2.2"', 'pypi_cuda_toolkit: "13.2.1"'), "pypi_cuda_toolkit"),
        (('free_threaded: ["3.14", "3.15"]', 'free_threaded: ["3.14"]'), "free_threaded"),
        (
            ('python: ["3.11", "3.12", "3.13", "3.14", "3.15"]', 'python: ["3.11", "3.12"]'),
            "python",
        ),
    ],
)
def test_a_changed_fact_in_a_copy_of_the_data_fails_with_file_and_key(
    tmp_path: Path, edit: tuple[str, str], key: str
) -> None:
    data = tmp_path / "data"
    shutil.copytree(DATA_DIR, data)
    torch_yaml = data / "torch.yaml"
    text = torch_yaml.read_text()
    row = text.index('  - minor: "2.15"')
    assert edit[0] in text[row:]
    torch_yaml.write_text(text[:row] + text[row:].replace(edit[0], edit[1], 1))
    report, _ = check_index(load_knowledge(data), reader(FakeHttp.from_recording()), since="2.15")
    assert not report.ok
    wheres = {d.where for d in report.differences}
    line = text[:row].count("\n") + 1
    assert any(
        w.startswith(f"{torch_yaml}:") and w.endswith(f"releases[15] (minor 2.15): {key}")
        for w in wheres
    ), wheres
    assert all(int(w.split(":")[1]) > line for w in wheres)


def test_a_release_the_data_lacks_is_a_difference_with_the_remedy(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(DATA_DIR, data)
    text = (data / "torch.yaml").read_text()
    (data / "torch.yaml").write_text(text[: text.index('  - minor: "2.15"')])
    report, _ = check_index(load_knowledge(data), reader(FakeHttp.from_recording()), since="2.15")
    [diff] = report.differences
    assert diff.version == "2.15.0"
    assert "no row for torch 2.15" in diff.message
    assert "ci/propose-torch-release.py 2.15.0" in diff.message
    assert diff.where.endswith(": releases")


def test_propose_fills_what_the_index_says_and_marks_the_rest_unconfirmed(tmp_path: Path) -> None:
    from buildtools.torchindex.propose import propose_row

    data = tmp_path / "data"
    shutil.copytree(DATA_DIR, data)
    text = (data / "torch.yaml").read_text()
    (data / "torch.yaml").write_text(text[: text.index('  - minor: "2.15"')])
    kb = load_knowledge(data)
    releases, _ = served_releases(reader(FakeHttp.from_recording()), since="2.15")
    row_text = propose_row(kb, next(r for r in releases if r.version == "2.15.0"))
    (data / "torch.yaml").write_text(text[: text.index('  - minor: "2.15"')] + row_text)
    row = load_knowledge(data).torch["2.15"]
    shipped = KB.torch["2.15"]
    for field in ("python", "free_threaded", "pypi_cuda", "pypi_cuda_toolkit", "platform_tag"):
        assert getattr(row, field) == getattr(shipped, field), field
    assert row.aarch64.pypi_cuda == "13.2"
    assert not row.confirmed and not row.aarch64.confirmed
    assert "cuda_archs" in (row.note or "") and "Copied from torch 2.14" in (row.note or "")
    with pytest.raises(KnowledgeError, match="has a row already"):
        propose_row(KB, releases[-1])


def test_cache_answers_within_max_age_and_a_stale_page_only_when_allowed(tmp_path: Path) -> None:
    now = [1000.0]
    http = FakeHttp.from_recording()
    first = reader(http, tmp_path, max_age=60, clock=lambda: now[0])
    served_releases(first, since="2.15")
    asked = len(http.requests)
    assert asked == 5  # the page, then a tail and a member per Linux platform
    second = reader(http, tmp_path, max_age=60, clock=lambda: now[0] + 30)
    served_releases(second, since="2.15")
    assert len(http.requests) == asked and second.requests == 0
    now[0] += 120  # the page is too old now; METADATA stays cached (it never changes)
    http.down = True
    third = reader(http, tmp_path, max_age=60, clock=lambda: now[0])
    with pytest.raises(NetworkError, match="unreachable"):
        third.page("torch")
    stale = third.page("torch", stale_ok=True)
    assert stale.stale and stale.fetched == 1000.0


def test_a_damaged_cache_entry_is_asked_again(tmp_path: Path) -> None:
    http = FakeHttp.from_recording()
    reader(http, tmp_path).page("torch")
    [cached] = (tmp_path / "package-index" / "pages").iterdir()
    cached.write_text("{not json")
    answer = reader(http, tmp_path).page("torch")
    assert not answer.from_cache


def _files(names: list[str]) -> list[IndexFile]:
    page = {
        "meta": {"api-version": "1.1"},
        "name": "torch",
        "files": [
            {"filename": n, "url": f"https://files.example/{n}", "hashes": {"sha256": "0" * 64}}
            for n in names
        ],
    }
    return list(parse_simple_json(json.dumps(page).encode(), url="u", project="torch").files)


def test_free_threaded_tags_are_their_own_and_counted_per_patch() -> None:
    names = [
        f"torch-{v}-cp313-cp313{t}-manylinux_2_28_{arch}.whl"
        for v in ("2.12.0", "2.12.1")
        for t in ("", "t")
        for arch in ("x86_64", "aarch64")
        if not (v == "2.12.1" and t)
    ] + ["torch-2.12.0-cp313-none-macosx_11_0_arm64.whl"]
    files = _files(names)
    for version, ft in (("2.12.0", ("3.13",)), ("2.12.1", ())):
        mine = [f for f in files if str(f.version) == version]
        release = describe_release(Version(version), mine, metadata=None)
        x86 = release.platforms["linux_x86_64"]
        assert x86.pythons == ("3.13",) and x86.free_threaded == ft
        assert x86.metadata_of is None
    assert describe_release(Version("2.12.0"), files[:4], metadata=None).other_platforms == ()
    assert KB.torch["2.12"].free_threaded_of("2.12.1") == ("3.14",)
    assert KB.torch["2.12"].free_threaded_of("2.12.0") == ("3.13", "3.14")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"filename": "../torch-2.0.0-cp310-cp310-linux_x86_64.whl"}, "is not a file name"),
        ({"filename": "torch-2.0.0-cp310-cp310-linux_x86_64.whl", "url": "javascript:x"}, "url"),
        (
            {
                "filename": "torch-2.0.0-cp310-cp310-linux_x86_64.whl",
                "url": "https://x/t.whl",
                "hashes": {"sha256": "zz"},
            },
            "hashes.sha256",
        ),
        (
            {
                "filename": "numpy-2.0.0-cp310-cp310-linux_x86_64.whl",
                "url": "https://x/t.whl",
                "hashes": {"sha256": "0" * 64},
            },
            "is not a torch wheel",
        ),
    ],
)
def test_a_hostile_page_is_refused_naming_the_entry(entry: dict[str, object], message: str) -> None:
    page = {"meta": {"api-version": "1.0"}, "name": "torch", "files": [entry]}
    with pytest.raises(NetworkError, match=r"files\[0\]: .*" + message):
        parse_simple_json(json.dumps(page).encode(), url="u", project="torch")
    with pytest.raises(NetworkError, match="api-version"):
        parse_simple_json(b'{"meta": {"api-version": "2.0"}, "files": []}', url="u", project="t")


def _wheel(extra_after: int = 0) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("demo/__init__.py", "x = 1\n")
        zf.writestr(
            "demo-1.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n"
            "Requires-Dist: nvidia-cuda-runtime-cu12==12.8.90; platform_machine == 'x86_64'\n",
        )
        for i in range(extra_after):  # entries after METADATA push it out of the tail
            zf.writestr(f"demo-1.0.dist-info/licenses/{i:05d}-{'x' * 200}.txt", "")
    return buf.getvalue()


def _index_file(url: str, data: bytes, *, core_metadata: str | None = None) -> IndexFile:
    return IndexFile(
        filename=url.rsplit("/", 1)[1],
        url=url,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        version=Version("1.0"),
        build=(),
        tags=frozenset({Tag("py3", "none", "any")}),
        core_metadata=core_metadata is not None,
        core_metadata_sha256=core_metadata,
    )


@pytest.mark.parametrize("extra", [0, 600])
def test_metadata_by_ranges_from_the_tail_or_the_central_directory(extra: int) -> None:
    http = FakeHttp()
    data = _wheel(extra)
    url = "https://files.example/demo-1.0-py3-none-any.whl"
    http.add_file(url, data)
    text = read_metadata(_index_file(url, data), http)
    assert "Version: 1.0" in text
    assert cuda_from_metadata(text, machine="x86_64", python="3.12") == ("12.8", None)
    assert cuda_from_metadata(text, machine="aarch64", python="3.12") == (None, None)
    # the tail, (the central directory when METADATA's entry is not in the tail), the member
    assert len(http.requests) == (2 if extra == 0 else 3)
    assert all(r.byte_range is not None for r in http.requests)


def test_a_corrupt_member_is_refused_not_returned() -> None:
    http = FakeHttp()
    data = bytearray(_wheel())
    at = data.find(b"demo-1.0.dist-info/METADATA") + len("demo-1.0.dist-info/METADATA")
    data[at + 4] ^= 0xFF  # inside the deflated METADATA (after its local header)
    url = "https://files.example/demo-1.0-py3-none-any.whl"
    http.add_file(url, bytes(data))
    with pytest.raises(NetworkError, match="not a readable wheel"):
        read_metadata(_index_file(url, bytes(data)), http)


def test_pep658_metadata_is_used_where_offered_and_its_hash_checked() -> None:
    http = FakeHttp()
    body = b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n"
    url = "https://files.example/demo-1.0-py3-none-any.whl"
    http.add(url + ".metadata", body)
    good = _index_file(url, b"", core_metadata=hashlib.sha256(body).hexdigest())
    assert read_metadata(good, http).startswith("Metadata-Version")
    assert [r.url for r in http.requests] == [url + ".metadata"]
    bad = _index_file(url, b"", core_metadata="0" * 64)
    with pytest.raises(NetworkError, match="sha256 does not match"):
        read_metadata(bad, http)


def test_the_page_is_asked_for_as_pep_691_json() -> None:
    http = FakeHttp.from_recording()
    reader(http).page("torch")
    assert http.requests[0].accept == SIMPLE_JSON


def test_the_command_prints_every_release_and_exits_5_on_a_difference(tmp_path: Path) -> None:
    from buildtools.cli.knowledge import check_and_report

    out = io.StringIO()
    rc = check_and_report(KB, reader(FakeHttp.from_recording()), out, since="2.15")
    assert rc == 0 and "  2.15.0: linux_aarch64: " in out.getvalue()
    assert "1 release(s) checked: the data matches the index" in out.getvalue()
    out = io.StringIO()
    rc = check_and_report(KB, reader(FakeHttp.from_recording()), out, since="2.14")
    assert rc == 5
    assert (
        "1 difference(s):" in out.getvalue() and "patches: the data lists 2.14.0" in out.getvalue()
    )
