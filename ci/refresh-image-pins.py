#!/usr/bin/env python3
"""Refresh buildtools/data/image_pins.yaml: the digest of every builder base the knowledge
base names (the facts live with the others, in buildtools/data/).

    python ci/refresh-image-pins.py            # ask the registry (needs network access)
    python ci/refresh-image-pins.py --list     # only (re)write the list; digests kept as they are
    python ci/refresh-image-pins.py --check    # exit 1 when an image lacks a digest or the list
                                               # is out of date (offline; add --online to also
                                               # compare every digest with the registry)

Digests come from `docker buildx imagetools inspect IMAGE --format '{{json .Manifest}}'`
(the manifest list's digest: the same on every architecture), or from
`skopeo inspect --raw docker://IMAGE` hashed, or, with neither tool, from the registry's
HTTP API (an anonymous pull token, then `HEAD /v2/<name>/manifests/<tag>` asking for the
manifest list or OCI index: its `Docker-Content-Digest`). The docker backend then builds
FROM `IMAGE@sha256:…`, so a re-pushed tag cannot change a build silently; a release plan
stops on any base without a digest (`buildtools ci matrix --workflow release`, exit 4),
naming this script.

Not run where no registry is reachable (the machine this was written on): the pins
there are null; pull requests then build from the tag (their plan summary says so), and
a release stops until the pins are filled.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import io
import json
import re
import shutil
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from buildtools.backends.docker.images import validate_image_ref
from buildtools.errors import BuildtoolsError
from buildtools.files import write_atomic
from buildtools.knowledge import load_knowledge
from buildtools.knowledge.imagepins import IMAGE_PINS_FILE, load_image_pins
from buildtools.model import Accelerator
from buildtools.process import SubprocessRunner

PINS = IMAGE_PINS_FILE
HEADER = """\
# Digests of the builder bases named by buildtools/data/images.yaml, one per image the
# knowledge base can produce. Written by ci/refresh-image-pins.py; `digest: null` means no
# digest was known when it last ran: a pull request then builds FROM the tag, and a release
# plan stops (a re-pushed tag would change what it builds).
"""


def kb_images() -> list[str]:
    """Every base image the knowledge base names for some torch × accelerator × platform."""
    kb = load_knowledge()
    images: set[str] = set()
    for release in kb.torch.values():
        torch = release.patches[-1]
        accels = ["cpu"] + [f"cu{c.replace('.', '')}" for c in release.cuda]
        accels += [f"rocm{r}" for r in release.rocm]
        for platform in ("linux_x86_64", "linux_aarch64"):
            for accel in accels:
                try:
                    images.add(kb.builder_image(torch, Accelerator.parse(accel), platform))
                except (LookupError, ValueError):
                    continue
    return sorted(images)


# Manifest lists / OCI indexes first: their digest is the same on every architecture.
_ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
Opener = Callable[[urllib.request.Request], Any]


def split_image(image: str) -> tuple[str, str, str]:
    """`IMAGE` → (registry host, repository, tag): Docker Hub's names get `library/`."""
    name, _, tag = (
        image.rpartition(":") if ":" in image.rsplit("/", maxsplit=1)[-1] else (image, "", "latest")
    )
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, repo = first, rest
    else:
        host, repo = "registry-1.docker.io", name
    if host == "registry-1.docker.io" and "/" not in repo:
        repo = f"library/{repo}"
    return host, repo, tag or "latest"


def _challenge(header: str) -> dict[str, str]:
    """`Bearer realm="…",service="…",scope="…"` → its fields."""
    return dict(re.findall(r'(\w+)="([^"]*)"', header))


