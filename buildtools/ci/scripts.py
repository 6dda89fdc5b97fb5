"""The `run:` scripts of the workflows' steps.

No `${{ }}` inside a script: every value arrives through `env:`, so nothing a pull
request controls is pasted into shell code. Each script writes how to reproduce its step
into the job summary.
"""

from __future__ import annotations

__all__ = ["bash", "build_script", "index_script", "plan_script", "smoke_script"]

from . import layout


def bash(*lines: str) -> str:
    """A `run:` script that stops at the first failing command (and unset variable)."""
    return "\n".join(("set -euo pipefail", *lines)) + "\n"


def plan_script(matrix: str, profile: str, *, dispatch: bool) -> str:
    """The plan job's script: the plan of `profile` as JSON (`only` globs when dispatched)."""
    base = layout.join(
        ["nox", "-s", "ci", "--", "matrix", *layout.matrix_args(matrix), "--profile", profile]
    )
    if not dispatch:
        return bash(f"{base} --plan-json plan.json")
    return bash(
        "# BT_ONLY: the `only` input, cell id globs separated by spaces",
        'read -r -a globs <<< "${BT_ONLY:-}"',
        "args=()",
        'for glob in "${globs[@]}"; do args+=(--only "$glob"); done',
        f'{base} --plan-json plan.json "${{args[@]}}"',
    )


def build_script(matrix: str, profile: str) -> str:
    """One build job's script: `nox -s build` of its cells, and how to reproduce it."""
    fixed = layout.join([*layout.matrix_args(matrix), "--profile", profile])
    return bash(
        "# BT_ONLY: the globs that select exactly this job's cells (from the plan job)",
        'read -r -a globs <<< "$BT_ONLY"',
        f"args=({fixed})",
        'for glob in "${globs[@]}"; do args+=(--only "$glob"); done',
        "args+=(--backend docker)",
        "{",
        '  echo "### Build job $BT_JOB"',
        "  echo",
        "  echo 'The same build on your machine (needs Docker):'",
        "  echo",
        "  echo '```sh'",
        '  echo "$BT_REPRODUCE"',
        "  echo '```'",
        '} >> "$GITHUB_STEP_SUMMARY"',
        'nox -s build -- "${args[@]}"',
    )


def smoke_script(matrix: str, family: str) -> str:
    """One smoke job's script: `nox -s smoke` of a build job's wheels."""
    return bash(
        "{",
        '  echo "### Smoke test of $BT_JOB"',
        "  echo",
        f"  echo 'The same test on a machine with a {family} device, after the build:'",
        "  echo",
        "  echo '```sh'",
        '  echo "$BT_REPRODUCE"',
        '  echo "$BT_SMOKE"',
        "  echo '```'",
        '} >> "$GITHUB_STEP_SUMMARY"',
        layout.join(layout.smoke_argv(matrix, family)),
    )


def index_script(matrix: str, *, preview: bool) -> str:
    """The index job's script: publish the wheels a smoke report passed into $SITE."""
    fixed = layout.join([*layout.matrix_args(matrix), *(["--base-url", ""] if preview else [])])
    wheels, smoke = f"{layout.ARTIFACTS}/wheels", f"{layout.ARTIFACTS}/smoke"
    return bash(
        # one artifact downloads into the directory itself, several into one each: find both
        f"mkdir -p {wheels} {smoke}",
        f"mapfile -t wheels < <(find {wheels} -name '*.whl' | sort)",
        "gates=()",
        "while IFS= read -r report; do",
        '  gates+=(--require-smoke "$report")',
        f"done < <(find {smoke} -name report.json | sort)",
        'if [ "${#gates[@]}" -eq 0 ]; then',
        '  echo "::warning::no smoke report in this run: no wheel is published"',
        "  wheels=()",
        "fi",
        "# no wheel: an empty directory (the default wheelhouse/ does not exist here)",
        f'if [ "${{#wheels[@]}}" -eq 0 ]; then mkdir -p {layout.ARTIFACTS}/none; '
        f"wheels=({layout.ARTIFACTS}/none); fi",
        f'args=({fixed + " " if fixed else ""}--site "$SITE")',
        "{",
        "  echo '### Index'",
        "  echo",
        "  echo 'The same publish on your machine, from the downloaded artifacts:'",
        "  echo",
        "  echo '```sh'",
        '  echo "nox -s index -- ${wheels[*]} ${args[*]} ${gates[*]}"',
        "  echo '```'",
        '} >> "$GITHUB_STEP_SUMMARY"',
        'nox -s index -- "${wheels[@]}" "${args[@]}" "${gates[@]}"',
    )
