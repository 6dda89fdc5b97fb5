"""knowledge.imagepins: buildtools/data/image_pins.yaml validated at load (one line per bad
content: file:line, key, what is allowed), and the builder image key following the pins'
content through the reader every plan uses (`ciplan.cachekeys.image_tag`)."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pytest
from fixtures.factories import planned_job

from buildtools.backends.docker.images import PINS_ENV, PINS_FILE, load_pins, validate_image_ref
from buildtools.ciplan.cachekeys import image_tag
from buildtools.errors import ConfigError, ExitCode
from buildtools.knowledge.imagepins import IMAGE_PINS_FILE, load_image_pins

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
CPU = "pytorch/manylinux2_28-builder:cpu"


def test_the_committed_pins_are_a_fact_of_buildtools_data() -> None:
    """With the other facts, read by the one loader; no pins file left in docker/."""
    assert IMAGE_PINS_FILE == PINS_FILE == REPO / "buildtools" / "data" / "image_pins.yaml"
    assert not (DOCKER / "pins.yaml").exists()
    rows = load_image_pins(check_image=validate_image_ref)
    assert len(rows) >= 30 and len({r.image for r in rows}) == len(rows)
    assert any(r.image == CPU for r in rows)
    # no registry was reachable where this was written: every digest is null
    assert {(r.digest, r.checked) for r in rows} == {(None, None)}


def test_rows_are_read_with_their_types(tmp_path: Path) -> None:
    pins = tmp_path / "pins.yaml"
    pins.write_text(
        f"# a comment\npins:\n- image: {CPU}\n  digest: '{DIGEST}'\n  checked: 2026-12-01\n"
        "- image: other:1\n  digest:\n  checked:\n"
    )
    first, second = load_image_pins(pins)
    assert (first.image, first.digest, first.checked) == (CPU, DIGEST, datetime.date(2026, 12, 1))
    assert (second.image, second.digest, second.checked) == ("other:1", None, None)
    assert load_pins(pins) == {CPU: DIGEST}  # a null digest: used by tag
    for empty in ("", "pins:\n", "pins: []\n"):
        pins.write_text(empty)
        assert load_image_pins(pins) == ()


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (f"pins:\n- image: a:1\n  digest: '{DIGEST}'\n- image: b:1\n  digest: sha256:zz\n", 5,
         "pins[1] (image b:1): digest: expected sha256:<64 lowercase hex digits>, or null"),
        (f"pins:\n- image: a:1\n- image: '-x'\n  digest: '{DIGEST}'\n", 3,
         "pins[1] (image -x): image: image '-x' is not an image reference"),
        ("pins:\n- image: a:1\n- image: a:1\n", 3,
         "pins[1] (image a:1): image: listed twice; one row per image"),
        ("pins:\n- image: a:1\n  sha: x\n", 3,
         "pins[0] (image a:1): sha: unknown key; a row is image: NAME[:TAG], digest:"),
        ("pins:\n- digest:\n", 2, "pins[0]: image: missing; a row is image:"),
        ("pins:\n- image: a:1\n  checked: yesterday\n", 3,
         "pins[0] (image a:1): checked: expected the day the digest was read, YYYY-MM-DD"),
        ("pins:\n- a:1\n", 2, "pins[0]: expected a row; a row is image:"),
        ("pins: 3\n", 1, "pins: expected a list of rows (image, digest, checked)"),
        ("- image: a:1\n", 1, "expected one top-level key 'pins' with a list of rows"),
        ("pins: []\nimages: []\n", 1, "expected one top-level key 'pins'"),
        ("pins: [\n", 2, "not valid YAML: expected the node content"),
    ],
)  # fmt: skip
def test_bad_content_is_one_line_naming_file_line_and_key(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    pins = tmp_path / "pins.yaml"
    pins.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_pins(pins)  # the docker backend's and the plans' reader
    error = str(info.value)
    assert "\n" not in error and info.value.exit_code == ExitCode.CONFIG
    assert error.startswith(f"{pins}:{line}: {message}"), error
    assert error.endswith(
        "; fix the file (python ci/refresh-image-pins.py writes the committed one)"
    )


def test_unreadable_pins_are_one_line(tmp_path: Path) -> None:
    binary = tmp_path / "pins.yaml"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(binary))}: not UTF-8 text"):
        load_image_pins(binary)
    with pytest.raises(ConfigError, match=r"cannot read the image pins: .*a directory"):
        load_image_pins(tmp_path)
    with pytest.raises(ConfigError, match=r"BUILDTOOLS_IMAGE_PINS=.*: no such file"):
        load_pins(tmp_path / "missing.yaml")


def test_the_builder_image_key_follows_the_pins_content(tmp_path: Path) -> None:
    """A pin change changes the image key a plan names (its cache key, the image built);
    the same pins written otherwise (comments, order, the day checked) do not."""
    job = planned_job("torch2.13.0-cpu-cp311")
    assert job.image == CPU
    pins = tmp_path / "pins.yaml"
    env = {PINS_ENV: str(pins), "BUILDTOOLS_DOCKER_DIR": str(DOCKER)}

    def key(text: str) -> str:
        pins.write_text(text)
        tag = image_tag(job, env)
        assert tag.startswith("torch-buildtools/builder:cpu-")
        return tag

    unpinned = key(f"pins:\n- image: {CPU}\n  digest:\n")
    assert key("pins: []\n") == unpinned == image_tag(job, {"BUILDTOOLS_DOCKER_DIR": str(DOCKER)})
    pinned = key(f"pins:\n- image: {CPU}\n  digest: '{DIGEST}'\n")
    assert pinned != unpinned
    assert key(f"pins:\n- image: {CPU}\n  digest: '{OTHER}'\n") not in (pinned, unpinned)
    same = (
        f"# refreshed\npins:\n- image: other:1\n  digest: '{OTHER}'\n"
        f"- checked: 2026-12-01\n  digest: '{DIGEST}'\n  image: {CPU}\n"
    )
    assert key(same) == pinned
    # another base's pin does not move this job's image
    assert (
        key(f"pins:\n- image: {CPU}\n  digest: '{DIGEST}'\n- image: x:1\n  digest: '{OTHER}'\n")
        == pinned
    )
