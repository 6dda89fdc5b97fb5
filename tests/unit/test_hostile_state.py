"""Foreign-owned state, links where state belongs, and processes that are not ours (issue 44,
classes 3, 6 and 7): `dist`'s state directory is this user's own or refused, its lock and
`cluster.json` are never followed, its recorded URL and token are checked as the command
line's are (and never printed with a password), and `dist down` kills only a process whose
start time and executable are the ones recorded. A site's `index.json` is read without
following a link out of the site (`plan --missing`, `index`)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
from pathlib import Path

import pytest
from fixtures.fakehttp import FakeHttp
from packaging.tags import Tag
from packaging.version import Version

from buildtools.cli.main import main
from buildtools.distcompile.cluster import (
    STATE_FILE,
    STATE_SCHEMA,
    ClusterProcess,
    ClusterState,
    _identity,
    _is_ours,
    _stop,
    read_state,
)
from buildtools.errors import ConfigError, ExitCode, UnsafeArtefactError
from buildtools.files import private_dir, read_private
from buildtools.index.manifest import read_manifest
from buildtools.locks import file_lock
from buildtools.smoke.wheelsources import parse_find_links
from buildtools.torchindex import IndexReader
from buildtools.torchindex.simple import IndexFile

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="making a file another user's needs root")


def _state(directory: Path, **changes: object) -> None:
    record: dict[str, object] = {
        "schema": STATE_SCHEMA,
        "scheduler_url": "http://127.0.0.1:10600",
        "client_token": "t0k3n",
        "processes": [],
        **changes,
    }
    (directory / STATE_FILE).write_text(json.dumps(record))
    (directory / STATE_FILE).chmod(0o600)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv, out=io.StringIO())
    return code, capsys.readouterr().err


@ROOT_ONLY
@pytest.mark.parametrize("verb", ["down", "status", "up"])
def test_another_users_state_directory_is_refused_before_its_lock_is_touched(
    tmp_path: Path, verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    target = tmp_path / "elsewhere" / "created-by-the-lock"
    (state / ".lock").symlink_to(target)
    os.chown(state, 1000, 1000)
    code, err = _run(["dist", verb, "--state-dir", str(state)], capsys)
    assert code == ExitCode.UNSAFE_ARTEFACT, err
    assert "of user 1000, not of this user (0)" in err and len(err.strip().splitlines()) == 1
    assert not target.exists() and not target.parent.exists()
    assert sorted(p.name for p in state.iterdir()) == [".lock"]  # no config written there


def test_a_lock_that_is_a_link_is_refused_never_followed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    target = tmp_path / "target"
    (state / ".lock").symlink_to(target)
    code, err = _run(["dist", "down", "--state-dir", str(state)], capsys)
    assert code == ExitCode.FILESYSTEM, err
    assert "a symbolic link or FIFO where a lock file belongs (not followed)" in err
    assert not target.exists()
    with pytest.raises(OSError, match="lock file"), file_lock(state / ".lock"):
        pass


def test_a_state_directory_others_may_write_or_a_link_to_one_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UnsafeArtefactError, match="others may write"):
        private_dir(shared)
    own = tmp_path / "own"
    private_dir(own)
    assert own.stat().st_mode & 0o777 == 0o700
    link = tmp_path / "link"
    link.symlink_to(own)
    with pytest.raises(UnsafeArtefactError, match="a symbolic link"):
        private_dir(link)


def test_cluster_json_through_a_link_is_not_read(tmp_path: Path) -> None:
    state = private_dir(tmp_path / "state")
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    (state / STATE_FILE).symlink_to(outside)
    with pytest.raises(UnsafeArtefactError, match="a symbolic link; refusing to follow it"):
        read_state(state)
    with pytest.raises(UnsafeArtefactError):
        read_private(state / STATE_FILE, max_bytes=100)


@pytest.mark.parametrize(
    ("changes", "said", "secret"),
    [
        ({"scheduler_url": "http://user:PASSWORD@127.0.0.1:10600"}, "carries credentials", "PASSWORD"),
        ({"client_token": "t0k3n\r\nX-Injected: 1"}, "visible ASCII characters", "X-Injected"),
        ({"scheduler_url": "http://127.0.0.1:10600/\x1b[2J"}, "control character", "\x1b"),
    ],
)  # fmt: skip
def test_a_recorded_url_or_token_is_checked_and_never_printed_with_its_secret(
    tmp_path: Path,
    changes: dict[str, object],
    said: str,
    secret: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = private_dir(tmp_path / "state")
    _state(state, **changes)
    code, err = _run(["dist", "status", "--state-dir", str(state)], capsys)
    assert code == ExitCode.DIST, err
    assert said in err and secret not in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_build_distribute_with_credentials_names_the_url_without_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, err = _run(["build", "--distribute", "http://user:PASS@127.0.0.1:10600"], capsys)
    assert code == ExitCode.CONFIG, err
    assert "carries credentials" in err and "PASS" not in err and "user:***@" in err


def _me() -> ClusterProcess:
    started, exe = _identity(os.getpid()) or (0, "")
    return ClusterProcess(
        role="server",
        pid=os.getpid(),
        config=Path(sys.argv[0]),  # a string this process's command line holds
        log=Path("/dev/null"),
        addr="127.0.0.1:1",
        started=started,
        exe=exe,
    )


def test_a_process_is_ours_only_with_its_recorded_start_time_and_executable() -> None:
    me = _me()
    assert me.started > 0 and me.exe
    assert _is_ours(me)
    # the command line alone (what `down` used to check) no longer makes it ours
    for other in (
        ClusterProcess(**{**me.__dict__, "started": me.started + 1}),
        ClusterProcess(**{**me.__dict__, "exe": "/usr/bin/sccache-dist"}),
        ClusterProcess(**{**me.__dict__, "started": 0, "exe": ""}),  # a record without them
    ):
        assert not _is_ours(other)
    # so `down` with such a record signals nothing (this test process lives on)
    forged = ClusterProcess(**{**me.__dict__, "started": me.started + 1})
    state = ClusterState(
        state_dir=Path("/nonexistent"), scheduler_url="http://127.0.0.1:1", client_token="t",
        processes=(forged,),
    )  # fmt: skip
    assert _stop(state) == []


def test_a_sites_index_json_linked_out_of_the_site_is_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    secret = tmp_path / "secret.json"
    secret.write_text('{"schema": "torch-buildtools/index/v1", "wheels": [], "leak": "SECRET"}')
    (site / "index.json").symlink_to(secret)
    with pytest.raises(UnsafeArtefactError, match="a symbolic link leads out of"):
        read_manifest(site)


# --------------------------------------------------------------------------- class 9: caches
# keyed by what was verified and by where it came from


def _metadata_wheel(version: str) -> bytes:
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(
            "demo-1.0.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\nSummary: {version}\n",
        )
        zf.writestr("demo-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    return buf.getvalue()


def _file(url: str, data: bytes, *, claimed: str, core: str | None = None) -> IndexFile:
    return IndexFile(
        filename="demo-1.0-py3-none-any.whl", url=url, sha256=claimed, size=len(data),
        version=Version("1.0"), build=(), tags=frozenset({Tag("py3", "none", "any")}),
        core_metadata=core is not None, core_metadata_sha256=core,
    )  # fmt: skip


def test_metadata_read_by_ranges_is_never_shared_between_indexes(tmp_path: Path) -> None:
    claimed = "ab" * 32  # both indexes claim the same wheel hash; nothing verifies it
    answers = {}
    for index, summary in (
        ("https://one.example/simple", "ONE"),
        ("https://two.example/simple", "TWO"),
    ):
        http = FakeHttp()
        url = f"{index.rsplit('/', 1)[0]}/files/demo-1.0-py3-none-any.whl"
        data = _metadata_wheel(summary)
        http.add_file(url, data)
        reader = IndexReader(http, index_url=index, cache_dir=tmp_path)
        answers[summary] = reader.metadata(_file(url, data, claimed=claimed))
        assert reader.requests == 1  # its own answer, not the other index's
    assert "Summary: ONE" in answers["ONE"] and "Summary: TWO" in answers["TWO"]


def test_verified_metadata_is_shared_and_checked_again_when_read(tmp_path: Path) -> None:
    body = b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n"
    digest = hashlib.sha256(body).hexdigest()
    url = "https://one.example/files/demo-1.0-py3-none-any.whl"
    http = FakeHttp()
    http.add(url + ".metadata", body)
    first = IndexReader(http, index_url="https://one.example/simple", cache_dir=tmp_path)
    assert first.metadata(_file(url, b"", claimed="cd" * 32, core=digest)) == body.decode()
    other = IndexReader(FakeHttp(), index_url="https://two.example/simple", cache_dir=tmp_path)
    assert other.metadata(_file(url, b"", claimed="ef" * 32, core=digest)) == body.decode()
    assert other.requests == 0  # the same verified bytes: shared
    cached = next((tmp_path / "package-index" / "metadata").glob(f"{digest}.METADATA"))
    cached.write_text("Metadata-Version: 2.1\nName: evil\n")  # changed on disk
    again = IndexReader(http, index_url="https://one.example/simple", cache_dir=tmp_path)
    assert again.metadata(_file(url, b"", claimed="cd" * 32, core=digest)) == body.decode()
    assert again.requests == 1  # the changed copy was not trusted


@pytest.mark.parametrize(
    "href",
    [
        "file:///etc/secret-1.0-py3-none-any.whl",
        "FILE:///etc/secret-1.0-py3-none-any.whl",
        "ftp://x.example/secret-1.0-py3-none-any.whl",
    ],
)
def test_a_remote_find_links_page_may_not_link_a_local_file(href: str) -> None:
    page = f'<a href="{href}">w</a>'
    with pytest.raises(ConfigError, match="may link only http"):
        parse_find_links(page, "https://site.example/whl/")
    if href.lower().startswith("file:"):  # a local page may
        assert parse_find_links(page, "file:///srv/site/index.html")[0][0].endswith(".whl")


def test_a_linked_wheel_name_that_climbs_out_is_not_downloaded(tmp_path: Path) -> None:
    from buildtools.smoke.wheelsources import _fetch

    with pytest.raises(UnsafeArtefactError, match="not a wheel file name"):
        _fetch("https://site.example/x/..%2F..%2Fescaped-1.0-py3-none-any.whl", tmp_path, None)  # type: ignore[arg-type]
    assert not list(tmp_path.parent.glob("escaped*"))


@pytest.mark.parametrize(
    ("torch", "accelerator", "said"),
    [
        ("99.0.0+cpu", "cpu", "torch 99.0.0 is not in the knowledge base"),
        ("2.13.0+cu999", "cu999", "was not built for cu999"),
        ("2.13.9+cpu", "cpu", "torch 2.13.9 is not a known release"),
        ("2.13.0+rocm9.9", "rocm9.9", "was not built for rocm9.9"),
    ],
)
def test_index_names_no_page_after_a_release_a_record_invents(
    tmp_path: Path, torch: str, accelerator: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from fixtures.crafted import make_wheel

    record = {"schema": 1, "torch": torch, "accelerator": accelerator, "cxx11_abi": True}
    wheel = make_wheel(
        tmp_path / "w",
        name="bt_scatter",
        version="0.2.0+pt99",
        tag="cp312-cp312-manylinux_2_28_x86_64",
        files={"bt_scatter/__init__.py": b""},
        requires=["torch"],
        dist_info_files={"buildtools.json": json.dumps(record).encode()},
    )
    site = tmp_path / "site"
    code, err = _run(["index", str(wheel), "--no-matrix", "--site", str(site)], capsys)
    assert code == ExitCode.PUBLISH, err
    assert said in err and len(err.strip().splitlines()) == 1
    assert not site.exists() or not list(site.rglob("torch-*"))
