"""What the generated workflows use, pinned: actions by commit SHA (`data/actions.yaml`), and
the hashed requirements beside it: `ci-requirements.txt` (nox, installed first) and
`buildtools-requirements.txt` (buildtools' dependencies, which the noxfile installs), both
written by ci/refresh-ci-requirements.py; `lock_gaps` says what the lock misses of a
dependency list, so a dependency added to pyproject.toml cannot go unhashed unnoticed."""

from __future__ import annotations

__all__ = [
    "LOCK_PATH",
    "REQUIREMENTS_PATH",
    "ActionPin",
    "CiPins",
    "PinUpdate",
    "applies",
    "load_pins",
    "lock_gaps",
    "newest_release",
    "parse_ls_remote",
    "stale_pins",
]

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import KnowledgeError
from ..matrix.yamlsource import load_yaml
from .yamlwriter import Pinned

PINS_PATH = Path(__file__).resolve().parents[1] / "data" / "actions.yaml"
# nox (and build) with every dependency, pinned by sha256: the workflows install it hashed
REQUIREMENTS_PATH = PINS_PATH.with_name("ci-requirements.txt")
# buildtools' own dependencies (with the docker extra) pinned by sha256, for the CI Python on
# every machine of python.machines: the workflows' nox sessions install them hashed
LOCK_PATH = PINS_PATH.with_name("buildtools-requirements.txt")
_SHA_RE = re.compile(r"^[0-9a-f]{40}$")
_VERSION_RE = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")
_ACTION_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
# Every action a generated workflow may use: the file must pin each of them.
REQUIRED = (
    "actions/checkout",
    "actions/setup-python",
    "actions/upload-artifact",
    "actions/download-artifact",
    "actions/cache",
    "actions/upload-pages-artifact",
    "actions/deploy-pages",
    "actions/attest-build-provenance",
    "actions/github-script",
)
_HASHED_RE = re.compile(
    r"^([A-Za-z0-9_.-]+)==(\S+)((?: \\\n    --hash=sha256:[0-9a-f]{64})+)$", re.M
)
_HASH_RE = re.compile(r"--hash=sha256:([0-9a-f]{64})")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ActionPin(_Strict):
    """One action: the commit of a release tag, the tag, and where that was read."""

    sha: str
    version: str
    released: str | None = None  # the tag's commit date, when known
    source: str = Field(min_length=1)

    @field_validator("sha")
    @classmethod
    def _sha(cls, value: str) -> str:
        if not _SHA_RE.match(value):
            raise ValueError(f"{value!r} is not a full commit SHA (40 lowercase hex digits)")
        return value

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if not _VERSION_RE.match(value):
            raise ValueError(f"{value!r} is not a release tag vX.Y.Z")
        return value


class PythonPins(_Strict):
    version: str = Field(pattern=r"^3\.\d+$")
    nox: str = Field(pattern=r"^\d+(\.\d+)*$")
    machines: tuple[str, ...] = Field(min_length=1)  # the runners' Linux architectures


class HostedRunners(_Strict):
    """The labels of GitHub-hosted runners: only these are hosted (safe for any pull request)."""

    labels: tuple[str, ...] = Field(min_length=1)
    source: str = Field(min_length=1)


class CiPins(_Strict):
    """The content of `data/actions.yaml`, and the hashed tool requirements beside it."""

    actions: dict[str, ActionPin]
    python: PythonPins
    hosted_runners: HostedRunners
    requirements: str = ""  # data/ci-requirements.txt (filled by load_pins)
    lock: str = ""  # data/buildtools-requirements.txt (filled by load_pins)

    @field_validator("actions")
    @classmethod
    def _names(cls, value: dict[str, ActionPin]) -> dict[str, ActionPin]:
        for name in value:
            if not _ACTION_RE.match(name):
                raise ValueError(f"{name!r} is not OWNER/REPO")
        missing = [name for name in REQUIRED if name not in value]
        if missing:
            raise ValueError(f"no pin for {', '.join(missing)}")
        return value

    def uses(self, action: str, subpath: str = "") -> Pinned:
        """`OWNER/REPO[/subpath]@<sha>` with its version as the comment."""
        pin = self.actions[action]
        name = f"{action}/{subpath}" if subpath else action
        return Pinned(f"{name}@{pin.sha}", pin.version)

    def is_hosted(self, label: str) -> bool:
        """A label of a GitHub-hosted runner (exactly one of `hosted_runners.labels`)."""
        return label in self.hosted_runners.labels


