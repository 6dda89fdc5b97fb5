"""The `run:` scripts of the plan, build, smoke, image, download and status steps.

No `${{ }}` inside a script: every value arrives through `env:`, so nothing a pull
request controls is pasted into shell code. Each script that does work writes how to
reproduce it into the job summary. The publishing steps' scripts are `workflows.publish_scripts`.
"""

from __future__ import annotations

__all__ = [
    "bash",
    "build_script",
    "built_script",
    "commit_status_script",
    "free_disk_script",
    "image_build_script",
    "image_check_script",
    "image_load_script",
    "image_pull_script",
    "plan_script",
    "prefetch_script",
    "qemu_script",
    "smoke_script",
    "status_script",
    "vet_script",
]

from ..backends.registry import BACKENDS, CI_BACKEND
from ..ciplan import layout


def bash(*lines: str) -> str:
    """A `run:` script that stops at the first failing command (and unset variable)."""
    return "\n".join(("set -euo pipefail", *lines)) + "\n"


def _ci(matrix: str, verb: str, *args: str) -> str:
    return layout.join(["nox", "-s", "ci", "--", verb, *layout.matrix_args(matrix), *args])


def vet_script() -> str:
    """The release's first step, before anything is checked out: which tag, which commit.

    Only the default branch's workflow releases (a manual run from another branch stops);
    the tag (BT_TAG: the dispatch input or the pushed tag, never pasted into this script)
    must match ci.tag_pattern (BT_TAG_PATTERN, group 1 the version) and exist; it is
    resolved to its commit through the API (an annotated tag peeled), which must be the
    commit the tag push named (BT_EXPECT_SHA; a moved tag stops it). Every later job checks
    out that commit, and provenance is verified against it. Exit 4 (the plan is impossible).
    """
    api = 'gh api "repos/$GITHUB_REPOSITORY/git'
    jq = "--jq '.object.type + \" \" + .object.sha'"
    return bash(
        'if [ "$GITHUB_EVENT_NAME" = workflow_dispatch ] && '
        '[ "$GITHUB_REF" != "refs/heads/$BT_DEFAULT_BRANCH" ]; then',
        '  echo "::error::run the release from $BT_DEFAULT_BRANCH (chosen: $GITHUB_REF):'
        ' only its workflow may use the runner groups and publish"',
        "  exit 4",
        "fi",
        "# a tag name is letters, digits and ._/+- (nothing that could start a second line)",
        'if [ -z "$BT_TAG" ] || [[ $BT_TAG =~ [^A-Za-z0-9._/+-] ]] || '
        "! [[ $BT_TAG =~ $BT_TAG_PATTERN ]]; then",
        '  echo "::error::tag ${BT_TAG@Q} is not a release tag (ci.tag_pattern:'
        ' $BT_TAG_PATTERN): nothing is built or published"',
        "  exit 4",
        "fi",
        'version="${BASH_REMATCH[1]}"',
        f'if ! found="$({api}/ref/tags/$BT_TAG" {jq})"; then',
        '  echo "::error::tag $BT_TAG does not exist in $GITHUB_REPOSITORY"',
        "  exit 4",
        "fi",
        'read -r type sha <<< "$found"',
        "for _ in 1 2 3 4 5; do  # an annotated tag (or a tag of a tag): peel it to its commit",
        '  [ "$type" = tag ] || break',
        f'  read -r type sha <<< "$({api}/tags/$sha" {jq})"',
        "done",
        'if [ "$type" != commit ] || ! [[ $sha =~ ^[0-9a-f]{40}$ ]]; then',
        '  echo "::error::tag $BT_TAG names a $type ($sha), not a commit"',
        "  exit 4",
        "fi",
        'if [ -n "${BT_EXPECT_SHA:-}" ] && [ "$sha" != "$BT_EXPECT_SHA" ]; then',
        '  echo "::error::tag $BT_TAG is now $sha, but the push that started this release'
        ' was $BT_EXPECT_SHA: the tag moved; push a new tag"',
        "  exit 4",
        "fi",
        '{ echo "tag=$BT_TAG"; echo "sha=$sha"; echo "version=$version"; } >> "$GITHUB_OUTPUT"',
        'echo "tag $BT_TAG (version $version) is commit $sha"',
    )


