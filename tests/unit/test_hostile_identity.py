"""Immutability by identity, not spelling (`index.manifest.wheel_identity`, `index.merge`): a
wheel pip cannot tell from a published one (PEP 503 name, canonical version, tags) is a
conflict whatever its file name says, and a site (published, or restored from a server)
that lists one identity twice is refused.

The generator respells a project name and version as pip would still match them: letter
case, `_` and `.` for each other (a file name has no other separator), `1.0` as `1.0.0`, the local label in capitals.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.crafted import make_wheel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from buildtools.errors import ImmutableWheelError, PublishError
from buildtools.index.manifest import MANIFEST_NAME, read_manifest, wheel_identity
from buildtools.index.publish import publish
from buildtools.index.settings import IndexSettings
from buildtools.index.wheels import read_wheel
from buildtools.knowledge import load_knowledge

KB = load_knowledge()
TAG = "cp312-cp312-manylinux_2_28_x86_64"
RECORD = json.dumps({"schema": 1, "torch": "2.13.0+cpu", "accelerator": "cpu", "cxx11_abi": True})

words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=6)


@st.composite
def respelled(draw: st.DrawFn) -> tuple[str, str, str, str]:
    """(name, version, another spelling of the name, another spelling of the version)."""
    parts = draw(st.lists(words, min_size=1, max_size=3))
    name = "_".join(parts)
    seps = [draw(st.sampled_from(["_", "."])) for _ in parts[1:]]  # a file name's separators
    other = parts[0] + "".join(s + p for s, p in zip(seps, parts[1:], strict=True))
    other = "".join(c.upper() if draw(st.booleans()) else c for c in other)
    major = draw(st.integers(0, 30))
    version = f"{major}.0+pt213cpu"
    again = draw(
        st.sampled_from([f"{major}.0.0+pt213cpu", f"{major}+pt213cpu", f"{major}.0+PT213cpu"])
    )
    return name, version, other, again


def _wheel(directory: Path, name: str, version: str, payload: bytes) -> Path:
    return make_wheel(
        directory,
        name=name,
        version=version,
        tag=TAG,
        files={f"{name.lower()}/data.bin": payload},
        requires=["torch==2.13.*"],
        dist_info_files={"buildtools.json": RECORD.encode()},
    )


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(spelling=respelled())
def test_a_second_spelling_of_a_published_wheel_is_a_conflict(
    tmp_path_factory: pytest.TempPathFactory, spelling: tuple[str, str, str, str]
) -> None:
    name, version, other, again = spelling
    root = tmp_path_factory.mktemp("id")
    first = _wheel(root / "a", name, version, b"one")
    second = _wheel(root / "b", other, again, b"two")
    assert first.name != second.name and wheel_identity(first.name) == wheel_identity(second.name)
    site = root / "site"
    publish(site, [read_wheel(first)], IndexSettings(), KB)
    before = (site / MANIFEST_NAME).read_bytes()
    with pytest.raises(ImmutableWheelError, match="spelled otherwise"):
        publish(site, [read_wheel(second)], IndexSettings(), KB)
    assert (site / MANIFEST_NAME).read_bytes() == before
    with pytest.raises(ImmutableWheelError, match="two inputs are one wheel to pip"):
        publish(root / "new", [read_wheel(first), read_wheel(second)], IndexSettings(), KB)
    # a site that lists both (restored from a server, or written by hand) is refused
    data = json.loads(before)
    twin = {**data["wheels"][0], "filename": second.name, "name": other, "sha256": "c" * 64}
    data["wheels"].append(twin)
    (site / MANIFEST_NAME).write_text(json.dumps(data))
    with pytest.raises(PublishError, match="the same wheel as"):
        read_manifest(site)


def test_other_tags_and_versions_are_other_wheels(tmp_path: Path) -> None:
    wheels = [
        _wheel(tmp_path / "a", "bt_scatter", "0.1.0+pt213cpu", b"a"),
        _wheel(tmp_path / "b", "bt_scatter", "0.1.1+pt213cpu", b"b"),
        _wheel(tmp_path / "c", "bt_scatter", "0.1.0+pt213cu130", b"c"),
    ]
    result = publish(tmp_path / "site", [read_wheel(w) for w in wheels], IndexSettings(), KB)
    assert len(result.added) == 3


@settings(max_examples=500, deadline=None)
@given(
    version=st.from_regex(r"\A[0-9]{1,3}(\.[0-9]{1,3}){0,3}(\+[a-z0-9]{1,6}(\.[a-z0-9]{1,4})?)?\Z")
    | st.sampled_from(["1.0.post1", "1.0rc1", "2!1.0", "1.0+PT213cpu", "01.02", "1.0-1", "1_0"])
)
def test_the_version_a_wheel_is_known_by_is_packagings(version: str) -> None:
    """The fast canonical form equals packaging's, for the versions tools write and others."""
    from packaging.utils import canonicalize_version
    from packaging.version import InvalidVersion, Version

    from buildtools.index.manifest import _canonical_version

    try:
        Version(version.replace("_", "-"))
    except InvalidVersion:
        return
    assert _canonical_version(version) == canonicalize_version(version.replace("_", "-"))
