"""The fast paths of reading a site's manifest agree with the slow, reference ones.

A published site's `index.json` is hostile input read by every merge, so its entries are
validated as strictly as packaging validates a wheel name; the fast paths (a strict
regex for the names tools write, one type check per entry, index.json lines written
without json.dumps, anchors with shared escapes) must accept, refuse and produce exactly
what the reference does.
"""

from __future__ import annotations

import json
import re
from html import escape
from typing import Any
from urllib.parse import quote

from hypothesis import example, given, settings
from hypothesis import strategies as st
from packaging.tags import Tag
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from buildtools import files
from buildtools.errors import UnsafeArtefactError
from buildtools.index import manifest
from buildtools.index.manifest import IndexedWheel, Manifest
from buildtools.index.pages import LinkTarget, anchor

# pieces near the edges of what each field allows
NAMES = ["torch_ext", "a", "A.b", "x__y", "a_", "_a", "é", "a-b", "", "a.b_c9", "Foo.Bar"]
VERSIONS = [
    "1.0",
    "1.2.0+pt211cu130",
    "0.1rc1.post2.dev3",
    "1!2.0",
    "1.0-1",
    "1.0.post",
    "01.0",
    "1.0+UPPER",
    "1.0+a_b",
    "v1.0",
    "1.0a",
    "",
    "1.0+",
]
BUILDS = [None, "1", "12abc", "1_x.y", "x1", "", "1é"]
PYTHONS = ["cp311", "py3.py2", "cp3_11", "3", "", "py.", "cp311.", "_x", "é"]
TAGS = ["none", "abi3", "manylinux_2_28_x86_64", "linux_x86_64.any", "", "a..b", "é", "a+b"]
TEXT = st.text(alphabet="aZ09._-+!é \x00/\\", max_size=12)


def field(pieces: list[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from(pieces), TEXT)


@st.composite
def wheel_names(draw: st.DrawFn) -> str:
    parts = [draw(field(NAMES)), draw(field(VERSIONS))]
    build = draw(field(BUILDS))
    if build is not None:
        parts.append(build)
    parts += [draw(field(PYTHONS)), draw(field(TAGS)), draw(field(TAGS))]
    suffix = draw(st.sampled_from([".whl", ".whl", ".WHL", ".whl\n", ""]))
    return "-".join(parts) + suffix


def outcome(name: str) -> str:
    try:
        return "ok " + files.check_wheel_filename(name, what="entry")
    except UnsafeArtefactError as exc:
        return f"refused {exc}"


@settings(max_examples=600, deadline=None)
@given(wheel_names())
@example("torch_ext-1.2.0+pt211cu130-cp311-cp311-manylinux_2_28_x86_64.whl")
@example("a-1.0-1-py2.py3-none-any.whl")
def test_the_fast_wheel_name_path_takes_only_what_packaging_takes_with_the_same_fields(
    name: str,
) -> None:
    match = files._CANONICAL_WHEEL_RE.fullmatch(name)
    if match is None:
        return
    pname, version, build, tags = parse_wheel_filename(name)  # raises if packaging refuses
    assert pname == canonicalize_name(match["name"])
    assert version == Version(match["version"])
    if match["build"] is None:
        assert build == ()
    else:
        digits = re.match(r"[0-9]+", match["build"])
        assert digits is not None
        assert build == (int(digits[0]), match["build"][digits.end() :])
    assert tags == {
        Tag(i, a, p)
        for i in match["python"].split(".")
        for a in match["abi"].split(".")
        for p in match["platform"].split(".")
    }


@settings(max_examples=600, deadline=None)
@given(wheel_names())
@example("torch_ext-1.2.0+pt211cu130-cp311-cp311-manylinux_2_28_x86_64.whl")
def test_check_wheel_filename_accepts_and_refuses_exactly_as_without_the_fast_path(
    name: str,
) -> None:
    fast = outcome(name)
    real = files._CANONICAL_WHEEL_RE
    try:
        files._CANONICAL_WHEEL_RE = re.compile(r"(?!)")  # matches nothing: packaging decides
        slow = outcome(name)
    finally:
        files._CANONICAL_WHEEL_RE = real
    assert fast == slow
    if fast.startswith("ok"):
        parse_wheel_filename(name)  # what the check promises


def test_the_fast_path_takes_the_names_buildtools_writes() -> None:
    for name in (
        "torch_ext-1.2.0+pt211cu130-cp311-cp311-manylinux_2_28_x86_64.whl",
        "synth_ext-0.1.0+pt213rocm64-cp313-cp313-manylinux_2_28_x86_64.whl",
        "a.b-2.0rc1.post1.dev2-1-py2.py3-none-any.whl",
    ):
        assert files._CANONICAL_WHEEL_RE.fullmatch(name), name


VALID: dict[str, Any] = {
    "filename": "torch_ext-1.0+pt213cpu-cp311-cp311-linux_x86_64.whl",
    "sha256": "a" * 64,
    "size": 10,
    "name": "torch-ext",
    "version": "1.0+pt213cpu",
    "requires_python": ">=3.10",
    "metadata_sha256": "b" * 64,
    "torch": "2.13.0",
    "torch_versions": ["2.13.0"],
    "torch_specifier": "==2.13.*",
    "accelerator": "cpu",
    "url": None,
}
ODD_VALUES = [None, 1, -1, True, 1.5, "x", "", "a" * 64, [], ["2.13.0"], [1], {}, "https://h/x"]


@st.composite
def entries(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 20)) == 0:
        return draw(st.sampled_from([None, [], "x", 1]))
    raw = dict(VALID)
    for key in draw(st.lists(st.sampled_from([*VALID, "fingerprint"]), max_size=3)):
        if draw(st.booleans()):
            raw.pop(key, None)
        else:
            raw[key] = draw(st.one_of(st.sampled_from(ODD_VALUES), TEXT))
    if draw(st.booleans()):
        raw["filename"] = draw(wheel_names())
    return raw


