"""matrix.yaml as data plus the line of every key and item (buildtools.matrix.yamlsource).

Every later error names `matrix.yaml:LINE`, so the line map is tested for nested maps, lists and
flow style; and since the file is input a pull request can change, loading is bounded and
strict: each hostile document ends in one ConfigError naming the line, never in a traceback, a
hang or unbounded memory.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from buildtools.errors import ConfigError
from buildtools.matrix.yamlsource import MAX_NODES, SourceMap, load_yaml

DOCUMENT = """\
# the reference layout, shortened
version: 1
axes:
  torch:
    - "2.11.0"
    - "2.13.0"
  python: ["3.11", "3.12"]
accelerators:
  cpu: {torch_index: "https://download.pytorch.org/whl/cpu"}
build:
  max_jobs: 4
  ccache: false
  note: null
"""


def _write(tmp_path: Path, content: bytes | str) -> Path:
    path = tmp_path / "matrix.yaml"
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_bytes(content)
    return path


def _error(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_yaml(path)
    return str(info.value)


def _load_error(tmp_path: Path, content: bytes | str) -> str:
    return _error(_write(tmp_path, content))


# --- data and locations ----------------------------------------------------------------------


def test_data_is_plain_python(tmp_path: Path) -> None:
    doc = load_yaml(_write(tmp_path, DOCUMENT))
    assert doc.data == {
        "version": 1,
        "axes": {"torch": ["2.11.0", "2.13.0"], "python": ["3.11", "3.12"]},
        "accelerators": {"cpu": {"torch_index": "https://download.pytorch.org/whl/cpu"}},
        "build": {"max_jobs": 4, "ccache": False, "note": None},
    }
    assert type(doc.data["axes"]) is dict and type(doc.data["axes"]["torch"]) is list
    assert type(doc.data["axes"]["torch"][0]) is str  # not ruamel's scalar subclasses


def test_every_key_and_item_has_its_line(tmp_path: Path) -> None:
    source = load_yaml(_write(tmp_path, DOCUMENT)).source
    assert source.path == tmp_path / "matrix.yaml"
    assert source.lines == {
        (): 1,
        ("version",): 2,
        ("axes",): 3,
        ("axes", "torch"): 4,
        ("axes", "torch", 0): 5,
        ("axes", "torch", 1): 6,
        ("axes", "python"): 7,
        ("axes", "python", 0): 7,  # flow style: the items share their key's line
        ("axes", "python", 1): 7,
        ("accelerators",): 8,
        ("accelerators", "cpu"): 9,
        ("accelerators", "cpu", "torch_index"): 9,
        ("build",): 10,
        ("build", "max_jobs"): 11,
        ("build", "ccache"): 12,
        ("build", "note"): 13,
    }


def test_a_missing_key_is_placed_at_its_nearest_ancestor(tmp_path: Path) -> None:
    source = load_yaml(_write(tmp_path, DOCUMENT)).source
    assert source.line(("axes", "torch", 1)) == 6
    assert source.line(("axes", "torch", 7)) == 4  # no such item: the list's line
    assert source.line(("build", "smoke", "timeout")) == 10
    assert source.line(("runners", "build")) == 1  # no such section: the top of the file
    assert source.where(["axes", "python", 1]) == "matrix.yaml:7"
    assert source.where(()) == "matrix.yaml:1"


def test_where_without_a_known_line_is_the_file_name() -> None:
    source = SourceMap(path=Path("/repo/ci/matrix.yaml"), lines={})
    assert source.line(("axes",)) is None
    assert source.where(("axes",)) == "matrix.yaml"


def test_an_empty_file_is_an_empty_mapping(tmp_path: Path) -> None:
    doc = load_yaml(_write(tmp_path, "# nothing yet\n"))
    assert doc.data == {} and doc.source.lines == {(): 1}


def test_a_syntax_error_names_its_line(tmp_path: Path) -> None:
    text = "version: 1\naxes:\n  torch: [2.11.0, 2.13.0\n  python: [3.12]\n"
    message = _load_error(tmp_path, text)
    assert message.startswith("matrix.yaml:4: invalid YAML: ")


def test_a_missing_file_says_how_to_name_one(tmp_path: Path) -> None:
    message = _error(tmp_path / "absent.yaml")
    assert message.endswith(
        "no such file; pass --matrix PATH or create matrix.yaml (see docs/matrix.md)"
    )


def test_a_key_must_be_a_plain_value(tmp_path: Path) -> None:
    message = _load_error(tmp_path, "version: 1\n? [a, b]\n: 1\n")
    assert message.startswith("matrix.yaml:") and "a key must be a plain value" in message


# --- hostile documents -----------------------------------------------------------------------


def _billion_laughs(levels: int = 9) -> str:
    text = "a: &a [x, x, x, x, x, x, x, x, x]\n"
    for i in range(1, levels):
        prev, name = chr(96 + i), chr(97 + i)
        text += f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]\n"
    return text


def test_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    # 9**9 = 387 million scalars once expanded; it must stop at the node bound
    message = _load_error(tmp_path, _billion_laughs())
    assert f"expands to more than {MAX_NODES:,} values" in message
    assert message.startswith("matrix.yaml:")


def test_merge_key_is_refused(tmp_path: Path) -> None:
    text = "version: 1\nbase: &b {path: x}\nproject:\n  <<: *b\n  name: y\n"
    assert _load_error(tmp_path, text) == (
        "matrix.yaml:3: project: merge keys (`<<:`) are not supported; write the keys out in full"
    )


def test_python_object_tag_is_refused(tmp_path: Path) -> None:
    message = _load_error(tmp_path, "version: 1\nproject: !!python/object:os.system {}\n")
    assert message.startswith("matrix.yaml:2: project: YAML tags are not allowed")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("version: 1\n".encode("utf-16"), "the file is UTF-16; save it as UTF-8"),
        (b"version: 1\nproject: {name: \xff}\n", "matrix.yaml:2: not UTF-8 (byte 0xff)"),
        (b"version: 1\x00\n", "matrix.yaml:1: invalid YAML: character U+0000 is not allowed"),
        (b"x" * (2 << 20), "larger than 1024 KiB"),
    ],
    ids=["utf16", "latin1-byte", "nul", "too-large"],
)
def test_undecodable_matrix_names_the_problem(
    tmp_path: Path, content: bytes, expected: str
) -> None:
    assert expected in _load_error(tmp_path, content)


def test_directory_as_matrix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        load_yaml(tmp_path)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                [":", " ", "\n", "- ", "&a ", "*a", "[", "]", "{", "}", "!!", "<<: ", '"']
            ),
            st.text(alphabet="abcxyz019.", max_size=5),
        ),
        max_size=60,
    )
)
def test_yaml_syntax_soup_loads_or_fails_clearly(
    tmp_path_factory: pytest.TempPathFactory, parts: list[tuple[str, str]]
) -> None:
    path = tmp_path_factory.mktemp("soup") / "matrix.yaml"
    path.write_text("".join(a + b for a, b in parts), encoding="utf-8")
    try:
        load_yaml(path)
    except ConfigError as exc:
        assert str(exc).startswith(("matrix.yaml", str(path)))
