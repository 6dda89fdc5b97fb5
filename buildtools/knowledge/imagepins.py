"""The digests of the builder bases: buildtools/data/image_pins.yaml, validated at load.

A fact like the others of buildtools/data/ (one top-level key, a list of rows, refused in
one line per problem: file:line: row: key: what is allowed), written by its refresh script,
ci/refresh-image-pins.py. The docker backend builds FROM `image@digest` when a row has a
digest, and the digest is part of the builder image's content key
(`backends.docker.images.builder_image`): a changed pin gives another image.

Problems raise ConfigError (exit 3), as they did before the file joined the facts: the same
reader takes a pins file of the user's own (`$BUILDTOOLS_IMAGE_PINS`, a registry mirror's).
"""

from __future__ import annotations

__all__ = ["IMAGE_PINS_FILE", "ImagePin", "load_image_pins"]

import datetime
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from ..errors import ConfigError
from ..files import describe_os_error, read_regular
from .load import DATA_DIR, _where

IMAGE_PINS_FILE = DATA_DIR / "image_pins.yaml"
_KEY = "pins"
# A few hundred bases at most; a file far larger is not a pins file.
_MAX_BYTES = 1 << 20
_REMEDY = "fix the file (python ci/refresh-image-pins.py writes the committed one)"
_ROW = "a row is image: NAME[:TAG], digest: sha256:<64 hex> or null, checked: YYYY-MM-DD or null"
# What each key allows, for pydantic's errors about it (its own words name its classes).
_ALLOWED = {
    "image": "expected an image reference NAME[:TAG]",
    "digest": "expected sha256:<64 lowercase hex digits>, or null when no digest is known",
    "checked": "expected the day the digest was read, YYYY-MM-DD, or null",
}

Digest = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    image: str = Field(min_length=1)
    digest: Digest | None = None  # None: no digest known when the refresh script last ran
    checked: datetime.date | None = None  # the day the refresh script read the digest


_ROWS: TypeAdapter[tuple[_Row, ...]] = TypeAdapter(tuple[_Row, ...])


@dataclass(frozen=True, kw_only=True)
class ImagePin:
    """One row: a base image, its digest (None: used by tag), the day it was read."""

    image: str
    digest: str | None
    checked: datetime.date | None


def _text(path: Path) -> str:
    try:
        return read_regular(path, max_bytes=_MAX_BYTES).decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the image pins: {describe_os_error(exc)}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); {_REMEDY}") from None


def _parse(path: Path, text: str, typ: str) -> Any:
    try:
        return YAML(typ=typ).load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(f"{path}:{line}: not valid YAML: {problem}; {_REMEDY}") from None


def _message(error: ErrorDetails) -> str:
    """One row's problem in the file's words: what is wrong, what the key allows."""
    key = error["loc"][-1]
    if error["type"] == "extra_forbidden":
        return f"unknown key; {_ROW}"
    if error["type"] == "missing":
        return f"missing; {_ROW}"
    if isinstance(key, str) and key in _ALLOWED:
        return _ALLOWED[key]
    return f"expected a row; {_ROW}"


def _refuse(path: Path, text: str, loc: tuple[int | str, ...], msg: str) -> ConfigError:
    line, where = _where(_parse(path, text, "rt"), loc)
    return ConfigError(f"{path}:{line or 1}: {where}: {msg}; {_REMEDY}")


def load_image_pins(
    path: Path = IMAGE_PINS_FILE, *, check_image: Callable[[str], object] | None = None
) -> tuple[ImagePin, ...]:
    """The rows of a pins file, in file order; ConfigError names the first problem's line.

    `check_image` refuses an image reference (raises ConfigError; the backend's reference
    grammar, which this layer does not know); its message is put at the row's line. An
    empty file, or `pins:` with no rows, has no pins. The file is read every time; its
    rows are parsed once per content (a plan names every job's image: hundreds of loads).
    """
    return _rows(path, _text(path), check_image)


@functools.lru_cache(maxsize=8)
def _rows(
    path: Path, text: str, check_image: Callable[[str], object] | None
) -> tuple[ImagePin, ...]:
    plain = _parse(path, text, "safe")
    if plain is None:
        return ()
    if not isinstance(plain, dict) or list(plain) != [_KEY]:
        raise ConfigError(
            f"{path}:1: expected one top-level key {_KEY!r} with a list of rows "
            f"(image, digest, checked); {_REMEDY}"
        )
    rows = plain[_KEY] or []
    # the round-trip parse (line numbers) only for a problem: readers load the pins per job
    if not isinstance(rows, list):
        raise _refuse(path, text, (_KEY,), "expected a list of rows (image, digest, checked)")
    try:
        valid = _ROWS.validate_python(rows)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise _refuse(path, text, (_KEY, *first["loc"]), _message(first)) from None
    seen: set[str] = set()
    for i, row in enumerate(valid):
        if row.image in seen:
            raise _refuse(path, text, (_KEY, i, "image"), "listed twice; one row per image")
        seen.add(row.image)
        try:
            if check_image is not None:
                check_image(row.image)
        except ConfigError as exc:
            raise _refuse(path, text, (_KEY, i, "image"), str(exc)) from None
    return tuple(ImagePin(image=r.image, digest=r.digest, checked=r.checked) for r in valid)