def parse_requirements(text: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """`name==version \\ --hash=sha256:… [\\ --hash=…]` → name → (version, sha256s)."""
    found = {m[1].lower(): (m[2], tuple(_HASH_RE.findall(m[3]))) for m in _HASHED_RE.finditer(text)}
    body = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if len(body) != len(found) + sum(len(hashes) for _, hashes in found.values()):
        raise ValueError("every requirement is `name==version \\` then `--hash=sha256:` lines")
    return found


def _read_hashed(path: Path) -> tuple[str, dict[str, tuple[str, tuple[str, ...]]]]:
    try:
        text = path.read_text(encoding="utf-8")
        return text, parse_requirements(text)
    except (OSError, ValueError) as exc:
        raise KnowledgeError(f"{path}: {exc}") from None


def load_pins(path: Path = PINS_PATH, requirements: Path | None = None) -> CiPins:
    """Load and validate the pins (a bad file is a bug in the package: KnowledgeError)."""
    doc = load_yaml(path)
    req_path = requirements or path.with_name(REQUIREMENTS_PATH.name)
    try:
        pins = CiPins.model_validate(doc.data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise KnowledgeError(f"{path}: {where}: {msg}") from None
    text, pinned = _read_hashed(req_path)
    if pinned.get("nox", ("", ()))[0] != pins.python.nox:
        raise KnowledgeError(
            f"{req_path}: pins nox {pinned.get('nox', ('none', ()))[0]}, but {path} says "
            f"python.nox: {pins.python.nox}; run `python ci/refresh-ci-requirements.py`"
        )
    lock, _ = _read_hashed(req_path.with_name(LOCK_PATH.name))
    return pins.model_copy(update={"requirements": text, "lock": lock})


def applies(req: Requirement, *, python: str, machine: str, extras: Iterable[str] = ()) -> bool:
    """Whether `req`'s markers hold for CPython `python` on Linux `machine` (with `extras`)."""
    if req.marker is None:
        return True
    env = {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "os_name": "posix",
        "platform_machine": machine,
    }
    return any(req.marker.evaluate({**env, "extra": extra}) for extra in ("", *extras))


def lock_gaps(
    requires: Iterable[str],
    locked: Mapping[str, tuple[str, tuple[str, ...]]],
    *,
    python: str,
    machines: Iterable[str],
    extras: Iterable[str] = ("docker",),
) -> list[str]:
    """What a lock misses of `requires` (PEP 508 lines) on CPython `python`, Linux `machines`.

    A requirement whose markers hold on one of the machines (with `extras` asked for) must
    be locked, at a version its specifier admits: one line per one that is not.
    """
    gaps = []
    for line in requires:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        if not any(applies(req, python=python, machine=m, extras=extras) for m in machines):
            continue
        if name not in locked:
            gaps.append(f"{req}: not in the lock")
        elif not req.specifier.contains(locked[name][0], prereleases=True):
            gaps.append(f"{req}: the lock pins {locked[name][0]}")
    return gaps


def parse_ls_remote(text: str) -> dict[str, str]:
    """`git ls-remote --tags` output → tag → commit SHA (annotated tags peeled)."""
    tags: dict[str, str] = {}
    peeled: dict[str, str] = {}
    for line in text.splitlines():
        sha, _, ref = line.strip().partition("\t")
        if not ref.startswith("refs/tags/") or not _SHA_RE.match(sha):
            continue
        name = ref.removeprefix("refs/tags/")
        if name.endswith("^{}"):
            peeled[name[:-3]] = sha
        else:
            tags[name] = sha
    return {name: peeled.get(name, sha) for name, sha in tags.items()}


def newest_release(tags: Mapping[str, str], *, major: int | None = None) -> tuple[str, str] | None:
    """The highest vX.Y.Z tag (of `major`, when given) and its commit."""
    best: tuple[tuple[int, ...], str, str] | None = None
    for name, sha in tags.items():
        m = _VERSION_RE.match(name)
        if not m:
            continue
        key = tuple(int(g) for g in m.groups())
        if major is not None and key[0] != major:
            continue
        if best is None or key > best[0]:
            best = (key, name, sha)
    return (best[1], best[2]) if best else None


@dataclass(frozen=True, kw_only=True)
class PinUpdate:
    """A pin whose action has a newer release tag."""

    action: str
    old_version: str
    new_version: str
    new_sha: str


def stale_pins(
    pins: CiPins, tags: Mapping[str, Mapping[str, str]], *, same_major: bool = False
) -> list[PinUpdate]:
    """The pins behind the newest vX.Y.Z tag of their action (`tags`: action → tag → sha).

    A tag that moved to another commit under the same name is reported too.
    """
    updates = []
    for action, pin in sorted(pins.actions.items()):
        m = _VERSION_RE.match(pin.version)
        assert m is not None
        newest = newest_release(tags.get(action, {}), major=int(m.group(1)) if same_major else None)
        if newest is None:
            continue
        version, sha = newest
        if (version, sha) != (pin.version, pin.sha):
            updates.append(
                PinUpdate(action=action, old_version=pin.version, new_version=version, new_sha=sha)
            )
    return updates
