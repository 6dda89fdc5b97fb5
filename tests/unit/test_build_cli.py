"""`buildtools build` options of the docker backend and the command that reproduces a run."""

from __future__ import annotations

import argparse
import io
import re
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
    assert "--offline applies to --backend docker only" in capsys.readouterr().err


def test_backend_choices() -> None:
    with pytest.raises(SystemExit):
        build_parser(_extra_verbs()).parse_args(["build", "--backend", "podman"])


def test_reproduce_is_the_command_that_ran_with_what_changes_the_run() -> None:
    args = build_parser(_extra_verbs()).parse_args(
        [
            "build",
            "--matrix",
            "m.yaml",
            "--wheelhouse",
            "out",
            "--force",
            "--no-ccache",
            "--cache-dir",
            "/c",
            "--max-jobs",
            "2",
        ]
    )
    assert reproduce_command(args, via_nox=False) == (
        "buildtools build --matrix m.yaml --wheelhouse out --cache-dir /c --force --no-ccache"
    )
    # a failed run: the command narrowed to its failed cells
    assert reproduce_command(args, via_nox=False, only=["torch2.13.0-cpu-cp311"]).startswith(
        "buildtools build --matrix m.yaml --only torch2.13.0-cpu-cp311 "
    )
    assert parse() == "nox -s build"


def test_a_run_whose_cells_all_failed_the_same_way_exits_with_that_code() -> None:
    from buildtools.cli.build import _failure_class
    from buildtools.errors import BuildFailedError, CheckFailedError, ToolchainError
    from buildtools.wheelbuild.build_report import CellResult, Status

    def failed(kind: str) -> CellResult:
        return CellResult(cell="c", job="j", status=Status.FAILED, failure=kind)

    assert _failure_class([failed("ToolchainError")]).exit_code == ToolchainError.exit_code == 7
    assert _failure_class([failed("check"), failed("check")]) is CheckFailedError
    assert _failure_class([failed("check"), failed("ToolchainError")]) is BuildFailedError
    assert _failure_class([failed("BuildFailedError")]) is BuildFailedError


def test_backend_registry_feeds_the_cli_and_refuses_foreign_flags() -> None:
    from buildtools.backends.registry import (
        BACKENDS,
        BackendOptions,
        BackendSetting,
        make_backend,
        refused_options,
    )
    from buildtools.errors import BuildFailedError
    from buildtools.knowledge import load_knowledge

    parser = build_parser(_extra_verbs())
    for name in BACKENDS:
        assert parser.parse_args(["build", "--backend", name]).backend == name
    assert refused_options("local", BackendOptions(offline=True, setup_emulation=True)) == [
        "--offline",
        "--setup-emulation",
    ]
    assert refused_options("docker", BackendOptions(offline=True, max_jobs=3)) == []
    setting = BackendSetting(kb=load_knowledge(), cache_dir=Path("/nonexistent"), env={})
    with pytest.raises(BuildFailedError, match="--base-image applies to --backend docker only"):
        make_backend("local", setting, BackendOptions(base_image="x/y:1"))
    assert make_backend("local", setting, BackendOptions()).name == "local"
    assert make_backend("docker", setting, BackendOptions(offline=True)).name == "docker"


def _verbs(parser: argparse.ArgumentParser) -> set[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def test_every_verb_is_listed_without_a_verb_and_parses_alone() -> None:
    from buildtools.cli.main import VERBS

    assert _verbs(build_parser(_extra_verbs())) == {"plan", "schema", *VERBS}
    for verb in VERBS:
        assert _verbs(build_parser(_extra_verbs([verb]))) == {"plan", "schema", verb}
    assert _verbs(build_parser(_extra_verbs(["plan"]))) == {"plan", "schema"}
    assert _verbs(build_parser(_extra_verbs(["--help"]))) == {"plan", "schema", *VERBS}


def test_every_verb_module_of_cli_is_listed() -> None:
    """A verb module's `add_*_parser` that VERBS does not name would never be registered
    (cli.main imports verb modules by name, only when their verb runs)."""
    from buildtools.cli.main import VERBS

    cli = REPO / "buildtools" / "cli"
    modules = {p.stem: p for p in cli.glob("*.py")} | {
        p.parent.name: p for p in cli.glob("*/__init__.py")
    }
    found = {
        (module, name)
        for module, path in modules.items()
        for name in re.findall(r"^def (add_\w+_parser)\(", path.read_text(), re.MULTILINE)
    }
    assert found == set(VERBS.values())