def registry_digest(image: str, *, opener: Opener = urllib.request.urlopen) -> str | None:
    """The digest the registry serves for `image`, over its HTTP API (None: not found)."""
    host, repo, tag = split_image(image)
    url = f"https://{host}/v2/{repo}/manifests/{tag}"
    headers = {"Accept": _ACCEPT}
    for _ in range(2):
        request = urllib.request.Request(url, method="HEAD", headers=headers)
        try:
            with opener(request) as resp:
                digest = resp.headers.get("Docker-Content-Digest")
                return digest if digest and _DIGEST_RE.match(digest) else None
        except urllib.error.HTTPError as exc:
            if exc.code != 401 or "Authorization" in headers:
                return None
            fields = _challenge(exc.headers.get("WWW-Authenticate", ""))
            if "realm" not in fields:
                return None
            query = urllib.parse.urlencode(
                {"service": fields.get("service", host), "scope": f"repository:{repo}:pull"}
            )
            with opener(urllib.request.Request(f"{fields['realm']}?{query}")) as resp:
                token = json.loads(resp.read()).get("token")
            if not token:
                return None
            headers = {**headers, "Authorization": f"Bearer {token}"}
        except (urllib.error.URLError, OSError, ValueError):
            return None
    return None


def digest_of(image: str) -> str | None:
    runner = SubprocessRunner()
    if shutil.which("docker"):
        result = runner.run(
            ["docker", "buildx", "imagetools", "inspect", image, "--format", "{{json .Manifest}}"],
            capture=True,
        )
        if result.ok:
            digest = json.loads(result.output).get("digest")
            return str(digest) if digest else None
    if shutil.which("skopeo"):
        result = runner.run(["skopeo", "inspect", "--raw", f"docker://{image}"], capture=True)
        if result.ok:
            return "sha256:" + hashlib.sha256(result.output.encode()).hexdigest()
    return registry_digest(image)


def check(old: dict[str, dict[str, object]], images: list[str], *, online: bool) -> list[str]:
    """What makes the pins file stale: images it lacks or has too many, null or moved digests."""
    problems = [f"{i}: not in {PINS.name}" for i in images if i not in old]
    problems += [
        f"{i}: in {PINS.name}, no longer named by the knowledge base"
        for i in old
        if i not in images
    ]
    for image in (i for i in images if i in old):
        digest = (old.get(image) or {}).get("digest")
        if digest is None:
            problems.append(f"{image}: no digest (used by tag)")
        elif online and (now := digest_of(image)) is not None and now != digest:
            problems.append(f"{image}: pinned {digest}, the registry serves {now}")
    return problems


def read_old(path: Path) -> dict[str, dict[str, object]]:
    """The rows the pins file has now (validated: a bad row stops in one line), by image."""
    if not path.is_file():
        return {}
    return {
        pin.image: {
            "digest": pin.digest,
            "checked": pin.checked.isoformat() if pin.checked else None,
        }
        for pin in load_image_pins(path, check_image=validate_image_ref)
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="do not query a registry")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when stale")
    parser.add_argument("--online", action="store_true", help="--check: ask the registry too")
    args = parser.parse_args()
    yaml = YAML()
    try:
        old = read_old(PINS)
    except BuildtoolsError as exc:
        print(f"refresh-image-pins: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    if args.check:
        problems = check(old, kb_images(), online=args.online)
        for problem in problems:
            print(f"refresh-image-pins: {problem}")
        print(f"refresh-image-pins: {len(problems)} problem(s) in {PINS}")
        return 1 if problems else 0
    rows = []
    failed = []
    today = datetime.date.today().isoformat()
    for image in kb_images():
        row = {
            "image": image,
            "digest": (old.get(image) or {}).get("digest"),
            "checked": (old.get(image) or {}).get("checked"),
        }
        if not args.list:
            digest = digest_of(image)
            if digest is None:
                failed.append(image)
            else:
                row["digest"], row["checked"] = digest, today
        rows.append(row)
    text = io.StringIO(HEADER)
    text.seek(0, io.SEEK_END)
    yaml.dump({"pins": rows}, text)
    write_atomic(PINS, text.getvalue())  # a reader never sees half a file
    for image in failed:
        print(f"refresh-image-pins: no digest for {image} (registry unreachable, or no such tag)")
    print(f"refresh-image-pins: {len(rows)} image(s), {len(failed)} without a new digest -> {PINS}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
