"""Hostile artefacts: names that come from wheels and published manifests never write or read
outside their place (`buildtools.files.safe_join`), whatever they hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.crafted import make_wheel
from hypothesis import given, settings
from hypothesis import strategies as st

from buildtools.cisteps.restore import restore_site
from buildtools.errors import ExitCode, UnsafeArtefactError
from buildtools.files import check_wheel_filename, safe_join
from buildtools.index.publish import publish
from buildtools.index.settings import IndexSettings
from buildtools.index.wheels import read_wheel
from buildtools.knowledge import load_knowledge

KB = load_knowledge()
BASE = "https://acme.github.io/proj/whl"


class DirFetcher:
    """Serves a directory at a URL, and also answers for names outside it (as a hostile site
    would: whatever path the client asks for, it gets bytes)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def fetch(self, url: str, dest: Path, *, max_bytes: int) -> bool:
        from urllib.parse import unquote

        name = unquote(url.removeprefix(BASE + "/"))
        path = self.root / name
        dest.write_bytes(path.read_bytes() if path.is_file() else b"planted")
        return True


def _published_site(tmp_path: Path) -> Path:
    served = tmp_path / "served"
    record = json.dumps(
        {"schema": 1, "torch": "2.13.0+cpu", "accelerator": "cpu", "cxx11_abi": True}
    ).encode()
    wheel = make_wheel(
        tmp_path / "w",
        name="bt_scatter",
        version="0.1.0+pt213cpu",
        tag="cp312-cp312-manylinux_2_28_x86_64",
        files={"bt_scatter/__init__.py": b""},
        requires=["torch==2.13.*"],
        dist_info_files={"buildtools.json": record},
    )
    publish(served, [read_wheel(wheel)], IndexSettings(base_url=BASE), KB)
    return served


@pytest.mark.parametrize(
    "filename",
    [
        "../../escaped-1.0-py3-none-any.whl",
        "/tmp/escaped-1.0-py3-none-any.whl",
        "sub/dir-1.0-py3-none-any.whl",
        "not-a-wheel.txt",
    ],
    ids=["traversal", "absolute", "subdirectory", "not-a-wheel"],
)
def test_manifest_traversal_is_refused(tmp_path: Path, filename: str) -> None:
    served = _published_site(tmp_path)
    manifest = json.loads((served / "index.json").read_text())
    manifest["wheels"][0]["filename"] = filename
    (served / "index.json").write_text(json.dumps(manifest))
    site = tmp_path / "out" / "pages" / "whl"
    with pytest.raises(UnsafeArtefactError, match=r"index\.json entry") as info:
        restore_site(BASE, site, fetcher=DirFetcher(served))
    assert info.value.exit_code is ExitCode.UNSAFE_ARTEFACT
    planted = [p for p in tmp_path.rglob("escaped*")]
    assert planted == []


@pytest.mark.parametrize(
    "member",
    ["../x.so", "a/../../x.so", "/abs/x.so", "C:x.so", "a\\..\\x.so", "a\x00b.so", "", "."],
)
def test_safe_join_refuses(tmp_path: Path, member: str) -> None:
    with pytest.raises(UnsafeArtefactError):
        safe_join(tmp_path, member)


def test_safe_join_refuses_symlink_escape(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(tmp_path)
    with pytest.raises(UnsafeArtefactError, match="symbolic link"):
        safe_join(root, "link/x.so")


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["..", ".", "a", "/", "\\", "b.so", "C:", "\x00", "~"]), max_size=8)
)
def test_random_member_names_never_leave_the_root(parts: list[str]) -> None:
    root = Path("/srv/extract/root")
    member = "".join(parts)
    try:
        target = safe_join(root, member)
    except UnsafeArtefactError:
        return
    assert target.resolve().is_relative_to(root)


@pytest.mark.parametrize("name", ["x.whl", "../a-1-py3-none-any.whl", "a-1-py3-none-any.zip"])
def test_wheel_file_names_follow_the_grammar(name: str) -> None:
    with pytest.raises(UnsafeArtefactError, match="is not a wheel file name"):
        check_wheel_filename(name)


@pytest.mark.parametrize(
    "member", ["../../escaped.so", "/tmp/escaped.so"], ids=["zip-slip", "absolute"]
)
def test_check_refuses_zip_slip_member(tmp_path: Path, member: str) -> None:
    from fixtures.crafted import make_site_packages, make_so

    from buildtools.wheel.checks import Expectation, check_wheel, load_torch_target

    wheel = make_wheel(
        tmp_path / "w",
        name="hostile",
        version="1.0",
        tag="cp312-cp312-manylinux_2_28_x86_64",
        files={"hostile/__init__.py": b"", member: make_so(soname="x.so")},
    )
    target = load_torch_target(make_site_packages(tmp_path / "site"))
    with pytest.raises(UnsafeArtefactError, match="member"):
        check_wheel(wheel, targets=[target], expect=Expectation(accelerator="cpu"))
    assert not list(tmp_path.rglob("escaped.so"))
    assert not Path("/tmp/escaped.so").exists()
