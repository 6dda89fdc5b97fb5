"""Hostile matrix.yaml values: each attack ends in one clear ConfigError, never in a traceback, a
hang, unbounded memory, or text that breaks out of a generated workflow or page."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from buildtools.errors import ConfigError
from buildtools.index.manifest import IndexedWheel
from buildtools.index.settings import IndexSettings
from buildtools.index.site import render_site
from buildtools.knowledge import load_knowledge
from buildtools.matrix.config import load_matrix
from buildtools.matrix.yamlsource import load_yaml
from buildtools.workflows.yamlwriter import Pinned, dump

GOOD = """\
version: 1
project:
  path: examples/scatter
axes:
  torch: ["2.13.0"]
  accelerator: [cpu]
  python: ["3.11"]
"""


def _load_error(tmp_path: Path, content: bytes | str) -> str:
    path = tmp_path / "matrix.yaml"
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        load_matrix(path)
    return str(info.value)


@pytest.mark.parametrize(
    "label",
    ['"ubuntu-24.04\\ndefaults: {run: {shell: evil}}"', '"ubuntu-24.04\\r"', '"a\\u2028b"'],
    ids=["newline", "carriage-return", "line-separator"],
)
def test_label_newline_cannot_add_workflow_keys(tmp_path: Path, label: str) -> None:
    message = _load_error(tmp_path, GOOD + f"runners:\n  smoke: {{cpu: {label}}}\n")
    assert message.startswith("matrix.yaml:9: runners.smoke.cpu: contains the control character")


@pytest.mark.parametrize("label", ["gpu h100", "a,b", "${{ github.token }}", "-x", "x" * 101])
def test_runner_labels_follow_githubs_rules(tmp_path: Path, label: str) -> None:
    message = _load_error(tmp_path, GOOD + f"runners:\n  build: {{cpu: '{label}'}}\n")
    assert "is not a runner label; allowed: letters, digits" in message


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        'https://x.io/"><script>alert(1)</script>',
        "https://x.io/a b",
        "ftp://x.io/whl",
        "//x.io/whl",
    ],
)
def test_base_url_is_an_http_url_that_cannot_break_out(tmp_path: Path, url: str) -> None:
    message = _load_error(tmp_path, GOOD + f"index:\n  base_url: '{url}'\n")
    assert message.startswith("matrix.yaml:9: index.base_url: ")


def test_torch_index_must_be_a_url(tmp_path: Path) -> None:
    message = _load_error(
        tmp_path, GOOD + "accelerators:\n  cpu:\n    torch_index: 'javascript:x'\n"
    )
    assert "is not an absolute https:// or http:// or file:// URL" in message


def test_landing_page_escapes_base_url() -> None:
    # the model refuses such a URL; the page escapes it all the same (defence in depth)
    wheel = IndexedWheel(
        filename="p-1-cp311-cp311-manylinux_2_28_x86_64.whl",
        sha256="a" * 64,
        size=1,
        name="p",
        version="1",
        requires_python=None,
        metadata_sha256="b" * 64,
        torch="2.13.0",
        torch_versions=("2.13.0",),
        torch_specifier="==2.13.*",
        accelerator="cpu",
    )
    settings = IndexSettings(base_url='https://x.io/"><script>alert(1)</script>')
    page = render_site([wheel], settings, load_knowledge())["index.html"].decode()
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(1)" in page  # the static list: HTML-escaped
    assert "\\u003cscript\\u003ealert(1)" in page  # the selector's JSON data: no '<' at all


def test_writer_keeps_comments_on_their_line() -> None:
    text = dump(
        {"a": Pinned("x", "v1\ndefaults: {run: {shell: evil}}")},
        header=["title\nname: evil"],
    )
    assert text.splitlines()[0].startswith("# ")
    assert "\nname:" not in text
    assert "\ndefaults:" not in text


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400))
@example(text="0[:")  # a key with '[' was taken for a union member's name: IndexError
def test_random_documents_load_or_fail_clearly(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    path = tmp_path_factory.mktemp("random") / "matrix.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        load_matrix(path)
    except ConfigError as exc:
        assert str(exc) and "Traceback" not in str(exc)


REFERENCE = Path(__file__).resolve().parents[2] / "matrix.yaml"
_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.lists(st.text(max_size=10), max_size=3),
    st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=2),
)


def _paths(node: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_mutations_of_the_reference_plan_or_fail_clearly(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    import json

    from buildtools.errors import PlanError
    from buildtools.knowledge import load_knowledge
    from buildtools.planner import Selection, plan

    doc = load_yaml(REFERENCE).data
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        paths = [p for p in _paths(doc) if p]
        where = data.draw(st.sampled_from(paths))
        parent = doc
        for key in where[:-1]:
            parent = parent[key]  # type: ignore[index]
        parent[where[-1]] = data.draw(_VALUES)  # type: ignore[index]
    directory = tmp_path_factory.mktemp("mutated")
    path = directory / "matrix.yaml"
    path.write_text(json.dumps(doc), encoding="utf-8")  # JSON is YAML
    (directory / "examples" / "scatter").mkdir(parents=True)
    try:
        mf = load_matrix(path)
        for profile in [None, *mf.matrix.profiles]:
            plan(mf, load_knowledge(), host_python="3.11", selection=Selection(profile=profile))
    except (ConfigError, PlanError) as exc:
        message = str(exc)
        assert message and "Traceback" not in message
        assert message.splitlines()[0].startswith(("matrix.yaml", "--", "error"))
