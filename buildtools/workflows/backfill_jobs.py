"""`backfill.yml`: wheels for a new torch without a new release of the extension.

On a schedule (daily) and by hand, from the default branch, a GitHub-hosted job (read
permissions only) asks what the latest release tag promises and its published record lacks
(`buildtools ci backfill`: the tag's matrix.yaml and version, a torch range resolved
against what the package index serves now, `plan --missing` against the release's
`index.json` asset). Nothing missing: the run ends there, a minute of a hosted runner.
Something missing: a second job, which holds the one write permission (`actions: write`)
and runs none of the tag's code, starts `release.yml` for that tag with exactly those cells
(`workflow_dispatch`, tag + only), so the cells are built from the tag's source,
smoke-tested per family, attached to the tag's Release and merged into the index by the
release workflow itself.

The smoke-only path (release day for a stable-ABI window): a cell whose torch was released
inside a published stable wheel's window (`smoke_only` of `ci backfill`) is passed as
`window`, never as `only`: release.yml builds nothing for it; its `smoke-window-<family>`
leg downloads the published wheel (the authenticated record's URL and sha256), runs
`smoke --window-torch` on a runner of the wheel's family, and the release's own prepare and
signing jobs list the wheel on the new torch's page only when that leg's report (bound by
its digest, as every smoke leg's) passed it (`ciplan.smokeonly`, `workflows.window_jobs`). A backfill therefore passes every gate a release passes (the
vetted tag, the protected environment, the attestations, the exact caches, the record's
authentication), now and whenever those gates change, and the self-hosted runner groups
keep admitting one workflow file (`release.yml`) only.
"""

from __future__ import annotations

__all__ = ["BACKFILL_NAME", "BACKFILL_WORKFLOW", "render_backfill"]

from typing import Any

from ..ciplan import layout
from .jobparts import WorkflowSpec, documented
from .scripts import bash
from .yamlwriter import dump

BACKFILL_WORKFLOW = f"{layout.WORKFLOWS_DIR}/backfill.yml"
BACKFILL_NAME = "backfill"
# daily, off the hour (GitHub delays the busy top of the hour)
SCHEDULE = "41 4 * * *"
_RELEASE_FILE = layout.RELEASE_WORKFLOW.rsplit("/", 1)[1]


def _ci(wf: WorkflowSpec, *args: str) -> str:
    return layout.join(["nox", "-s", "ci", "--", "backfill", *wf.margs, *args])


def _find_tag_script(wf: WorkflowSpec) -> str:
    return bash(
        'if [ "$GITHUB_REF" != "refs/heads/$BT_DEFAULT_BRANCH" ]; then',
        '  echo "::error::run the backfill from $BT_DEFAULT_BRANCH (chosen: $GITHUB_REF)"',
        "  exit 1",
        "fi",
        'args=(--github-output "$GITHUB_OUTPUT")',
        'if [ -n "${BT_TAG:-}" ]; then args+=(--tag "$BT_TAG"); fi',
        f'{_ci(wf, "--latest-tag")} "${{args[@]}}"',
    )


def _missing_script(wf: WorkflowSpec) -> str:
    return bash(f'{_ci(wf)} --tag "$BT_TAG" --github-output "$GITHUB_OUTPUT"')


def _dispatch_script() -> str:
    return bash(
        f'echo "starting {_RELEASE_FILE} for $BT_TAG: $BT_COUNT missing cell(s) to build, '
        'smoke-only: ${BT_WINDOW:-none}"',
        # no cell to build: `only` must still name none (empty means every cell), so the
        # release's plan builds nothing when `window` is set and `only` is empty
        f'gh workflow run {_RELEASE_FILE} --repo "$GITHUB_REPOSITORY" --ref "$BT_DEFAULT_BRANCH" '
        '-f tag="$BT_TAG" -f only="$BT_ONLY" -f window="$BT_WINDOW"',
    )


