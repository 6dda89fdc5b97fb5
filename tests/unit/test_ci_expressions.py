"""Workflow generation against hostile matrix values: nothing copied from matrix.yaml or the
`--matrix` path can become a GitHub expression (`${{ … }}`), which GitHub evaluates before
any shell quoting applies. One chokepoint (`ci.expressions.refuse_expressions`) refuses them
with the file:line of the key; these tests feed it the shapes of issue 24 and random ones."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from buildtools.errors import BuildtoolsError, ConfigError
from buildtools.workflows.expressions import EXPRESSION
from buildtools.workflows.generate import generate

REPO = Path(__file__).resolve().parents[2]
REFERENCE = (REPO / "matrix.yaml").read_text(encoding="utf-8")
SECRET = "${{ secrets.PYPI_TOKEN }}"


def _repo(tmp: Path, text: str, name: str = "matrix.yaml") -> Path:
    (tmp / ".git").mkdir(parents=True, exist_ok=True)
    matrix = tmp / name
    matrix.parent.mkdir(parents=True, exist_ok=True)
    if not (matrix.parent / "examples").exists():
        (matrix.parent / "examples").symlink_to(REPO / "examples")
    matrix.write_text(text, encoding="utf-8")
    return matrix


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


# (what is replaced in the reference matrix, by what): each puts the hostile text into one
# value the generator reads (or could read) while writing the workflows
HOSTILE = {
    # issue 24: lands in a run: script of release.yml's sdist job (with ci.pypi)
    "project.path": (
        "path: examples/scatter",
        f"path: {_quoted('examples/scatter' + SECRET)}",
    ),
    # issue 24: lands in jobs.pypi.environment.url, which GitHub evaluates
    "project.name": ("name: bt-scatter", f"name: {_quoted('bt' + SECRET)}"),
    "project.smoke": ("smoke: python smoke.py", f"smoke: {_quoted('python smoke.py ' + SECRET)}"),
    "a profile's description": (
        "description: every cell",
        f"description: {_quoted(SECRET)}",
    ),
    "an accelerator's torch_index": (
        "torch_index: https://download.pytorch.org/whl/cpu",
        "torch_index: https://download.pytorch.org/whl/cpu${{github.token}}",
    ),
    "index.base_url": (
        "base_url: https://example.github.io/bt-scatter/whl",
        "base_url: https://example.github.io/bt-scatter/whl${{secrets.X}}",
    ),
}
PYPI = "ci:\n  pypi: {torch: '2.13.0', accelerator: cu130}\n"


@pytest.mark.parametrize("where", sorted(HOSTILE))
def test_an_expression_in_any_matrix_value_is_refused_with_its_line(
    tmp_path: Path, where: str
) -> None:
    old, new = HOSTILE[where]
    assert old in REFERENCE
    text = REFERENCE.replace(old, new, 1) + PYPI
    line = next(i for i, t in enumerate(text.splitlines(), 1) if EXPRESSION in t)
    with pytest.raises(ConfigError) as err:
        generate(_repo(tmp_path, text))
    message = str(err.value)
    assert f"matrix.yaml:{line}:" in message, message
    assert "GitHub evaluates" in message and "remove it" in message
    assert "Traceback" not in message


def test_an_expression_in_a_build_env_key_or_value_is_refused(tmp_path: Path) -> None:
    text = REFERENCE.replace(
        "  smoke: python smoke.py",
        "  smoke: python smoke.py\n  build_env: {CFLAGS: '-O2 ${{ github.token }}'}",
    )
    with pytest.raises(ConfigError, match=r"project\.build_env\.CFLAGS"):
        generate(_repo(tmp_path, text))


def test_an_expression_in_the_matrix_path_is_refused(tmp_path: Path) -> None:
    # issue 24: a --matrix path with ${{ … }} landed in 21 run: scripts
    matrix = _repo(tmp_path, REFERENCE, name="ci${{ secrets.X }}/matrix.yaml")
    with pytest.raises(ConfigError, match=r"--matrix 'ci\$\{\{ secrets\.X \}\}/matrix\.yaml'"):
        generate(matrix)


def test_the_pypi_project_reaches_its_script_through_env_and_its_url_encoded(
    tmp_path: Path,
) -> None:
    text = REFERENCE.replace("name: bt-scatter", "name: bt_scatter.Extra") + PYPI
    files = {g.path: g.text for g in generate(_repo(tmp_path, text)).files}
    release = YAML(typ="safe", pure=True).load(files[".github/workflows/release.yml"])
    dist = release["jobs"]["pypi-dist"]
    step = next(s for s in dist["steps"] if "sdist" in s.get("run", ""))
    assert step["env"]["BT_PROJECT"] == "examples/scatter"
    assert '"$BT_PROJECT"' in step["run"] and "examples/scatter" not in step["run"]
    assert release["jobs"]["pypi"]["environment"]["url"] == (
        "https://pypi.org/project/bt_scatter.Extra/"
    )


def test_the_backstop_refuses_a_script_that_holds_an_expression() -> None:
    from buildtools.workflows.expressions import check_scripts

    text = "jobs:\n  a:\n    steps:\n      - run: echo ${{ github.event.issue.title }}\n"
    with pytest.raises(BuildtoolsError, match=r"jobs\.a\.steps\[0\]: an expression inside"):
        check_scripts("x.yml", text)


_TEXT = st.text(alphabet=string.ascii_letters + string.digits + " ._-/$:{}", max_size=12)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    before=_TEXT,
    after=_TEXT,
    where=st.sampled_from(["project.smoke", "a profile's description", "project.name"]),
)
def test_random_text_around_an_expression_never_reaches_a_workflow(
    tmp_path_factory: pytest.TempPathFactory, before: str, after: str, where: str
) -> None:
    """Whatever surrounds `${{`, generation refuses it (or matrix.yaml's own rules do)."""
    old, _ = HOSTILE[where]
    key = old.split(":", 1)[0]
    text = REFERENCE.replace(old, f"{key}: {_quoted(before + EXPRESSION + after)}", 1)
    with pytest.raises(ConfigError):
        generate(_repo(tmp_path_factory.mktemp("h"), text))
