"""What a build job brings in besides the source: its builder image, its downloads, its
compiler cache; and the jobs that make them (images, prefetch). Per workflow, by trust:

- release: reads no cache at all. The builder image comes from this run's `images` job
  (an artifact, or the registry by digest), checked against the image ID that job output
  (`image_<slot>`); without one (the job failed) the build makes its own from the tag's
  Dockerfiles. The build runs in an emptied cache directory of its own (`build_script`):
  its downloads come from the index into an empty directory, pip checking each file
  against the sha256 the index publishes, and its compiler cache starts empty (only what
  this build compiles is in it). Nothing is saved: a cache a pull request or
  `self-hosted.yml` could write is never what a release reads.
- pull requests: the images and downloads the scheduled `caches.yml` saved (read only),
  and the compiler cache: sccache's Actions backend (read-write: its writes land in the
  pull request's own scope), or ccache's directory (`bt-pr<number>-…`, in that scope).
- self-hosted.yml (a branch's code, run with the default branch's cache scope): images and
  downloads read only, no compiler cache at all, nothing saved.
- caches.yml (scheduled, default branch): saves the images and downloads, for pull
  requests and self-hosted.yml only.
"""

from __future__ import annotations

__all__ = [
    "build_inputs",
    "image_outputs",
    "images_job",
    "prefetch_job",
    "push_images_job",
    "registry_login",
]

from typing import Any

from ..ciplan import layout
from ..ciplan.cachekeys import SCCACHE_GHA_NAMESPACE
from .image_push import PUSH_JOB, image_push_script, image_verify_script
from .jobparts import WorkflowSpec
from .scripts import (
    free_disk_script,
    image_build_script,
    image_check_script,
    image_load_script,
    image_pull_script,
    prefetch_script,
)

_PREFETCH_PATH = f"{layout.CACHE_DIR}/prefetch"
_IMAGE_PATH = f"{layout.IMAGES_DIR}/${{{{ matrix.image_file }}}}"
# the release's images travel as artifacts of the run, in the workspace
RUN_IMAGES = "builder-image"
RUN_ID = "${{ github.run_id }}"
_PR_NAMESPACE = "bt-pr${{ github.event.pull_request.number }}-"
# the Actions cache service, as the runner gives it to JavaScript actions (sccache 0.16's
# backend reads the results service's URL and the runtime token)
SERVICE_VARS = ("ACTIONS_RESULTS_URL", "ACTIONS_RUNTIME_TOKEN", "ACTIONS_CACHE_URL")


def _flag(job: str) -> str:
    return f"needs.plan.outputs.{layout.run_flag(job)} == 'true'"


def registry_login(wf: WorkflowSpec) -> list[dict[str, Any]]:
    registry = wf.mf.matrix.ci.image_registry
    if not registry:
        return []
    host = registry.split("/", 1)[0]
    return [
        {
            "name": f"Log in to {host}",
            "env": {"REGISTRY_HOST": host, "REGISTRY_TOKEN": "${{ github.token }}"},
            "run": 'echo "$REGISTRY_TOKEN" | docker login "$REGISTRY_HOST" '
            '--username "$GITHUB_ACTOR" --password-stdin\n',
        }
    ]


def _release_image(wf: WorkflowSpec) -> list[dict[str, Any]]:
    """This run's image of the job's recipe, checked by the ID the images job output."""
    # every slot's ID; the script picks this job's (no computed expression index)
    expected = {"BT_IMAGES": "${{ toJSON(needs.images.outputs) }}"}
    expected |= {"BT_SLOT": "${{ matrix.image_slot }}", "IMAGE": "${{ matrix.image }}"}
    given = "matrix.image_slot != 0"
    if wf.mf.matrix.ci.image_registry:
        # the digest the push job output: it pushed only the archive the images job made
        expected["BT_IMAGES"] = f"${{{{ toJSON(needs.{PUSH_JOB}.outputs) }}}}"
        return [
            {
                "name": "Pull this run's builder image by digest",
                "if": given,
                "env": expected,
                "run": image_pull_script(by_digest=True),
            }
        ]
    return [
        {
            "name": "Download this run's builder image",
            "if": given,
            # missing when the images job failed for this recipe: the build makes its own
            "continue-on-error": True,
            "uses": wf.pins.uses("actions/download-artifact"),
            "with": {"name": f"{RUN_IMAGES}-${{{{ matrix.image_slot }}}}", "path": RUN_IMAGES},
        },
        {
            "name": "Load the builder image and check its ID",
            "if": given,
            "env": {**expected, "IMAGE_FILE": "${{ matrix.image_file }}"},
            "run": image_check_script(RUN_IMAGES),
        },
    ]


