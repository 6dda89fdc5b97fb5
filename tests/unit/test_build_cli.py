"""`buildtools build` options of the docker backend and the command that reproduces a run."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from buildtools.cli.build import reproduce_command
from buildtools.cli.main import _extra_verbs, build_parser, main

REPO = Path(__file__).resolve().parents[2]


def parse(*argv: str) -> str:
    args = build_parser(_extra_verbs()).parse_args(["build", *argv])
    return reproduce_command(args)


def test_reproduce_names_the_docker_backend() -> None:
    assert parse("--only", "torch2.11.0-cu130-cp312", "--backend", "docker") == (
        "nox -s build -- --only torch2.11.0-cu130-cp312 --backend docker"
    )
    assert parse(
        "--profile", "pr", "--backend", "docker", "--offline", "--base-image", "a/b:1"
    ) == ("nox -s build -- --profile pr --backend docker --offline --base-image a/b:1")
    assert parse("--only", "x*") == "nox -s build -- --only 'x*'"


def test_docker_options_need_the_docker_backend(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "build",
            "--matrix",
            str(REPO / "matrix.yaml"),
            "--offline",
            "--wheelhouse",
            "/nonexistent/wh",
        ],
        out=io.StringIO(),
    )
    assert code == 8
    assert "--offline and --base-image apply to --backend docker only" in capsys.readouterr().err


def test_backend_choices() -> None:
    with pytest.raises(SystemExit):
        build_parser(_extra_verbs()).parse_args(["build", "--backend", "podman"])