def read(raw: Any) -> str:
    try:
        return repr(IndexedWheel.from_json(raw))
    except (ValueError, UnsafeArtefactError) as exc:
        return f"{type(exc).__name__}: {exc}"


@settings(max_examples=600, deadline=None)
@given(entries())
def test_a_manifest_entry_is_read_as_the_field_by_field_checks_read_it(raw: Any) -> None:
    fast = read(raw)
    real = manifest._plain_types
    try:
        manifest._plain_types = lambda raw: False  # type: ignore[assignment]  # key by key
        slow = read(raw)
    finally:
        manifest._plain_types = real
    assert fast == slow


@settings(max_examples=300, deadline=None)
@given(
    st.builds(
        IndexedWheel,
        filename=st.text(),
        sha256=st.text(),
        size=st.integers(min_value=0, max_value=1 << 70),
        name=st.text(),
        version=st.text(),
        requires_python=st.none() | st.text(),
        metadata_sha256=st.text(),
        torch=st.text(),
        torch_versions=st.lists(st.text(), max_size=3).map(tuple),
        torch_specifier=st.none() | st.text(),
        accelerator=st.text(),
        url=st.none() | st.text(),
        fingerprint=st.none() | st.text(),
    )
)
def test_index_json_lines_are_what_json_dumps_writes(wheel: IndexedWheel) -> None:
    line = manifest._wheel_line(wheel)
    assert line == json.dumps(wheel.to_json(), sort_keys=True, ensure_ascii=False)
    assert json.loads(Manifest(wheels=(wheel,)).to_json())["wheels"] == [wheel.to_json()]


def reference_anchor(target: LinkTarget, prefix: str) -> str:
    """The anchor as first written: every part escaped on its own."""
    if target.url is not None:
        href = target.url
    else:
        href = f"{prefix}wheels/{quote(target.filename, safe='')}"
    attrs = [f'href="{escape(href)}#sha256={target.sha256}"']
    if target.requires_python:
        attrs.append(f'data-requires-python="{escape(target.requires_python)}"')
    if target.metadata_sha256 is not None and target.url is None:
        value = f"sha256={target.metadata_sha256}"
        attrs.append(f'data-dist-info-metadata="{value}"')
        attrs.append(f'data-core-metadata="{value}"')
    return f"<a {' '.join(attrs)}>{escape(target.filename)}</a><br>"


HTML_TEXT = st.text(alphabet="aZ09._-+&<>\"' %é/", max_size=20)


@settings(max_examples=300, deadline=None)
@given(
    st.builds(
        LinkTarget,
        filename=HTML_TEXT,
        sha256=st.just("c" * 64),
        requires_python=st.none() | HTML_TEXT,
        metadata_sha256=st.none() | st.just("d" * 64),
        url=st.none() | HTML_TEXT,
    ),
    st.sampled_from(["", "../../", "https://h.example/a&b/", "https://x/<'\">/"]),
)
def test_anchors_are_escaped_as_each_part_on_its_own_would_be(
    target: LinkTarget, prefix: str
) -> None:
    assert anchor(target, prefix) == reference_anchor(target, prefix)
