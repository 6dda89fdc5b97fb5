"""The `run:` scripts of the release's `prepare` job (selection, record, index, attestation
subjects, the bundle the signing job publishes), the pull request's index preview and PyPI.

Every value arrives through `env:` (BT_TAG, BT_SHA, SITE, GH_TOKEN, …), never as an
expression inside the script. These jobs hold no write permission; the signing job's own
scripts (no repository code) are in `workflows.signing`.
"""

from __future__ import annotations

__all__ = [
    "ATTEST_DIR",
    "bundle_script",
    "index_script",
    "preview_script",
    "pypi_dist_script",
    "pypi_verify_script",
    "restore_script",
    "select_script",
    "subjects_script",
]

from ..ciplan import layout
from .scripts import bash
from .signing import BUNDLE_DIR

_WHEELS = f"{layout.ARTIFACTS}/wheels"
_SMOKE = f"{layout.ARTIFACTS}/smoke"
_SELECTED = "selected"
ATTEST_DIR = "attest"
_GATES = (
    "gates=()",
    "while IFS= read -r report; do",
    '  gates+=(--require-smoke "$report")',
    f"done < <(find {_SMOKE} -name report.json | sort)",
)
_NOX = ["nox", "-s"]


def _ci(matrix: str, verb: str, *args: str) -> str:
    return layout.join(["nox", "-s", "ci", "--", verb, *layout.matrix_args(matrix), *args])


def _release_url() -> str:
    """This tag's download URL prefix (BT_TAG from the plan job)."""
    return '"$GITHUB_SERVER_URL/$GITHUB_REPOSITORY/releases/download/$BT_TAG/"'


def _files(with_record: bool) -> tuple[str, ...]:
    lines = (f"mapfile -t files < <(find {_SELECTED} -name '*.whl' | sort)",)
    return (*lines, 'files+=("$SITE/index.json")') if with_record else lines


def select_script(matrix: str, *, built: list[str], smoked: tuple[str, ...] = ()) -> str:
    """The wheels a smoke report passed, linked into selected/; selection.json for later.

    `built`: `FAMILY=VAR`, the variables holding each build job's outputs; every wheel
    must be one of the wheels (name and sha256) a build leg of this run reported.
    `smoked`: `FAMILY=VAR` of each smoke job: a report counts only when a smoke leg
    reported its sha256, and only for its own family's wheels.
    """
    checks = [a for var in built for a in ("--built-env", var)]
    checks += [a for var in smoked for a in ("--smoked-env", var)]
    return bash(
        f"mkdir -p {_WHEELS} {_SMOKE}",
        *_GATES,
        _ci(matrix, "select", _WHEELS, "--out", _SELECTED, "--selection", layout.SELECTION, *checks)
        + ' "${gates[@]}"',
        f"if ! find {_SELECTED} -name '*.whl' | grep -q .; then",
        '  echo "::error::no wheel passed its smoke test: nothing to publish"',
        "  exit 1",
        "fi",
    )


def restore_script(matrix: str) -> str:
    """Start the site from the published record (authenticated), checked against Pages."""
    return bash(
        _ci(matrix, "restore-site", "--site", layout.SITE, "--from-releases")
        + ' --cache-bust "$GITHUB_RUN_ID"'
    )


def index_script(matrix: str) -> str:
    """Index the selection into $SITE, linking this tag's release assets."""
    return bash(
        *_GATES,
        f"url={_release_url()}",
        'args=(--site "$SITE" --wheel-url "${url}{filename}")',
        "{",
        "  echo '### Index'",
        "  echo",
        "  echo 'The same publish on your machine, from the downloaded artifacts:'",
        "  echo",
        "  echo '```sh'",
        f'  echo "nox -s index -- {_SELECTED} ${{args[*]}} ${{gates[*]}}"',
        "  echo '```'",
        '} >> "$GITHUB_STEP_SUMMARY"',
        # the coverage map of the published index joins the summary (index.coverage)
        f'{layout.join([*_NOX, "index", "--", _SELECTED])} "${{args[@]}}" "${{gates[@]}}" '
        '--summary "$GITHUB_STEP_SUMMARY"',
    )


def subjects_script(matrix: str) -> str:
    """The attest action's inputs: the selected wheels and the new record, by sha256, and
    the release predicate (the vetted tag, its commit, this run)."""
    return bash(
        *_files(with_record=True),
        _ci(matrix, "release-subjects", "--out", ATTEST_DIR)
        + ' --tag "$BT_TAG" --sha "$BT_SHA" "${files[@]}"',
        f"cat {ATTEST_DIR}/subjects.sha256",
    )


def bundle_script(matrix: str) -> str:
    """The bundle the signing job publishes (the selection, the site, the attestation's
    inputs, the links the release must hold, the record merged into); output its digest."""
    return bash(
        f"url={_release_url()}",
        _ci(matrix, "bundle", "--out", BUNDLE_DIR, "--wheels", _SELECTED)
        + f' --site-root {layout.SITE} --record "$SITE/index.json" --attest {ATTEST_DIR}'
        + ' --url-prefix "$url" --base-record "$BT_RECORD"',
    )


def pypi_verify_script(matrix: str) -> str:
    """The PyPI variant's wheels carry this run's release statement for the tag."""
    return bash(
        f"mkdir -p {_WHEELS}",
        f"mapfile -t files < <(find {_WHEELS} -name '*.whl' | sort)",
        _ci(matrix, "verify-provenance") + ' --tag "$BT_TAG" --sha "$BT_SHA" "${files[@]}"',
    )


def preview_script(matrix: str) -> str:
    """A pull request's index preview: the smoke-passed wheels into $SITE (relative links)."""
    fixed = layout.join([*layout.matrix_args(matrix), "--base-url", ""])
    return bash(
        # one artifact downloads into the directory itself, several into one each: find both
        f"mkdir -p {_WHEELS} {_SMOKE}",
        f"mapfile -t wheels < <(find {_WHEELS} -name '*.whl' | sort)",
        *_GATES,
        'if [ "${#gates[@]}" -eq 0 ]; then',
        '  echo "::warning::no smoke report in this run: no wheel is published"',
        "  wheels=()",
        "fi",
        "# no wheel: an empty directory (the default wheelhouse/ does not exist here)",
        f'if [ "${{#wheels[@]}}" -eq 0 ]; then mkdir -p {layout.ARTIFACTS}/none; '
        f"wheels=({layout.ARTIFACTS}/none); fi",
        f'args=({fixed} --site "$SITE")',
        "{",
        "  echo '### Index preview'",
        "  echo",
        "  echo 'The same index on your machine, from the downloaded artifacts:'",
        "  echo",
        "  echo '```sh'",
        '  echo "nox -s index -- ${wheels[*]} ${args[*]} ${gates[*]}"',
        "  echo '```'",
        '} >> "$GITHUB_STEP_SUMMARY"',
        'nox -s index -- "${wheels[@]}" "${args[@]}" "${gates[@]}"',
    )


def pypi_dist_script(matrix: str, *, sdist: bool) -> str:
    """The PyPI variant's published wheels without their local label, and an sdist of the
    project directory BT_PROJECT."""
    selection = f"{layout.ARTIFACTS}/selection/{layout.SELECTION}"
    lines = [
        _ci(matrix, "pypi-dist", _WHEELS, "--selection", selection, "--out", "dist"),
    ]
    if sdist:
        # the sdist's build requirements (torch) come from the CPU index: small and exact
        lines.append('python -m build --sdist --outdir dist "$BT_PROJECT"')
    lines.append("ls -l dist")
    return bash(*lines)
