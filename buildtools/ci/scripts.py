"""The `run:` scripts of the plan, build, smoke, image, download and status steps.

No `${{ }}` inside a script: every value arrives through `env:`, so nothing a pull
request controls is pasted into shell code. Each script that does work writes how to
reproduce it into the job summary. The publishing steps' scripts are `ci.publish_scripts`.
"""

from __future__ import annotations

__all__ = [
    "bash",
    "build_script",
    "commit_status_script",
    "free_disk_script",
    "image_build_script",
    "image_load_script",
    "image_pull_script",
    "plan_script",
    "prefetch_script",
    "qemu_script",
    "smoke_script",
    "status_script",
]

from . import layout


def bash(*lines: str) -> str:
    """A `run:` script that stops at the first failing command (and unset variable)."""
    return "\n".join(("set -euo pipefail", *lines)) + "\n"


def _ci(matrix: str, verb: str, *args: str) -> str:
    return layout.join(["nox", "-s", "ci", "--", verb, *layout.matrix_args(matrix), *args])


def plan_script(matrix: str, profile: str, *, kind: str, shape: str) -> str:
    """The plan job's script: the matrices of `kind`, its plan and entries as artifacts.

    A release is planned for the tag (BT_TAG) checked out at the commit the tag push named
    (BT_EXPECT_SHA; a moved tag stops it), and only from the default branch's workflow.
    """
    base = _ci(matrix, "matrix", "--profile", profile, "--workflow", kind, "--shape", shape)
    files = "--entries-json plan/entries.json --plan-json plan/plan.json"
    lines = ["mkdir -p plan"]
    if kind in (layout.RELEASE_NAME, layout.SELF_HOSTED_NAME):
        lines.append('sha="$(git rev-parse HEAD)"')
    if kind == layout.RELEASE_NAME:
        lines += [
            'if [ "$GITHUB_EVENT_NAME" = workflow_dispatch ] && '
            '[ "$GITHUB_REF" != "refs/heads/$BT_DEFAULT_BRANCH" ]; then',
            '  echo "::error::run the release from $BT_DEFAULT_BRANCH (chosen: $GITHUB_REF):'
            ' only its workflow may use the runner groups and publish"',
            "  exit 1",
            "fi",
            'if [ -n "${BT_EXPECT_SHA:-}" ] && [ "$sha" != "$BT_EXPECT_SHA" ]; then',
            '  echo "::error::tag $BT_TAG is now $sha, but the push that started this release'
            ' was $BT_EXPECT_SHA: the tag moved; push a new tag"',
            "  exit 1",
            "fi",
            "# BT_ONLY: the `only` input, cell id globs separated by spaces",
            'read -r -a globs <<< "${BT_ONLY:-}"',
            f'args=(--tag "$BT_TAG" --sha "$sha" --published-from-releases {files})',
            'for glob in "${globs[@]}"; do args+=(--only "$glob"); done',
            'if [ "${BT_UNSMOKED:-false}" = true ]; then args+=(--unsmoked); fi',
            'if [ "${BT_PUBLISH:-true}" != true ]; then args+=(--no-publish); fi',
        ]
    elif kind == layout.SELF_HOSTED_NAME:
        lines.append(f'args=(--sha "$sha" {files})')
    else:
        lines.append(f"args=({files})")
    lines.append(f'{base} "${{args[@]}}"')
    return bash(*lines)


def free_disk_script() -> str:
    """CUDA/ROCm builder images are large; a hosted runner's disk is not."""
    return bash(
        "sudo rm -rf /usr/share/dotnet /usr/local/lib/android /opt/ghc /opt/hostedtoolcache/CodeQL",
        "df -h /",
    )


def qemu_script() -> str:
    """QEMU user emulation for an aarch64 container on an x86 runner (binfmt, F flag)."""
    return bash(
        "sudo apt-get update -qq",
        "sudo apt-get install -y -qq qemu-user-static binfmt-support",
        "cat /proc/sys/fs/binfmt_misc/qemu-aarch64",
    )


def image_pull_script() -> str:
    """Take the job's builder image from the registry (`ci.image_registry`) when it is there."""
    return bash(
        'ref="$REGISTRY:${IMAGE#*:}"',
        'if docker pull --quiet "$ref"; then',
        '  docker tag "$ref" "$IMAGE"',
        "else",
        '  echo "::notice::$ref is not in the registry yet: this job builds the image"',
        "fi",
    )


def image_load_script() -> str:
    """Load the builder image the Actions cache restored (and free its archive's disk)."""
    return bash(
        f'archive="$HOME/{layout.IMAGES_DIR.removeprefix("~/")}/$IMAGE_FILE"',
        'docker load --input "$archive"',
        'rm -f "$archive"',
    )


def image_build_script(matrix: str, profile: str, *, registry: bool) -> str:
    """The image job: build one builder recipe, then save it (cache) or push it (registry)."""
    base = _ci(matrix, "builder-image", "--profile", profile)
    lines = ['read -r -a globs <<< "$BT_ONLY"', "args=()"]
    lines.append('for glob in "${globs[@]}"; do args+=(--only "$glob"); done')
    if registry:
        lines += [
            'ref="$REGISTRY:${IMAGE#*:}"',
            'if docker manifest inspect "$ref" > /dev/null 2>&1; then',
            '  echo "$ref: in the registry already"',
            "  exit 0",
            "fi",
            'args+=(--push "$ref")',
        ]
    else:
        lines.append(f'args+=(--save "$HOME/{layout.IMAGES_DIR.removeprefix("~/")}/$IMAGE_FILE")')
    lines.append(f'{base} "${{args[@]}}"')
    return bash(*lines)


def prefetch_script(matrix: str, profile: str) -> str:
    """The download job: every wheel one group's builds install, into the prefetch dir."""
    return bash(
        f'export BUILDTOOLS_CACHE_DIR="$HOME/{layout.CACHE_DIR.removeprefix("~/")}"',
        _ci(matrix, "prefetch", "--profile", profile) + ' --group "$BT_GROUP"',
    )


def build_script(matrix: str, profile: str) -> str:
    """One build job's script: `nox -s build` of its cells, and how to reproduce it."""
    fixed = layout.join([*layout.matrix_args(matrix), "--profile", profile])
    return bash(
        # the caches the workflow restores live in the default cache dir of the runner
        f'export BUILDTOOLS_CACHE_DIR="$HOME/{layout.CACHE_DIR.removeprefix("~/")}"',
        "# BT_ONLY: the globs that select exactly this job's cells (from the plan job)",
        'read -r -a globs <<< "$BT_ONLY"',
        f"args=({fixed})",
        'for glob in "${globs[@]}"; do args+=(--only "$glob"); done',
        "args+=(--backend docker --offline)",
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


def status_script(matrix: str, kind: str) -> str:
    """The status job's script: the run's verdict and final summary (NEEDS: toJSON(needs))."""
    return bash(
        _ci(matrix, "status", "--workflow", kind, "--reports", f"{layout.ARTIFACTS}/reports")
        + " --needs-env NEEDS"
    )


def commit_status_script() -> str:
    """Post the self-hosted run's verdict on the pull request's commit."""
    return bash(
        'url="$GITHUB_SERVER_URL/$GITHUB_REPOSITORY/actions/runs/$GITHUB_RUN_ID"',
        'gh api --method POST "repos/$GITHUB_REPOSITORY/statuses/$BT_HEAD_SHA" \\',
        f'  -f state="$BT_STATE" -f context={layout.STATUS_COMMIT_CONTEXT} \\',
        '  -f description="$BT_DESCRIPTION" -f target_url="$url"',
    )