def render_backfill(wf: WorkflowSpec) -> str:
    """The text of backfill.yml (its plan is made at run time, for the latest tag)."""
    tag = "${{ steps.tag.outputs.tag }}"
    default_branch = "${{ github.event.repository.default_branch }}"
    steps: list[dict[str, Any]] = [
        wf.checkout(""),
        wf.setup_python(),
        wf.install_tools(),
        {
            "name": "Find the latest release tag",
            "id": "tag",
            "env": {
                "BT_TAG": "${{ inputs.tag }}",
                "BT_DEFAULT_BRANCH": default_branch,
                "GITHUB_TOKEN": "${{ github.token }}",
            },
            "run": _find_tag_script(wf),
        },
        {**wf.checkout(f"refs/tags/{tag}"), "name": "Check out the tag"},
        {
            "name": "What the tag promises and its record lacks",
            "id": "missing",
            "env": {"BT_TAG": tag, "GITHUB_TOKEN": "${{ github.token }}"},
            "run": _missing_script(wf),
        },
    ]
    missing: dict[str, Any] = {
        "name": "what the latest release lacks",
        "runs-on": wf.control,
        "timeout-minutes": layout.PLAN_TIMEOUT,
        "permissions": {"contents": "read"},
        "outputs": {
            "tag": tag,
            "count": "${{ steps.missing.outputs.count }}",
            "only": "${{ steps.missing.outputs.only }}",
            "smoke_only": "${{ steps.missing.outputs.smoke_only }}",
        },
        "steps": steps,
    }
    # a job of its own holds the one write permission, and runs none of the tag's code
    dispatch: dict[str, Any] = {
        "name": f"release the missing cells ({_RELEASE_FILE} for the tag)",
        "needs": "missing",
        "if": "needs.missing.outputs.count != '0' || needs.missing.outputs.smoke_only != ''",
        "runs-on": wf.control,
        "timeout-minutes": 5,
        "permissions": {"actions": "write"},
        "steps": [
            {
                "name": f"Start {_RELEASE_FILE}",
                "env": {
                    "BT_TAG": "${{ needs.missing.outputs.tag }}",
                    "BT_ONLY": "${{ needs.missing.outputs.only }}",
                    "BT_COUNT": "${{ needs.missing.outputs.count }}",
                    "BT_WINDOW": "${{ needs.missing.outputs.smoke_only }}",
                    "BT_DEFAULT_BRANCH": default_branch,
                    "GH_TOKEN": "${{ github.token }}",
                },
                "run": _dispatch_script(),
            }
        ],
    }
    regen = layout.join(["nox", "-s", "ci", *(["--", *wf.margs] if wf.margs else [])])
    check = layout.join(["nox", "-s", "ci", "--", *wf.margs, "--check"])
    # nothing from the plan: what a backfill builds is decided at run time, for the tag
    header = [
        wf.do_not_edit(),
        f"Regenerate: `{regen}` (or `buildtools ci github`); `{check}` fails when this",
        f"file no longer matches {wf.matrix}.",
        "",
        f"Backfill: daily ({SCHEDULE}, UTC) and by hand, from the default branch: the cells",
        "of the `release` profile the latest release tag promises (a torch range meets a new",
        f"torch) and its record lacks are released by {_RELEASE_FILE} for that tag, through",
        "every gate of a release; a new torch inside a published stable-ABI wheel's window is",
        "passed as `window`: smoke-tested with that wheel, no rebuild. Nothing missing: nothing",
        "else runs.",
    ]
    doc: dict[str, Any] = {
        "name": BACKFILL_NAME,
        "on": {
            "schedule": [{"cron": SCHEDULE}],
            "workflow_dispatch": {
                "inputs": {
                    "tag": {
                        "description": "The release tag to complete (default: the latest)",
                        "type": "string",
                        "required": False,
                        "default": "",
                    }
                }
            },
        },
        "permissions": {},
        "concurrency": {"group": "${{ github.workflow }}", "cancel-in-progress": False},
        "env": wf.env,
        "jobs": {"missing": missing, "dispatch": dispatch},
    }
    return dump(documented(doc), header=header, gaps=("jobs",))
