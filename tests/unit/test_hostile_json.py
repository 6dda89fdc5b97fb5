"""JSON from outside the process (`buildtools.jsonfields.decode_json`): any document ends in its
value or one ValueError naming it, never a RecursionError, and never costs more than its
size limit. Every loader of outside JSON goes through it (checked by reading the source)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from buildtools.jsonfields import decode_json

REPO = Path(__file__).resolve().parents[2]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(value=json_values)
def test_documents_within_the_limits_decode_to_their_value(value: object) -> None:
    assert decode_json(json.dumps(value), what="doc") == value


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet='[]{}":,0123456789aeflnrstu \\', max_size=200) | st.binary())
def test_any_text_decodes_or_is_one_line_naming_the_document(text: str | bytes) -> None:
    try:
        decode_json(text, what="the doc", max_depth=8)
    except ValueError as exc:
        assert str(exc).startswith("the doc") and "\n" not in str(exc).strip()


@pytest.mark.parametrize("depth", [33, 1000, 100_000, 1_000_000])
def test_nesting_beyond_the_limit_is_refused_without_recursion(depth: int) -> None:
    for doc in ("[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth):
        with pytest.raises(ValueError, match="nested deeper than 32 levels"):
            decode_json(doc, what="doc")


def test_size_and_constants_beyond_json_are_refused() -> None:
    with pytest.raises(ValueError, match="more than the 1,024 bytes allowed"):
        decode_json(b"[" + b"1," * 600 + b"1]", what="doc", max_bytes=1024)
    for constant in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(ValueError, match=f"{constant} is not JSON"):
            decode_json(f'{{"size": {constant}}}', what="doc")


def test_every_loader_of_outside_json_goes_through_the_limits() -> None:
    """json.loads/json.load are called only by the one decoder (a new loader must use it);
    code in strings (a script a child process runs) is not this process's."""
    found = []
    for path in sorted((REPO / "buildtools").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("load", "loads")
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "json"
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    # the decoder; and two files installed with the code (this package's data, auditwheel's
    # policy), which are as trusted as the code reading them
    allowed = {
        "buildtools/jsonfields.py",
        "buildtools/ecosystem.py",
        "buildtools/wheel/checks/policy.py",
    }
    assert [f for f in found if f.split(":")[0] not in allowed] == []
