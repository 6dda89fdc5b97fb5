"""Builder images: which Dockerfile and base a job needs, the image's name, and pins.

A job's `image` (from the knowledge base, or `accelerators.<name>.image`) is the *base*:
a manylinux builder such as `pytorch/manylinux2_28-builder:cuda13.0`. The builder image
cibuildwheel runs is `docker/<kind>.Dockerfile` FROM that base (pinned by digest when
`buildtools/data/image_pins.yaml` knows one: `pins_file`), tagged `torch-buildtools/builder:<kind><version>-<hash>`
where the hash covers the Dockerfile, the files it copies and the base reference: the
same inputs always give the same tag, and a changed input never reuses a stale image.
Pure: nothing here runs a process.
"""

from __future__ import annotations

__all__ = [
    "BUILDER_REPOSITORY",
    "CONTEXT_FILES",
    "PINS_ENV",
    "PINS_FILE",
    "BuilderImage",
    "builder_image",
    "docker_dir",
    "load_pins",
    "pinned",
    "pins_file",
    "validate_image_ref",
]

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ...errors import ConfigError, ToolMissingError
from ...knowledge.imagepins import IMAGE_PINS_FILE, load_image_pins
from ...model import Accelerator, BuildJob

BUILDER_REPOSITORY = "torch-buildtools/builder"
# The digests of the bases: a fact of buildtools/data/ (read and validated by
# knowledge.imagepins), refreshed by ci/refresh-image-pins.py; BUILDTOOLS_IMAGE_PINS names
# another file (a registry mirror's pins; the tests' stand-in registry)
PINS_FILE = IMAGE_PINS_FILE
PINS_ENV = "BUILDTOOLS_IMAGE_PINS"
# Files of docker/ that every builder Dockerfile copies (the wheels/ dir is made per build).
CONTEXT_FILES = ("install-tools.sh", "tools-requirements.txt")

# Docker's reference grammar (distribution/reference), without the rarely used IPv6 hosts:
# a first component is a registry host only with a dot, a port, or as `localhost`.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_DOMAIN = rf"(?:(?:localhost|{_LABEL}(?:\.{_LABEL})+)(?::[0-9]+)?/|{_LABEL}:[0-9]+/)"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_RE = re.compile(
    rf"^{_DOMAIN}?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)


def validate_image_ref(ref: str, *, what: str = "image") -> str:
    """`ref` when it is a plain image reference; raises ConfigError otherwise.

    Image names end up as arguments of `docker build`/`docker create`: a value starting
    with `-` would be read as an option, and whitespace or shell syntax has no place in one.
    """
    if not _IMAGE_RE.fullmatch(ref) or len(ref) > 512:
        raise ConfigError(
            f"{what} {ref!r} is not an image reference; expected [registry/]name[:tag][@sha256:…] "
            "(lowercase name components, no leading '-', no spaces)"
        )
    return ref


def docker_dir(env: Mapping[str, str]) -> Path:
    """The directory with the builder Dockerfiles: $BUILDTOOLS_DOCKER_DIR or the checkout's."""
    given = env.get("BUILDTOOLS_DOCKER_DIR")
    path = Path(given) if given else Path(__file__).resolve().parents[3] / "docker"
    if not (path / "cpu.Dockerfile").is_file():
        raise ToolMissingError(
            f"{path}: no builder Dockerfiles (cpu/cuda/rocm.Dockerfile); the docker backend "
            "runs from a torch-buildtools checkout (pip install -e .), or set "
            "BUILDTOOLS_DOCKER_DIR to its docker/ directory"
        )
    return path


def pins_file(env: Mapping[str, str]) -> Path:
    """The pins of the builder bases: $BUILDTOOLS_IMAGE_PINS, else buildtools/data's."""
    given = env.get(PINS_ENV)
    return Path(given) if given else PINS_FILE


def load_pins(path: Path) -> dict[str, str]:
    """image reference → digest, from a pins file (entries whose digest is null skipped)."""
    if not path.is_file():
        if path != PINS_FILE:
            raise ConfigError(f"{PINS_ENV}={path}: no such file")
        return {}
    rows = load_image_pins(path, check_image=validate_image_ref)  # file:line on bad content
    return {row.image: row.digest for row in rows if row.digest is not None}


def pinned(image: str, pins: Mapping[str, str]) -> str:
    """`image@digest` when a digest is known for it (and it has none yet), else `image`."""
    if "@" in image or image not in pins:
        return image
    return f"{image}@{pins[image]}"


@dataclass(frozen=True, kw_only=True)
class BuilderImage:
    """The image a job builds in: its tag, the Dockerfile and the base it is made FROM."""

    tag: str
    base: str
    kind: str  # cpu | cuda | rocm
    dockerfile: Path
    context_files: tuple[Path, ...]


def _kind_tag(accelerator: Accelerator) -> str:
    if accelerator.kind == "cpu":
        return "cpu"
    return f"{accelerator.kind}{accelerator.version}"


def builder_image(
    job: BuildJob,
    *,
    docker: Path,
    pins: Mapping[str, str],
    base_override: str | None = None,
    base_id: str | None = None,
) -> BuilderImage:
    """The builder image of `job`: Dockerfile per accelerator kind, FROM the job's image.

    `base_id` is the local image ID of the base when the engine has it: a base rebuilt
    under the same name (a local base, a re-pulled tag) then gives a new builder tag.
    """
    accel = job.accelerator
    base = validate_image_ref(base_override or job.image, what=f"{job.id}: base image")
    base = pinned(base, pins)
    dockerfile = docker / f"{accel.kind}.Dockerfile"
    files = tuple(docker / name for name in CONTEXT_FILES)
    digest = hashlib.sha256()
    for path in (dockerfile, *files):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(b"BASE=" + base.encode())
    if base_id:
        digest.update(b"ID=" + base_id.encode())
    tag = f"{BUILDER_REPOSITORY}:{_kind_tag(accel)}-{digest.hexdigest()[:12]}"
    return BuilderImage(
        tag=tag, base=base, kind=accel.kind, dockerfile=dockerfile, context_files=files
    )