def plan_script(matrix: str, profile: str, *, kind: str, shape: str) -> str:
    """The plan job's script: the matrices of `kind`, its plan and entries as artifacts.

    A release is planned for the vetted tag (BT_TAG) at its commit (BT_SHA, checked out by
    the step before: `vet_script`).
    """
    base = _ci(matrix, "matrix", "--profile", profile, "--workflow", kind, "--shape", shape)
    files = "--entries-json plan/entries.json --plan-json plan/plan.json"
    lines = ["mkdir -p plan"]
    if kind in (layout.RELEASE_NAME, layout.SELF_HOSTED_NAME):
        lines.append('sha="$(git rev-parse HEAD)"')
    if kind == layout.RELEASE_NAME:
        lines += [
            'if [ "$sha" != "$BT_SHA" ]; then',
            '  echo "::error::checked out $sha, but tag $BT_TAG was vetted as $BT_SHA"',
            "  exit 4",
            "fi",
            "# BT_ONLY: the `only` input, cell id globs separated by spaces",
            'read -r -a globs <<< "${BT_ONLY:-}"',
            f'args=(--tag "$BT_TAG" --sha "$sha" --published-from-releases {files})',
            'for glob in "${globs[@]}"; do args+=(--only "$glob"); done',
            "# BT_WINDOW: the `window` input, cells a published stable wheel is smoked for",
            'read -r -a window <<< "${BT_WINDOW:-}"',
            'for cell in "${window[@]}"; do args+=(--window "$cell"); done',
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


_EXPECTED = (
    # the ID (or registry digest) this run's images job output for this job's recipe slot
    'expected="$(python -c \'import json, os; print(json.loads(os.environ["BT_IMAGES"] or "{}")'
    '.get("image_" + os.environ["BT_SLOT"], ""))\')"',
    'if [ -z "$expected" ]; then',
    "  echo \"::notice::this run's images job made no image for this recipe: the build makes"
    ' its own"',
    "  exit 0",
    "fi",
)


def image_pull_script(*, by_digest: bool) -> str:
    """The job's builder image from `ci.image_registry`: a release pulls this run's image by
    the digest its push job output (BT_IMAGES, slot BT_SLOT: content-addressed, so nothing
    else can answer); other workflows take the recipe's tag when it is there."""
    if by_digest:
        return bash(
            *_EXPECTED,
            'case "$expected" in',
            "  *@sha256:*) ;;",
            '  *) echo "::error::the images job gave no digest ($expected)"; exit 1 ;;',
            "esac",
            'docker pull --quiet "$expected"',
            'docker tag "$expected" "$IMAGE"',
        )
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


def image_check_script(directory: str) -> str:
    """Load this run's builder image (an artifact of its images job) after checking the
    archive's sha256, then its ID, against what that job output: anything else stops the
    build (before a byte of another job's archive reaches docker)."""
    return bash(
        f'archive="{directory}/$IMAGE_FILE"',
        *_EXPECTED,
        'sha="$(python -c \'import json, os; print(json.loads(os.environ["BT_IMAGES"] or "{}")'
        '.get("archive_" + os.environ["BT_SLOT"], ""))\')"',
        "got_sha=none",
        'if [ -f "$archive" ]; then got_sha="$(sha256sum < "$archive" | cut -d\' \' -f1)"; fi',
        'if [ "$got_sha" != "$sha" ]; then',
        "  echo \"::error::$archive has sha256 $got_sha, but this run's images job made"
        ' ${sha:-no archive}: not building with it"',
        "  exit 1",
        "fi",
        'docker load --input "$archive"',
        'rm -f "$archive"',
        'got="$(docker image inspect --format \'{{.Id}}\' "$IMAGE" 2> /dev/null || true)"',
        'if [ "$got" != "$expected" ]; then',
        '  echo "::error::the builder image $IMAGE is ${got:-missing} after loading this'
        " run's archive, but its images job built $expected: not building with it\"",
        "  exit 1",
        "fi",
        'echo "builder image $IMAGE: $got, as this run\'s images job built it"',
    )


def image_build_script(matrix: str, profile: str, *, registry: bool, handoff: str = "") -> str:
    """The images job: build one builder recipe and save it, never push it (this job runs
    the repository's code: it holds no write permission).

    `handoff` (a release, or any run with `ci.image_registry`): the archive goes there, for
    the run's artifact, and the job outputs the image's ID and the archive's sha256
    (`image_<BT_SLOT>`, `archive_<BT_SLOT>`): the builds (and the push job, which alone may
    write to the registry: `workflows.image_push`) take only that archive. Otherwise (the
    cache run without a registry) into the Actions cache's directory. `registry`: skip a
    recipe whose tag the registry holds already (the cache run)."""
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
        ]
    if handoff:
        lines += [f"mkdir -p {handoff}", f'args+=(--save "{handoff}/$IMAGE_FILE")']
    else:
        lines.append(f'args+=(--save "$HOME/{layout.IMAGES_DIR.removeprefix("~/")}/$IMAGE_FILE")')
    lines.append(f'{base} "${{args[@]}}"')
    if handoff:
        lines += [
            'id="$(docker image inspect --format \'{{.Id}}\' "$IMAGE")"',
            f'sha="$(sha256sum < "{handoff}/$IMAGE_FILE" | cut -d\' \' -f1)"',
            '{ echo "image_$BT_SLOT=$id"; echo "archive_$BT_SLOT=$sha"; } >> "$GITHUB_OUTPUT"',
            'echo "builder image $IMAGE: $id, archive sha256 $sha"',
        ]
    return bash(*lines)