def _cached_image(wf: WorkflowSpec) -> list[dict[str, Any]]:
    """The image caches.yml saved (pull requests and self-hosted.yml: nothing published)."""
    registry = wf.mf.matrix.ci.image_registry
    if registry:
        return [
            {
                "name": "Pull the builder image",
                "if": "matrix.image != ''",
                "env": {"IMAGE": "${{ matrix.image }}", "REGISTRY": registry},
                "run": image_pull_script(by_digest=False),
            }
        ]
    return [
        {
            "name": "Restore the builder image",
            "id": "image",
            "if": "matrix.image != ''",
            "uses": wf.pins.uses("actions/cache", "restore"),
            "with": {"path": _IMAGE_PATH, "key": "${{ matrix.image_key }}"},
        },
        {
            "name": "Load the builder image",
            "if": "steps.image.outputs.cache-hit == 'true'",
            "env": {"IMAGE_FILE": "${{ matrix.image_file }}"},
            "run": image_load_script(),
        },
    ]


def _downloads(wf: WorkflowSpec) -> list[Any]:
    """The downloads caches.yml saved (the same pins, these Pythons or others): read only."""
    return [
        {
            "name": "Restore downloads (torch, toolkit, build requirements)",
            "id": "downloads",
            "uses": wf.pins.uses("actions/cache", "restore"),
            "with": {
                "path": _PREFETCH_PATH,
                "key": "${{ matrix.prefetch_key }}",
                "restore-keys": "${{ matrix.prefetch_restore }}",
            },
        }
    ]


def _sccache_gha(wf: WorkflowSpec) -> list[Any]:
    """sccache's GitHub Actions backend for a pull request's builds, read-write: the cache
    service scopes its writes to the pull request (`refs/pull/N/merge`), which no release
    and no other pull request reads. Releases and everything else get none."""
    if wf.kind != layout.PR_NAME:
        return []
    mode = "READ_WRITE"
    # the cache service's URL and token reach JavaScript actions only; sccache (in the
    # build, and in its container: the docker backend passes these by name) needs them
    script = "\n".join(
        [
            *(f"core.exportVariable('{name}', process.env.{name} || '');" for name in SERVICE_VARS),
            "core.exportVariable('SCCACHE_GHA_ENABLED', 'on');",
            f"core.exportVariable('SCCACHE_GHA_VERSION', '{SCCACHE_GHA_NAMESPACE}');",
            f"core.exportVariable('SCCACHE_GHA_RW_MODE', '{mode}');",
        ]
    )
    return [
        {
            "name": f"Compiler cache: sccache on the Actions cache ({mode.lower().replace('_', '-')})",
            "uses": wf.pins.uses("actions/github-script"),
            "with": {"script": script + "\n"},
        }
    ]


def _compiler_cache(wf: WorkflowSpec) -> tuple[list[Any], list[Any]]:
    """With sccache (the matrix's build.compiler_cache): its Actions backend (`_sccache_gha`).
    ccache: a pull request's own namespace and scope, the newest entry of this pull
    request. A release none: compiler-cache objects cannot be verified, so a release
    compiles everything itself (what that costs: docs/ci.md, Caches). Others: none."""
    tool = wf.mf.matrix.build.cache_tool
    if tool is None:
        return [], []
    if tool == "sccache":
        return _sccache_gha(wf), []
    if wf.kind != layout.PR_NAME:
        return [], []
    prefix = f"{_PR_NAMESPACE}${{{{ matrix.ccache_key }}}}-"
    key = prefix + RUN_ID
    restore_with = {"path": "${{ matrix.ccache_path }}", "key": key, "restore-keys": prefix}
    restore = {
        "name": "Restore the compiler cache",
        "id": "ccache",
        "if": "matrix.ccache_key != ''",
        "uses": wf.pins.uses("actions/cache", "restore"),
        "with": restore_with,
    }
    save = {
        # also after a failed build: what compiled is still worth keeping
        "name": "Save the compiler cache",
        "if": "always() && matrix.ccache_key != ''",
        "uses": wf.pins.uses("actions/cache", "save"),
        "with": {"path": "${{ matrix.ccache_path }}", "key": key},
    }
    return [restore], [save]


