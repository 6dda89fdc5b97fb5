"""Sessions: each is a few lines that call buildtools. `nox -l` lists them."""

from __future__ import annotations

import nox

nox.options.sessions = ["build"]
nox.options.reuse_existing_virtualenvs = True
nox.needs_version = ">=2024.3.2"


@nox.session
def plan(session: nox.Session) -> None:
    """Print the plan of matrix.yaml (pass buildtools plan options after --)."""
    session.install("-e", ".")
    session.run("buildtools", "plan", *session.posargs)


@nox.session
def build(session: nox.Session) -> None:
    """Plan, build, repair and check wheels into wheelhouse/ (options after --)."""
    session.install("-e", ".")
    session.run("buildtools", "build", *session.posargs)


@nox.session
def index(session: nox.Session) -> None:
    """Publish wheelhouse/ as a find-links site + PEP 503 index in site/ (options after --)."""
    session.install("-e", ".")
    session.run("buildtools", "index", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """Unit and integration tests (pytest options after --)."""
    session.install("-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint + format check) and mypy --strict."""
    session.install("-e", ".[lint,test]", "nox")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