def prefetch_script(matrix: str, profile: str) -> str:
    """The download job: every wheel one group's builds install, into the prefetch dir."""
    return bash(
        f'export BUILDTOOLS_CACHE_DIR="$HOME/{layout.CACHE_DIR.removeprefix("~/")}"',
        _ci(matrix, "prefetch", "--profile", profile) + ' --group "$BT_GROUP"',
    )


def build_script(matrix: str, profile: str, *, isolated: bool = False) -> str:
    """One build job's script: `nox -s build` of its cells, and how to reproduce it.

    `isolated` (a release): the build reads no cache. Its cache directory is an emptied
    one of its own under RUNNER_TEMP, so the downloads come from the index into an empty
    directory (pip checks each file against the sha256 the index publishes; nothing else
    is there to install) and the compiler cache starts empty: nothing a pull request,
    `self-hosted.yml` or an earlier job on this machine wrote reaches the wheel. Other
    workflows use the runner's default cache directory, where their caches are restored.
    """
    fixed = layout.join([*layout.matrix_args(matrix), "--profile", profile])
    cache = f'"$HOME/{layout.CACHE_DIR.removeprefix("~/")}"'
    setup = (
        [
            'export BUILDTOOLS_CACHE_DIR="${RUNNER_TEMP:?}/torch-buildtools"',
            'rm -rf "$BUILDTOOLS_CACHE_DIR"',
            'mkdir -p "$BUILDTOOLS_CACHE_DIR"',
            'export PIP_CACHE_DIR="$BUILDTOOLS_CACHE_DIR/pip"',
            # nor a unit store the runner's environment names (device units of another run)
            "unset BUILDTOOLS_CCACHE_DIR BUILDTOOLS_UNITS_DIR",
            'echo "a release build reads no cache: $BUILDTOOLS_CACHE_DIR starts empty (downloads'
            " from the index, each checked against the sha256 it publishes; no compiler cache"
            ' from another run)"',
        ]
        if isolated
        # the caches the workflow restores live in the default cache dir of the runner
        else [f"export BUILDTOOLS_CACHE_DIR={cache}"]
    )
    return bash(
        *setup,
        "# BT_ONLY: the globs that select exactly this job's cells (from the plan job)",
        'read -r -a globs <<< "$BT_ONLY"',
        f"args=({fixed})",
        'for glob in "${globs[@]}"; do args+=(--only "$glob"); done',
        f"args+=({layout.join(BACKENDS[CI_BACKEND].ci_args)})",
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


def built_script() -> str:
    """A release build leg's output `wheels_<BT_LEG>`: `sha256:name` of each wheel it built."""
    return bash(
        'built=""',
        f"for wheel in {layout.WHEELHOUSE}/*.whl; do",
        '  [ -f "$wheel" ] || continue',
        '  built+="$(sha256sum "$wheel" | cut -d" " -f1):${wheel##*/} "',
        "done",
        'echo "wheels_$BT_LEG=$built" >> "$GITHUB_OUTPUT"',
        'echo "built: $built"',
    )


def smoked_script() -> str:
    """A release smoke leg's output `report_<BT_LEG>`: the sha256 of the report it wrote
    (only this leg can set it: a report counts for its family only with this digest)."""
    report = f"{layout.SMOKE_OUT}/report.json"
    return bash(
        f'if [ -f {report} ]; then sha="$(sha256sum {report} | cut -d" " -f1)"; else sha=""; fi',
        'echo "report_$BT_LEG=$sha" >> "$GITHUB_OUTPUT"',
        'echo "smoke report: ${sha:-none}"',
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