def build_inputs(wf: WorkflowSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(steps before the build, steps after it) of a build job in this workflow: a
    release's this run's image only (no cache read, none saved)."""
    if wf.kind == layout.RELEASE_NAME:
        return [*registry_login(wf), *_release_image(wf)], []
    downloads = _downloads(wf)
    ccache, ccache_saved = _compiler_cache(wf)
    return [*registry_login(wf), *_cached_image(wf), *downloads, *ccache], ccache_saved


def image_outputs(count: int, *, archives: bool = True) -> dict[str, str]:
    """The images job's outputs: per slot, the image ID and its archive's sha256 (the
    push job's: the registry digest alone, `archives` False)."""
    names = ("image", "archive") if archives else ("image",)
    return {
        f"{name}_{n}": f"${{{{ steps.image.outputs.{name}_{n} }}}}"
        for n in range(1, count + 1)
        for name in names
    }


def images_job(wf: WorkflowSpec, profile: str, *, slots: int = 0) -> dict[str, Any]:
    """One job per builder recipe, which runs the repository's code and so holds only read
    permissions. A release builds each anew; caches.yml builds what the cache (or the
    registry) lacks. Where the image goes on (a release's builds, or `ci.image_registry`
    through the push job), it is saved as an artifact of the run and the job outputs its ID
    and the archive's sha256 per slot (`slots` outputs); else it is saved in the cache."""
    registry = wf.mf.matrix.ci.image_registry
    release = wf.kind == layout.RELEASE_NAME
    handoff = RUN_IMAGES if release or registry else ""
    env = {
        "BT_ONLY": "${{ matrix.only }}",
        "IMAGE": "${{ matrix.image }}",
        "IMAGE_FILE": "${{ matrix.image_file }}",
    }
    steps: list[dict[str, Any]] = [
        wf.checkout(),
        {
            "name": "Free disk space for the builder image",
            "if": "matrix.family != 'cpu' && runner.environment == 'github-hosted'",
            "run": free_disk_script(),
        },
        wf.setup_python(),
        wf.install_tools(),
        *registry_login(wf),
    ]
    if registry:
        env["REGISTRY"] = registry
    if handoff:
        env["BT_SLOT"] = "${{ matrix.image_slot }}"
        steps += [
            {
                "name": "Build the builder image",
                "id": "image",
                "env": env,
                "run": image_build_script(
                    wf.matrix, profile, registry=bool(registry) and not release, handoff=handoff
                ),
            },
            {
                "name": "Upload the builder image (this run's "
                + ("builds load it" if not registry else "push job pushes it")
                + ")",
                "uses": wf.pins.uses("actions/upload-artifact"),
                "with": {
                    "name": f"{RUN_IMAGES}-${{{{ matrix.image_slot }}}}",
                    "path": f"{RUN_IMAGES}/${{{{ matrix.image_file }}}}",
                    # the cache run built nothing when the registry holds the image already
                    "if-no-files-found": "error" if release else "ignore",
                    "retention-days": 1,
                    "compression-level": 1,
                },
            },
        ]
    else:
        steps += [
            {
                "name": "Look for the builder image in the cache",
                "id": "cached",
                "uses": wf.pins.uses("actions/cache", "restore"),
                "with": {
                    "path": _IMAGE_PATH,
                    "key": "${{ matrix.image_key }}",
                    "lookup-only": True,
                },
            },
            {
                "name": "Build the builder image",
                "if": "steps.cached.outputs.cache-hit != 'true'",
                "env": env,
                "run": image_build_script(wf.matrix, profile, registry=False),
            },
            {
                "name": "Save the builder image",
                "if": "steps.cached.outputs.cache-hit != 'true'",
                "uses": wf.pins.uses("actions/cache", "save"),
                "with": {"path": _IMAGE_PATH, "key": "${{ matrix.image_key }}"},
            },
        ]
    # read only: this job runs the repository's code (the registry: to read what is there)
    permissions = {"contents": "read"}
    if registry:
        permissions["packages"] = "read"
    job: dict[str, Any] = {
        "name": "image ${{ matrix.image }}",
        "needs": "plan",
        "if": _flag("images"),
        "runs-on": "${{ matrix.runner }}",
        "timeout-minutes": layout.IMAGE_TIMEOUT,
        "permissions": permissions,
    }
    if handoff:
        job["outputs"] = image_outputs(slots)
    job["strategy"] = {
        "fail-fast": False,
        "matrix": "${{ fromJSON(needs.plan.outputs.images) }}",
    }
    job["steps"] = steps
    return job


def push_images_job(wf: WorkflowSpec, *, slots: int) -> dict[str, Any]:
    """With `ci.image_registry`: the one job that may write to the registry. It checks
    nothing out, installs nothing and runs no repository code (`workflows.image_push`):
    per recipe, this run's archive checked against the images job's outputs, loaded,
    checked by ID, pushed; its registry digest is the job output `image_<slot>`."""
    registry = wf.mf.matrix.ci.image_registry or ""
    checked = "steps.load.outputs.push == 'true'"
    image = {"IMAGE": "${{ matrix.image }}", "BT_SLOT": "${{ matrix.image_slot }}"}
    login = [{**step, "if": checked} for step in registry_login(wf)]
    return {
        "name": "push ${{ matrix.image }}",
        "needs": ["plan", "images"],
        # an images leg that failed leaves its slot without output: that leg pushes nothing
        "if": f"${{{{ !cancelled() && needs.plan.result == 'success' && {_flag('images')} }}}}",
        "runs-on": wf.control,
        "timeout-minutes": layout.IMAGE_TIMEOUT,
        "permissions": {"packages": "write"},
        "outputs": image_outputs(slots, archives=False),
        "strategy": {
            "fail-fast": False,
            "matrix": "${{ fromJSON(needs.plan.outputs.images) }}",
        },
        "steps": [
            {
                "name": "Free disk space for the builder image",
                "if": "matrix.family != 'cpu'",
                "run": free_disk_script(),
            },
            {
                "name": "Download this run's builder image",
                # missing when the images job built nothing for this recipe
                "continue-on-error": True,
                "uses": wf.pins.uses("actions/download-artifact"),
                "with": {"name": f"{RUN_IMAGES}-${{{{ matrix.image_slot }}}}", "path": RUN_IMAGES},
            },
            {
                "name": "Check the archive and the image against the images job's outputs",
                "id": "load",
                "env": {
                    "BT_IMAGES": "${{ toJSON(needs.images.outputs) }}",
                    **image,
                    "IMAGE_FILE": "${{ matrix.image_file }}",
                },
                "run": image_verify_script(RUN_IMAGES),
            },
            *login,
            {
                "name": "Push the builder image",
                "id": "image",
                "if": checked,
                "env": {**image, "REGISTRY": registry},
                "run": image_push_script(),
            },
        ],
    }


def prefetch_job(wf: WorkflowSpec, profile: str) -> dict[str, Any]:
    """One job per download group: what its builds install, saved for them to restore."""
    return {
        "name": "downloads ${{ matrix.prefetch_key }}",
        "needs": "plan",
        "if": _flag("prefetch"),
        "runs-on": wf.control,
        "timeout-minutes": layout.PREFETCH_TIMEOUT,
        "permissions": {"contents": "read"},
        "strategy": {"fail-fast": False, "matrix": "${{ fromJSON(needs.plan.outputs.prefetch) }}"},
        "steps": [
            wf.checkout(),
            wf.setup_python("${{ matrix.python_versions }}"),
            wf.install_tools(),
            {
                "name": "Restore the downloads",
                "id": "downloads",
                "uses": wf.pins.uses("actions/cache", "restore"),
                "with": {"path": _PREFETCH_PATH, "key": "${{ matrix.prefetch_key }}"},
            },
            {
                "name": "Download (buildtools ci prefetch)",
                "if": "steps.downloads.outputs.cache-hit != 'true'",
                "env": {"BT_GROUP": "${{ matrix.prefetch_key }}"},
                "run": prefetch_script(wf.matrix, profile),
            },
            {
                "name": "Save the downloads",
                "if": "steps.downloads.outputs.cache-hit != 'true'",
                "uses": wf.pins.uses("actions/cache", "save"),
                "with": {"path": _PREFETCH_PATH, "key": "${{ matrix.prefetch_key }}"},
            },
        ],
    }
