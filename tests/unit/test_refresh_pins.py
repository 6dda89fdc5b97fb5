"""ci/refresh-image-pins.py: image names, the registry's digest over HTTP, and --check (no
socket: a fake opener answers as Docker Hub does)."""

from __future__ import annotations

import importlib.util
import io
import json
import urllib.error
import urllib.request
from email.message import Message
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "ci" / "refresh-image-pins.py"
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def refresh() -> ModuleType:
    spec = importlib.util.spec_from_file_location("refresh_pins", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_split_image(refresh: ModuleType) -> None:
    assert refresh.split_image("pytorch/manylinux2_28-builder:cuda13.0") == (
        "registry-1.docker.io",
        "pytorch/manylinux2_28-builder",
        "cuda13.0",
    )
    assert refresh.split_image("quay.io/pypa/manylinux2014_aarch64:latest") == (
        "quay.io",
        "pypa/manylinux2014_aarch64",
        "latest",
    )
    assert refresh.split_image("ubuntu") == ("registry-1.docker.io", "library/ubuntu", "latest")
    assert refresh.split_image("localhost:5000/x/y:1") == ("localhost:5000", "x/y", "1")


class _Resp(io.BytesIO):
    def __init__(self, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        super().__init__(body)
        self.headers = Message()
        for k, v in (headers or {}).items():
            self.headers[k] = v


def test_registry_digest_with_an_anonymous_token(refresh: ModuleType) -> None:
    seen: list[tuple[str, str, str | None, str | None]] = []

    def opener(request: urllib.request.Request) -> Any:
        seen.append(
            (request.get_method(), request.full_url, request.get_header("Authorization"),
             request.get_header("Accept"))
        )  # fmt: skip
        if request.full_url.startswith("https://auth.docker.io/token"):
            return _Resp(json.dumps({"token": "anon"}).encode())
        if request.get_header("Authorization") != "Bearer anon":
            headers = Message()
            headers["WWW-Authenticate"] = (
                'Bearer realm="https://auth.docker.io/token",service="registry.docker.io"'
            )
            raise urllib.error.HTTPError(request.full_url, 401, "auth", headers, None)
        return _Resp(headers={"Docker-Content-Digest": DIGEST})

    assert refresh.registry_digest("pytorch/manylinux2_28-builder:cpu", opener=opener) == DIGEST
    head, token, again = seen
    assert head[:2] == (
        "HEAD",
        "https://registry-1.docker.io/v2/pytorch/manylinux2_28-builder/manifests/cpu",
    )
    assert "manifest.list" in (head[3] or "")  # the multi-arch digest first
    assert "scope=repository%3Apytorch%2Fmanylinux2_28-builder%3Apull" in token[1]
    assert again[2] == "Bearer anon"


def test_registry_digest_unreachable(refresh: ModuleType) -> None:
    def opener(request: urllib.request.Request) -> Any:
        raise urllib.error.URLError("no route")

    assert refresh.registry_digest("pytorch/x:1", opener=opener) is None


def test_check_reports_missing_and_unpinned(refresh: ModuleType) -> None:
    old = {"a:1": {"digest": DIGEST}, "b:1": {"digest": None}, "gone:1": {"digest": DIGEST}}
    assert refresh.check(old, ["a:1", "b:1", "new:1"], online=False) == [
        "new:1: not in image_pins.yaml",
        "gone:1: in image_pins.yaml, no longer named by the knowledge base",
        "b:1: no digest (used by tag)",
    ]


def test_the_committed_list_is_the_knowledge_bases(refresh: ModuleType) -> None:
    """`--list`/`--check` read the knowledge base's images (they crashed on a str where an
    Accelerator is due); the committed file lists exactly those, in that order."""
    from buildtools.knowledge.imagepins import IMAGE_PINS_FILE, load_image_pins

    assert refresh.PINS == IMAGE_PINS_FILE
    assert refresh.kb_images() == [pin.image for pin in load_image_pins()]
    assert refresh.check(refresh.read_old(IMAGE_PINS_FILE), refresh.kb_images(), online=False) == [
        f"{image}: no digest (used by tag)" for image in refresh.kb_images()
    ]


def test_old_rows_are_read_through_the_validating_loader(
    refresh: ModuleType, tmp_path: Path
) -> None:
    from buildtools.errors import ConfigError

    pins = tmp_path / "pins.yaml"
    assert refresh.read_old(pins) == {}  # none yet: every row is new
    pins.write_text(f"pins:\n- image: a:1\n  digest: '{DIGEST}'\n  checked: 2026-12-01\n")
    assert refresh.read_old(pins) == {"a:1": {"digest": DIGEST, "checked": "2026-12-01"}}
    pins.write_text("pins:\n- image: a:1\n  digest: 'sha256:zz'\n")
    with pytest.raises(ConfigError, match=rf"^{pins}:3: pins\[0\] \(image a:1\): digest: "):
        refresh.read_old(pins)
