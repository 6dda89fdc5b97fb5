"""The one check between matrix.yaml and what GitHub evaluates in a generated workflow.

GitHub expands `${{ … }}` in almost every string of a workflow (`run:` scripts, `env:`
values, `with:` inputs, names, environment URLs) before any shell sees it, so shell
quoting cannot protect a literal the generator copies from matrix.yaml: a `project.path`
of `ext${{ secrets.PYPI_TOKEN }}` would hand the token to the script that names it. Every
string the generator can copy comes from the validated matrix or from the `--matrix`
path, so `refuse_expressions` looks at all of them (keys and values, defaults included)
once, before anything is rendered, and refuses `${{` with the file:line of the key.

Values known only at run time (the tag, a dispatch input, the plan's matrices) reach the
scripts through `env:`: the result of an expression is never evaluated again. The
backstop `check_scripts` fails generation (a bug, not a user error) if a `run:` script
ever holds an expression.
"""

from __future__ import annotations

__all__ = ["EXPRESSION", "check_scripts", "refuse_expressions"]

from collections.abc import Iterator, Mapping
from typing import Any

from ruamel.yaml import YAML

from ..errors import BuildtoolsError, ConfigError
from ..matrix.config import MatrixFile

EXPRESSION = "${{"


def _strings(value: Any, loc: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(key path, string) for every key and string value under `value`."""
    if isinstance(value, str):
        yield loc, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(key, loc)
            yield from _strings(item, (*loc, str(key)))
    elif isinstance(value, (list, tuple, set, frozenset)):
        for i, item in enumerate(value):
            yield from _strings(item, (*loc, i))


def refuse_expressions(mf: MatrixFile, *, matrix: str) -> None:
    """ConfigError naming every string of matrix.yaml (or the `--matrix` path) with `${{`."""
    problems = []
    if EXPRESSION in matrix:
        problems.append(
            f"--matrix {matrix!r}: contains {EXPRESSION!r}, which GitHub would evaluate in "
            "every script that names the file; rename the file or its directory"
        )
    for loc, text in _strings(mf.matrix.model_dump(mode="python"), ()):
        if EXPRESSION in text:
            dotted = ".".join(str(part) for part in loc) or "(top level)"
            problems.append(
                f"{mf.source.where(loc)}: {dotted}: {text!r} contains {EXPRESSION!r}: the "
                "generated workflows copy matrix.yaml's values, and GitHub evaluates "
                f"{EXPRESSION} … }}}} in them before any shell quoting applies (a secret or a "
                "token could be read that way); remove it"
            )
    if problems:
        raise ConfigError("\n".join(dict.fromkeys(problems)))


def check_scripts(path: str, text: str) -> None:
    """No `run:` script of a generated workflow holds an expression (values come by env)."""
    doc = YAML(typ="safe", pure=True).load(text) or {}
    for name, job in (doc.get("jobs") or {}).items():
        for i, step in enumerate(job.get("steps") or []):
            if EXPRESSION in str(step.get("run", "")):
                raise BuildtoolsError(
                    f"{path}: jobs.{name}.steps[{i}]: an expression inside a run: script "
                    "(pass the value through env:); this is a bug in the generator"
                )
