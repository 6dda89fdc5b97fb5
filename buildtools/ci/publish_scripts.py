"""The `run:` scripts of the publishing steps: provenance, selection, assets, index, PyPI.

Every value arrives through `env:` (BT_TAG, SITE, GH_TOKEN, …), never as an expression
inside the script.
"""

from __future__ import annotations

__all__ = [
    "assets_script",
    "index_script",
    "preview_script",
    "pypi_dist_script",
    "restore_script",
    "verify_script",
]

from . import layout
from .scripts import bash

_WHEELS = f"{layout.ARTIFACTS}/wheels"
_SMOKE = f"{layout.ARTIFACTS}/smoke"
_GATES = (
    "gates=()",
    "while IFS= read -r report; do",
    '  gates+=(--require-smoke "$report")',
    f"done < <(find {_SMOKE} -name report.json | sort)",
)


def _ci(matrix: str, verb: str, *args: str) -> str:
    return layout.join(["nox", "-s", "ci", "--", verb, *layout.matrix_args(matrix), *args])


def _release_url() -> str:
    """This tag's download URL prefix (BT_TAG from the plan job)."""
    return '"$GITHUB_SERVER_URL/$GITHUB_REPOSITORY/releases/download/$BT_TAG/"'


def verify_script(*, deny_self_hosted: bool) -> str:
    """Every downloaded wheel must carry the provenance a build job of this run attested.

    The attestation names the workflow file and the commit of the run that signed it: a
    wheel uploaded by anything else (a smoke job's machine, another workflow) fails here.
    """
    flags = " --deny-self-hosted-runners" if deny_self_hosted else ""
    return bash(
        f"mkdir -p {_WHEELS}",
        f"mapfile -t wheels < <(find {_WHEELS} -name '*.whl' | sort)",
        'signer="$GITHUB_REPOSITORY/' + layout.RELEASE_WORKFLOW + '"',
        'for wheel in "${wheels[@]}"; do',
        '  if ! gh attestation verify "$wheel" --repo "$GITHUB_REPOSITORY" \\',
        f'      --signer-workflow "$signer" --source-digest "$GITHUB_SHA"{flags} > /dev/null; then',
        '    echo "::error::${wheel##*/}: no provenance from a build job of this run: '
        'nothing is published"',
        "    exit 1",
        "  fi",
        "done",
        'echo "provenance verified for ${#wheels[@]} wheel(s)"',
    )


def assets_script(matrix: str) -> str:
    """The smoke-tested wheels become assets of the tag's release (resumable, idempotent)."""
    return bash(
        f"mkdir -p {_WHEELS} {_SMOKE}",
        *_GATES,
        _ci(matrix, "select", _WHEELS, "--out", "selected", "--selection", layout.SELECTION)
        + ' "${gates[@]}"',
        "mapfile -t selected < <(find selected -name '*.whl' | sort)",
        'if [ "${#selected[@]}" -eq 0 ]; then',
        '  echo "::warning::no wheel passed its smoke test: nothing to upload"',
        "  exit 0",
        "fi",
        _ci(matrix, "upload-assets") + ' --tag "$BT_TAG" "${selected[@]}"',
    )


def restore_script(matrix: str) -> str:
    """Start the site from the published record (release assets), checked against Pages."""
    return bash(
        _ci(matrix, "restore-site", "--site", layout.SITE, "--from-releases")
        + ' --cache-bust "$GITHUB_RUN_ID"'
    )


def index_script(matrix: str) -> str:
    """Index the same selection into $SITE, linking the release assets; record it."""
    selection = f"{layout.ARTIFACTS}/selection/{layout.SELECTION}"
    return bash(
        f"mkdir -p {_WHEELS} {_SMOKE}",
        *_GATES,
        # the same gate as the assets job, which must have chosen the same wheels
        _ci(matrix, "select", _WHEELS, "--out", "selected", "--selection", "selected.json")
        + f' --expect {selection} "${{gates[@]}}"',
        f"url={_release_url()}",
        'args=(--site "$SITE" --wheel-url "${url}{filename}")',
        "{",
        "  echo '### Index'",
        "  echo",
        "  echo 'The same publish on your machine, from the downloaded artifacts:'",
        "  echo",
        "  echo '```sh'",
        '  echo "nox -s index -- selected ${args[*]} ${gates[*]}"',
        "  echo '```'",
        '} >> "$GITHUB_STEP_SUMMARY"',
        # the coverage map of the published index joins the summary (index.coverage)
        'nox -s index -- selected "${args[@]}" "${gates[@]}" --summary "$GITHUB_STEP_SUMMARY"',
        # every wheel this tag's pages link must be an asset of its release; then record
        _ci(matrix, "record") + ' --tag "$BT_TAG" --site "$SITE" --url-prefix "$url"',
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


def pypi_dist_script(matrix: str, *, project: str | None) -> str:
    """The PyPI variant's published wheels without their local label, and an sdist."""
    selection = f"{layout.ARTIFACTS}/selection/{layout.SELECTION}"
    lines = [
        _ci(matrix, "pypi-dist", _WHEELS, "--selection", selection, "--out", "dist"),
    ]
    if project is not None:
        # the sdist's build requirements (torch) come from the CPU index: small and exact
        lines.append(layout.join(["python", "-m", "build", "--sdist", "--outdir", "dist", project]))
    lines.append("ls -l dist")
    return bash(*lines)
