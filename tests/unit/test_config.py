"""matrix.yaml validation: one malformed matrix per kind of mistake, each with its exact message."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import jsonschema
import pytest
from ruamel.yaml import YAML

from buildtools.cli import main as cli
from buildtools.errors import ConfigError, ExitCode, PlanError
from buildtools.knowledge import load_knowledge
from buildtools.matrix.config import json_schema, load_matrix
from buildtools.planner import Selection, plan

REPO = Path(__file__).resolve().parents[2]

GOOD = """\
version: 1
project:
  path: examples/scatter
axes:
  torch: ["2.11.0", "2.13.0"]
  accelerator: [cpu, cu130]
  python: ["3.11", "3.12"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def config_error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_matrix(write(tmp_path, text))
    return str(info.value)


def plan_error(tmp_path: Path, text: str, **kwargs: object) -> str:
    mf = load_matrix(write(tmp_path, text))
    with pytest.raises((ConfigError, PlanError)) as info:
        plan(mf, load_knowledge(), host_python="3.11", selection=Selection(**kwargs))  # type: ignore[arg-type]
    return str(info.value)


def test_good_matrix_loads(tmp_path: Path) -> None:
    mf = load_matrix(write(tmp_path, GOOD))
    assert mf.matrix.axes.torch == ["2.11.0", "2.13.0"]
    assert mf.project_dir == (tmp_path / "examples/scatter").resolve()


MALFORMED = [
    pytest.param(
        GOOD + "flavour: vanilla\n",
        "matrix.yaml:8: flavour: unknown key; allowed: accelerators, axes, build, ci, default_profile, "
        "exclude, include, index, profiles, project, runners, version",
        id="unknown-key",
    ),
    pytest.param(
        GOOD.replace("  python:", "  pyton:"),
        "matrix.yaml:4: axes.python: required key is missing\n"
        "matrix.yaml:7: axes.pyton: unknown key; allowed: accelerator, platform, python, torch; "
        "did you mean 'python'?",
        id="misspelled-key",
    ),
    pytest.param(
        GOOD.replace('["2.11.0", "2.13.0"]', '"2.11.0"'),
        "matrix.yaml:5: axes.torch: expected a list, got a string",
        id="wrong-type",
    ),
    pytest.param(
        GOOD.replace('"2.13.0"]', '"2.99.0"]'),
        "matrix.yaml:5: axes.torch[1]: torch 2.99.0 is not a known release; allowed: 2.0.0 … 2.15.0 "
        "(`buildtools knowledge` lists them); did you mean 2.9.0?",
        id="unknown-torch",
    ),
    pytest.param(
        GOOD.replace('["3.11", "3.12"]', "[3.10, 3.12]"),
        "matrix.yaml:7: axes.python[0]: 3.1 is a number, so YAML may have changed it (3.10 loads "
        'as 3.1); write Python versions as quoted strings, e.g. "3.12"\n'
        "matrix.yaml:7: axes.python[1]: 3.12 is a number, so YAML may have changed it (3.10 loads "
        'as 3.1); write Python versions as quoted strings, e.g. "3.12"',
        id="version-as-number",
    ),
    pytest.param(
        GOOD + 'exclude:\n  - {python: "3.1["}\n',
        "matrix.yaml:9: exclude[0].python: '3.1[' is not a valid glob: '[' is never closed; "
        "allowed: * ? [seq]",
        id="bad-glob",
    ),
    pytest.param(
        GOOD.replace("  path: examples/scatter", "  path: examples/scatter\n  abi: per_python"),
        "matrix.yaml:4: project.abi: 'per_python' is not allowed; allowed: 'per-python', 'abi3' "
        "or 'stable'; did you mean 'per-python'?",
        id="bad-enum",
    ),
    pytest.param(
        GOOD.replace("[cpu, cu130]", "[cpu, cuda13]"),
        "matrix.yaml:6: axes.accelerator[1]: 'cuda13' is not an accelerator; allowed: 'cpu', "
        "'cuXYZ' (e.g. cu126, cu130), 'rocmX.Y' (e.g. rocm6.4)",
        id="bad-accelerator",
    ),
    pytest.param(
        GOOD + "default_profile: nightly\n",
        "matrix.yaml:8: default_profile: 'nightly' is not a profile; defined: (none)",
        id="unknown-default-profile",
    ),
    pytest.param(
        GOOD + "index:\n  local_version: 'pt{torch}'\n",
        "matrix.yaml:9: index.local_version: unknown placeholder {torch}; allowed: {torch_major}, "
        "{torch_minor}, {torch_patch}, {accelerator}, {abi}",
        id="bad-template",
    ),
    pytest.param(
        GOOD + "axes2: [\n",
        "matrix.yaml:9: invalid YAML: expected the node content, but found '<stream end>'",
        id="yaml-syntax",
    ),
]


@pytest.mark.parametrize(("text", "message"), MALFORMED)
def test_malformed_matrix_messages(tmp_path: Path, text: str, message: str) -> None:
    assert config_error(tmp_path, text) == message


def test_impossible_include(tmp_path: Path) -> None:
    text = GOOD + 'include:\n  - {torch: "2.4.0", accelerator: cpu, python: "3.13"}\n'
    message = plan_error(tmp_path, text)
    assert message == (
        "matrix.yaml:9: include[0]: impossible include torch2.4.0-cpu-cp313: torch 2.4.0 has no Python 3.13 "
        "wheels (it supports 3.8–3.12)"
    )


def test_include_glob_matching_nothing(tmp_path: Path) -> None:
    text = GOOD + 'include:\n  - {torch: "2.13.0", accelerator: "rocm*"}\n'
    assert plan_error(tmp_path, text) == (
        "matrix.yaml:9: include[0].accelerator: 'rocm*' matches no value of axes.accelerator "
        "(cpu, cu130); a glob in include only selects among the axes' values — write the value "
        "itself to add a new one"
    )


def test_empty_result(tmp_path: Path) -> None:
    text = GOOD + 'exclude:\n  - {torch: "2.*"}\n'
    assert plan_error(tmp_path, text) == (
        "matrix.yaml:4: the matrix selects no buildable cell; check axes, exclude and the "
        "profile's select rules"
    )


def test_unknown_profile(tmp_path: Path) -> None:
    text = GOOD + "profiles:\n  release: {}\n"
    assert plan_error(tmp_path, text, profile="relase") == (
        "matrix.yaml:8: profiles: no profile named 'relase'; defined: release; "
        "did you mean 'release'?"
    )


def test_only_matching_nothing(tmp_path: Path) -> None:
    message = plan_error(tmp_path, GOOD, only=["torch9*"])
    assert message.startswith(
        "--only torch9*: matches no cell of this plan; cells: torch2.11.0-cpu-cp311"
    )


def test_unaccepted_arch(tmp_path: Path) -> None:
    text = GOOD.replace('["2.11.0", "2.13.0"]', '["2.6.0"]').replace("cu130", "cu126")
    text += 'accelerators:\n  cu126:\n    arch_list: "8.0;12.0"\n'
    message = plan_error(tmp_path, text)
    assert message.startswith(
        "matrix.yaml:10: accelerators.cu126.arch_list: torch 2.6.0 does not accept arch 12.0"
    )


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["plan", "--matrix", "{bad}"], ExitCode.CONFIG),
        (["plan", "--matrix", "{good}", "--profile", "nope"], ExitCode.PLAN),
        (["plan", "--matrix", "{good}", "--only", "nothing*"], ExitCode.PLAN),
        (["plan", "--matrix", "{missing}"], ExitCode.CONFIG),
    ],
)
def test_cli_exit_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], code: ExitCode
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD + "flavour: x\n")
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    args = [a.format(bad=bad, good=good, missing=tmp_path / "none.yaml") for a in argv]
    assert cli.main(args) == code
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "Traceback" not in err


def test_reference_matrix_valid_against_schema() -> None:
    data = YAML(typ="safe").load((REPO / "matrix.yaml").read_text())
    jsonschema.validate(data, json_schema())


def test_schema_rejects_unknown_keys() -> None:
    data = YAML(typ="safe").load((REPO / "matrix.yaml").read_text())
    data["axes"]["pyton"] = ["3.12"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, json_schema())


def test_schema_command_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "torch-buildtools matrix.yaml"
    assert "axes" in schema["properties"]
