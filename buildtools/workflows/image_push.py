"""The push job's `run:` scripts: bash and the runner image's own tools, nothing else.

With `ci.image_registry`, the builder images go to a registry, which takes a token with
`packages: write`. The job that builds an image runs the repository's code (nox, the
Dockerfiles), so it holds only read permissions: it saves the image (`docker save`) as
an artifact of the run and outputs the archive's sha256 and the image's ID. A separate
job, `push-images`, holds `packages: write` and checks nothing out, installs nothing and
runs no repository code: bash, coreutils (`sha256sum`), `jq` and `docker` of the hosted
runner image, beside actions pinned by commit. It is cibuildwheel's release shape (the
job that can write only downloads, checks and publishes), as the signing job is
(`workflows.signing`).

- `image_verify_script`: the archive's sha256 is the one the images job output (a job
  output can be set only by its job; the run's artifacts by any of its jobs), then
  `docker load`, then the loaded image's ID is the one the images job output. Anything
  else pushes nothing. Every value is first checked against the fixed form the plan
  gives it (a slot number, an image name, an archive's file name).
- `image_push_script`: tag the checked image for the registry, push it, and output the
  registry's digest (`image_<slot>`), which a release's builds pull by.
"""

from __future__ import annotations

__all__ = ["PUSH_JOB", "image_push_script", "image_verify_script"]

from .scripts import bash

PUSH_JOB = "push-images"
# an image the plan names (`torch-buildtools/builder:cpu-<hash>`) and its archive's file
_IMAGE = "[a-z0-9][a-z0-9._/-]*:[A-Za-z0-9_][A-Za-z0-9._-]*"
_ARCHIVE = "[A-Za-z0-9_][A-Za-z0-9._-]*[.]tar"


def _fail(message: str) -> list[str]:
    return [f'  echo "::error::{message}"', "  exit 1"]


def image_verify_script(directory: str) -> str:
    """Check this run's archive of one builder image (in `directory`, from the images job's
    artifact) against the images job's outputs (BT_IMAGES, slot BT_SLOT), then load it and
    check its ID. Outputs `push=true` when there is an image to push."""
    pick = 'jq -r --arg k "$1_$BT_SLOT" \'.[$k] // ""\' <<< "${BT_IMAGES:-"{}"}"'
    return bash(
        f"if ! [[ $BT_SLOT =~ ^[1-9][0-9]*$ && $IMAGE =~ ^{_IMAGE}$ &&"
        f" $IMAGE_FILE =~ ^{_ARCHIVE}$ ]]; then",
        *_fail(
            "not a builder image of the plan: slot ${BT_SLOT@Q}, image ${IMAGE@Q}, "
            "archive ${IMAGE_FILE@Q}"
        ),
        "fi",
        f"output() {{ {pick}; }}",
        'id="$(output image)"',
        'sha="$(output archive)"',
        'if [ -z "$id" ] && [ -z "$sha" ]; then',
        '  echo "::notice::the images job made no archive of $IMAGE (in the registry already,'
        ' or its build failed): nothing to push"',
        "  exit 0",
        "fi",
        "if ! [[ $id =~ ^sha256:[0-9a-f]{64}$ && $sha =~ ^[0-9a-f]{64}$ ]]; then",
        *_fail(
            "the images job output no image ID and archive sha256 for $IMAGE (${id@Q}, "
            "${sha@Q}): nothing is pushed"
        ),
        "fi",
        f'archive="{directory}/$IMAGE_FILE"',
        'if [ -L "$archive" ] || [ ! -f "$archive" ]; then',
        *_fail("$archive: this run's artifact holds no archive of $IMAGE: nothing is pushed"),
        "fi",
        'got="$(sha256sum < "$archive" | cut -d\' \' -f1)"',
        'if [ "$got" != "$sha" ]; then',
        *_fail(
            "$archive has sha256 $got, but the images job made $sha: something else "
            "wrote the artifact; nothing is pushed"
        ),
        "fi",
        'docker load --input "$archive"',
        'rm -f "$archive"',
        'loaded="$(docker image inspect --format \'{{.Id}}\' "$IMAGE" 2> /dev/null || true)"',
        'if [ "$loaded" != "$id" ]; then',
        *_fail(
            "$IMAGE is ${loaded:-missing} after loading the archive, but the images job "
            "built $id: nothing is pushed"
        ),
        "fi",
        'echo "push=true" >> "$GITHUB_OUTPUT"',
        "echo \"builder image $IMAGE: $id, archive sha256 $sha, as this run's images job made"
        ' them"',
    )


def image_push_script() -> str:
    """Push the checked image (IMAGE) as `REGISTRY:<its tag>`; output its registry digest
    as `image_<BT_SLOT>`."""
    return bash(
        'ref="$REGISTRY:${IMAGE#*:}"',
        'docker tag "$IMAGE" "$ref"',
        'docker push "$ref"',
        "digest=\"$(docker image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}'"
        ' "$ref" | grep -m1 -x -E "$REGISTRY@sha256:[0-9a-f]{64}" || true)"',
        'if [ -z "$digest" ]; then',
        *_fail("the registry gave no digest for $ref"),
        "fi",
        'echo "image_$BT_SLOT=$digest" >> "$GITHUB_OUTPUT"',
        'echo "pushed $IMAGE as $digest"',
    )
