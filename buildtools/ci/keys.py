"""The Actions cache keys of a build job: downloads, compiler cache and builder image.

- Downloads (the docker backend's prefetch directory: torch, the toolkit's pip packages,
  the build requirements) are keyed by what decides their bytes: platform, torch pin,
  accelerator, toolkit pins and torch index, then the Pythons of that group. Every build
  of one torch × accelerator shares the entry that the scheduled run on the default branch
  seeds (caches saved there are visible to every branch, tag and pull request);
  `restore-keys` falls back to the same pins with other Pythons (the toolkit wheels, the
  bulk of a CUDA download, are the same).
- The compiler cache is the plan's `ccache_key` (one per job): restored from the newest
  entry of that job, saved under a new key each run (cache entries are immutable).
- A builder image is one recipe (Dockerfile, its files, the base image by digest): the tag
  `torch-buildtools/builder:<kind>-<hash>` the docker backend computes; one job builds it,
  saves it (the Actions cache, or a registry), and every build of that recipe loads it.
Pure: nothing here runs a process.
"""

from __future__ import annotations

__all__ = ["BuildKeys", "build_keys", "image_tag", "prefetch_group", "unpinned_bases"]

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..backends.docker.images import builder_image, docker_dir, load_pins
from ..errors import BuildtoolsError
from ..model import BuildJob
from ..toolchain.envs import BUILD_REQUIREMENTS
from . import layout
from .runners import family_of


@dataclass(frozen=True, kw_only=True)
class BuildKeys:
    """What a build job restores (and the trusted workflows save)."""

    prefetch: str  # exact key of the downloads
    prefetch_restore: str  # prefix: the same pins, other Pythons
    ccache: str  # key prefix, completed by the run id ('' when the job has no compiler cache)
    ccache_path: str  # the job's compiler cache directory ('' without one)
    image: str  # builder image tag ('' when unknown: the job builds its own)
    image_key: str
    image_file: str  # `docker save` archive under layout.IMAGES_DIR


def _short(payload: object, n: int) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def prefetch_group(job: BuildJob) -> str:
    """The download group of a job: platform, torch, accelerator and a hash of the pins."""
    pins = {
        "torch": job.torch_requirement,
        "index": job.torch_index,
        "toolkit": list(job.toolkit.pip_packages) if job.toolkit else [],
        "build": list(BUILD_REQUIREMENTS),
        "platform": job.platform_tag,
    }
    accel = job.accelerator.name
    return f"bt-dl-{job.platform}-torch{job.torch}-{accel}-{_short(pins, 12)}-"


def image_tag(job: BuildJob, env: Mapping[str, str]) -> str:
    """The builder image of `job` as the docker backend names it ('' without the Dockerfiles).

    Computed without a local base image ID, as on a fresh runner; a runner that has the
    base already gets another tag and builds its own image.
    """
    try:
        directory = docker_dir(env)
        return builder_image(job, docker=directory, pins=load_pins(directory / "pins.yaml")).tag
    except BuildtoolsError:
        return ""


def unpinned_bases(jobs: Iterable[BuildJob], env: Mapping[str, str]) -> list[str]:
    """The builder base images of `jobs` that docker/pins.yaml has no digest for."""
    try:
        directory = docker_dir(env)
        pins = load_pins(directory / "pins.yaml")
        bases = {builder_image(j, docker=directory, pins=pins).base for j in jobs}
    except BuildtoolsError:
        return []
    return sorted(b for b in bases if "@sha256:" not in b)


def build_keys(job: BuildJob, *, group_pythons: Iterable[str], image: str) -> BuildKeys:
    """The cache keys of `job`; `group_pythons`: the Pythons of its download group."""
    group = prefetch_group(job)
    ccache = job.id if job.ccache else ""
    suffix = image.rpartition(":")[2]
    return BuildKeys(
        prefetch=group + _short(sorted(set(group_pythons)), 8),
        prefetch_restore=group,
        ccache=f"bt-ccache-{ccache}-" if ccache else "",
        ccache_path=f"{layout.CACHE_DIR}/ccache/{ccache}" if ccache else "",
        image=image,
        image_key=f"bt-image-{family_of(job)}-{suffix}" if image else "",
        image_file=f"builder-{suffix}.tar" if image else "",
    )
