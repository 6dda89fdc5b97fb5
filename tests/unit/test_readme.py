"""The README's commands work as written on a fresh clone.

Every command of the README's tables and `sh` blocks is read from the README itself. Each
`nox -s X` names a session of the noxfile; each buildtools command line parses; what is
cheap runs here (plan, schema, knowledge), and a `build` is planned with its own options, so
a `--only` outside its profile fails here rather than in a newcomer's terminal. What costs
minutes or a machine this tier lacks (compiles, GPU runners, Docker, the test suite) is
parsed only, with the reason listed in `EXPENSIVE`.
"""

from __future__ import annotations

import ast
import io
import re
import shlex
from pathlib import Path

import pytest

from buildtools.cli import main as cli

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"

# nox session → the buildtools verb it runs (noxfile.py), or None: not a buildtools command
SESSION_VERB: dict[str, str | None] = {
    "plan": "plan",
    "build": "build",
    "index": "index",
    "smoke": "smoke",
    "ci": "ci",
    "tests": None,
    "lint": None,
    "bench": None,
    "realworld": None,
    "ci-run": None,
}
EXPENSIVE = {
    "build": "compiles (minutes; the integration tests build the example)",
    "smoke": "installs torch into fresh environments (tests/integration/test_smoke.py)",
    "index": "needs built wheels (tests/integration/test_index.py)",
    "ci": "writes workflows (tests/integration/test_ci.py runs nox -s ci -- --check)",
    "check": "needs a built wheel (tests/integration/test_repair_checks.py)",
    "doctor": "probes a Python environment (tests/integration/test_doctor.py)",
    "init": "reads another repository (tests/unit/test_init.py runs it on one)",
    "tests": "the whole test suite (this test is part of it)",
    "lint": "ruff, mypy, import-linter (CI runs them)",
    "bench": "benchmarks take many minutes",
    "realworld": "builds third-party extensions from PyPI (minutes each)",
    "ci-run": "runs the workflows under act (tens of minutes; tests/integration/test_act.py)",
}


def readme_commands() -> list[str]:
    """Commands in the first code span of each table row and in every `sh` block."""
    text = README.read_text(encoding="utf-8")
    commands: list[str] = []
    for line in text.splitlines():
        m = re.match(r"\| `([^`]+)` \|", line)
        if m:
            commands.append(m[1])
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for raw in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#\s.*$", "", raw).strip()
            if line:
                commands += [part.strip() for part in line.split("&&")]
    return commands


def nox_sessions() -> set[str]:
    tree = ast.parse((REPO / "noxfile.py").read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            if "nox.session" not in ast.unparse(deco):
                continue
            # `@nox.session(name="ci-run")` names the session; else the function does
            named = [
                k.value.value
                for k in (deco.keywords if isinstance(deco, ast.Call) else [])
                if k.arg == "name" and isinstance(k.value, ast.Constant)
            ]
            names.add(str(named[0]) if named else node.name)
    return names


def as_buildtools(command: str) -> tuple[list[str], str | None] | None:
    """(buildtools argv, the nox session it came from) or None when not a buildtools command."""
    argv = shlex.split(command)
    for prefix in (["python3", "-m"], ["python", "-m"]):
        if argv[:2] == prefix:
            argv = argv[2:]
    if argv[:1] == ["buildtools"]:
        return argv[1:], None
    if argv[:2] == ["nox", "-s"]:
        session = argv[2]
        assert session in nox_sessions(), f"{command}: noxfile.py has no session {session!r}"
        assert session in SESSION_VERB, f"{command}: add the session to SESSION_VERB"
        verb = SESSION_VERB[session]
        if verb is None:
            return None
        rest = argv[4:] if argv[3:4] == ["--"] else argv[3:]
        if verb == "ci" and (not rest or rest[0].startswith("-")):
            rest = ["github", *rest]  # what the session adds
        return [verb, *rest], session
    return None


COMMANDS = readme_commands()


def test_the_readme_has_commands() -> None:
    assert "python3 -m nox -s build" in COMMANDS
    assert any(c.startswith("nox -s plan") for c in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command_works_as_written(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)  # a fresh clone: commands run at its root
    got = as_buildtools(command)
    if got is None:
        if command.startswith(("nox", "python3 -m nox")):
            session = shlex.split(command)[command.split().index("-s") + 1]
            assert session in nox_sessions(), command
            pytest.skip(f"{session}: {EXPENSIVE[session]}")
        pytest.skip("not a buildtools command (pip, git, a shell)")
    argv, session = got
    parser = cli.build_parser(cli._extra_verbs())
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{command}: does not parse ({capsys.readouterr().err.strip()}): {exc}")
    verb = argv[0]
    if "--check-index" in argv:
        pytest.skip("parsed; it asks the package index (tests/integration/test_torchindex_live.py)")
    if "--missing" in argv:
        pytest.skip("parsed; it reads a published site (tests/unit/test_missing.py runs it on one)")
    if verb in ("plan", "schema", "knowledge"):
        assert cli.main(argv, out=io.StringIO()) == 0, capsys.readouterr().err
        return
    if verb == "build":
        # the build's own cell selection, without the build
        if getattr(args, "torch_axis", None) or args.project is not None:
            pytest.skip("plans against another torch or project: needs that environment")
        plan_argv = ["plan", "--format", "ids"]
        if args.profile:
            plan_argv += ["--profile", args.profile]
        for glob in args.only:
            plan_argv += ["--only", glob]
        out = io.StringIO()
        assert cli.main(plan_argv, out=out) == 0, f"{command}: {capsys.readouterr().err}"
        assert out.getvalue().split(), f"{command}: plans no cell"
    pytest.skip(f"{session or verb} parsed; running it {EXPENSIVE.get(verb, 'is expensive')}")
