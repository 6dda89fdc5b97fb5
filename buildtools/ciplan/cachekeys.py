"""The Actions cache keys of a build job: downloads, compiler cache and builder image.

Keys live in namespaces by trust: `bt-rel-` for what the trusted workflows (release,
caches) save, on the default branch; a pull request's builds save only their compiler
cache, under `bt-pr<number>-` in the pull request's own scope. A release restores by exact
key only (never the newest entry of a prefix), so nothing a branch or pull request wrote
under another key can be picked instead.

- Downloads (the docker backend's prefetch directory: torch, the toolkit's pip packages,
  the build requirements) are keyed by what decides their bytes: platform, torch pin,
  accelerator, toolkit pins and torch index, then the Pythons of that group. A release
  build re-checks every restored file against the sha256 its index publishes (pip
  re-downloads one that differs) before it builds offline.
- The compiler cache: with ccache, the job's directory keyed by the job and its toolchain
  (`ccache-<job>-<hash>`), the namespace prefixed by the workflow: `bt-rel-` (release,
  exact), `bt-pr<N>-…-<run>` (pull requests, their own newest). With sccache
  (`build.compiler_cache: sccache`), sccache's own GitHub Actions backend, one entry per compile keyed by sccache's
  hash of it, under SCCACHE_GHA_VERSION `bt-rel-sccache-1`: written by release builds (the
  default branch's scope), read read-only by pull requests.
- A builder image is one recipe (Dockerfile, its files, the base image by digest): the tag
  `torch-buildtools/builder:<kind>-<hash>` the docker backend computes. A release builds
  it in its own images job and hands it to the builds by artifact, checked by image ID;
  `caches.yml` saves it to the cache for pull requests.
Pure: nothing here runs a process.
"""

from __future__ import annotations

__all__ = [
    "RELEASE_NAMESPACE",
    "SCCACHE_GHA_NAMESPACE",
    "BuildKeys",
    "build_keys",
    "image_recipe",
    "image_tag",
    "prefetch_group",
    "unpinned_bases",
]

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..backends.docker.images import (
    builder_image,
    docker_dir,
    load_pins,
    pinned,
    pins_file,
    validate_image_ref,
)
from ..errors import BuildtoolsError
from ..model import BuildJob
from ..toolchain.envs import BUILD_REQUIREMENTS
from . import layout
from .labels import family_of

# what the trusted workflows save (release, caches), on the default branch
RELEASE_NAMESPACE = "bt-rel-"
# sccache's GitHub Actions cache (SCCACHE_GHA_VERSION): every entry a release writes sits
# under this version, in the default branch's scope; pull requests read it, read-only
SCCACHE_GHA_NAMESPACE = f"{RELEASE_NAMESPACE}sccache-1"


@dataclass(frozen=True, kw_only=True)
class BuildKeys:
    """What a build job restores (and the trusted workflows save)."""

    prefetch: str  # exact key of the downloads
    prefetch_restore: str  # prefix: the same pins, other Pythons (pull requests only)
    ccache: str  # `ccache-<job>-<toolchain>`, namespaced by the workflow ('' without one)
    ccache_path: str  # the job's compiler cache directory ('' without one)
    image: str  # builder image tag ('' when unknown: the job builds its own)
    image_key: str
    image_file: str  # `docker save` archive under layout.IMAGES_DIR


def _short(payload: object, n: int) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def prefetch_group(job: BuildJob, build_requires: Sequence[str] = ()) -> str:
    """The download group of a job: platform, torch, accelerator and a hash of the pins
    (`build_requires`: the project's own [build-system] requirements, downloaded as well)."""
    pins: dict[str, object] = {
        "torch": job.torch_requirement,
        "index": job.torch_index,
        "toolkit": list(job.toolkit.pip_packages) if job.toolkit else [],
        "build": list(BUILD_REQUIREMENTS),
        "platform": job.platform_tag,
    }
    if build_requires:  # (absent otherwise: the keys of projects without any stay as they were)
        pins["project"] = list(build_requires)
    accel = job.accelerator.name
    return f"{RELEASE_NAMESPACE}dl-{job.platform}-torch{job.torch}-{accel}-{_short(pins, 12)}-"


def image_recipe(job: BuildJob) -> str:
    """What decides a job's builder image tag (its accelerator and base image): jobs with
    the same recipe share one image; the release declares one image slot per recipe."""
    return f"{job.accelerator.name}|{job.image}"


def image_tag(job: BuildJob, env: Mapping[str, str]) -> str:
    """The builder image of `job` as the docker backend names it ('' without the Dockerfiles).

    Computed without a local base image ID, as on a fresh runner; a runner that has the
    base already gets another tag and builds its own image.
    """
    pins = load_pins(pins_file(env))  # a pins file that cannot be read is an error, not ''
    try:
        return builder_image(job, docker=docker_dir(env), pins=pins).tag
    except BuildtoolsError:
        return ""


def unpinned_bases(jobs: Iterable[BuildJob], env: Mapping[str, str]) -> list[str]:
    """The builder base images of `jobs` that the pins (buildtools/data/image_pins.yaml, or
    $BUILDTOOLS_IMAGE_PINS) have no digest for: a build would use them by tag."""
    pins = load_pins(pins_file(env))
    bases = {pinned(validate_image_ref(j.image, what=f"{j.id}: base image"), pins) for j in jobs}
    return sorted(b for b in bases if "@sha256:" not in b)


def build_keys(
    job: BuildJob, *, group_pythons: Iterable[str], image: str, build_requires: Sequence[str] = ()
) -> BuildKeys:
    """The cache keys of `job`; `group_pythons`: the Pythons of its download group."""
    group = prefetch_group(job, build_requires)
    suffix = image.rpartition(":")[2]
    toolchain = {
        "image": image or image_recipe(job),
        "torch": job.torch_requirement,
        "toolkit": list(job.toolkit.pip_packages) if job.toolkit else [],
        "env": [list(pair) for pair in job.env],
    }
    return BuildKeys(
        prefetch=group + _short(sorted(set(group_pythons)), 8),
        prefetch_restore=group,
        ccache=f"ccache-{job.id}-{_short(toolchain, 10)}" if job.compiler_cache == "ccache" else "",
        ccache_path=f"{layout.CACHE_DIR}/ccache/{job.id}" if job.compiler_cache == "ccache" else "",
        image=image,
        image_key=f"{RELEASE_NAMESPACE}image-{family_of(job)}-{suffix}" if image else "",
        image_file=f"builder-{suffix}.tar" if image else "",
    )
