"""Decoding JSON with limits, and typed reads from it, each error naming what was expected.

Every JSON document buildtools reads that it did not write in this process (a wheel's
build record, a site's `index.json`, smoke and build reports, a plan, an API answer) is
decoded by `decode_json`: at most `max_bytes`, nested at most `max_depth` deep, strict JSON
(no NaN or Infinity), and any problem is one ValueError naming the document. `json.loads`
alone turns 100,000 nested brackets into a RecursionError and a 2.5 GB document into
gigabytes of objects.

The records of `model` read their JSON through `Fields`, so a malformed plan or build record
is refused with `job.cells[0].python: expected a string, got a number`, never a traceback.
"""

from __future__ import annotations

__all__ = [
    "JSON_MAX_BYTES",
    "JSON_MAX_DEPTH",
    "JSON_MAX_DIGITS",
    "MISSING",
    "Fields",
    "decode_json",
    "json_type",
]

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, cast

JSON_MAX_BYTES = 64 << 20
"""The default size limit: a site's index.json of ~120,000 wheels (10,000 take ~5 MB)."""
JSON_MAX_DEPTH = 32
"""The default nesting limit: buildtools' own documents nest 4 deep at most."""
JSON_MAX_DIGITS = 100
"""The longest run of digits any string or number may hold: no field buildtools reads has
more (a sha256 is 64 hex digits), and a version or tag of 5,000 digits would otherwise
reach `int()` past Python's integer-length limit (4,300 digits) as a ValueError."""
_LONG_NUMBER = re.compile(rf"\d{{{JSON_MAX_DIGITS + 1}}}")
_DIGITS_AS_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_LONG_RUN = b"0" * (JSON_MAX_DIGITS + 1)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _too_deep(data: object, limit: int) -> bool:
    """Whether decoded `data` nests deeper than `limit` (iteratively: no recursion)."""
    stack: list[tuple[object, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if type(value) is dict:
            children: Any = value.values()
        elif type(value) is list:
            children = value
        else:
            continue
        if depth > limit:
            return True
        for child in children:
            if type(child) is dict or type(child) is list:
                stack.append((child, depth + 1))
    return False


def _size(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def decode_json(
    raw: bytes | str,
    *,
    what: str,
    max_bytes: int = JSON_MAX_BYTES,
    max_depth: int | None = JSON_MAX_DEPTH,
) -> Any:
    """The JSON value of `raw`, or ValueError starting with `what` (the document's name).

    Refused: more than `max_bytes` (bytes, or characters of a str), nesting deeper than
    `max_depth`, text that is not JSON, NaN and Infinity. `max_depth=None` is for a caller
    that checks the type of every value it reads (a schema bounds the depth; 100,000 nested
    brackets are still refused by the decoder itself, as "nested too deeply").
    """
    if len(raw) > max_bytes:
        raise ValueError(
            f"{what}: {len(raw):,} bytes, more than the {_size(max_bytes)} allowed; "
            "is it the document it should be?"
        )
    long_run, escaped = _long_run_in_text(raw)
    if long_run:  # before the decoder turns a 5,000-digit number into int()
        raise ValueError(_too_many_digits(what))
    try:
        data = json.loads(raw, parse_constant=_refuse_constant)
    except RecursionError:
        limit = f"{max_depth} levels" if max_depth is not None else "the decoder can follow"
        raise ValueError(f"{what}: nested deeper than {limit}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what} is not valid JSON: not UTF-8 text ({exc.reason})") from None
    except ValueError as exc:
        raise ValueError(f"{what} is not valid JSON: {exc}") from None
    if max_depth is not None and _too_deep(data, max_depth):
        raise ValueError(f"{what}: nested deeper than {max_depth} levels")
    if escaped and _long_run_in_values(data):
        raise ValueError(_too_many_digits(what))
    return data


def _too_many_digits(what: str) -> str:
    return (
        f"{what}: a number of more than {JSON_MAX_DIGITS} digits; no field of a document "
        "buildtools reads holds one"
    )


def _long_run_in_text(raw: bytes | str) -> tuple[bool, bool]:
    """(whether `raw` holds a run of more than JSON_MAX_DIGITS ASCII digits, whether its
    values must be looked at too: it holds escapes or non-ASCII text). Every digit made '0',
    then one substring search: ~40 ms for 15 MB where a regular expression takes 350."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    return _LONG_RUN in data.translate(_DIGITS_AS_ZERO), not data.isascii() or b"\\u" in data


def _long_run_in_values(data: object) -> bool:
    """Whether a decoded string holds a run of more than JSON_MAX_DIGITS digits (escaped
    `\\u0039`, or other scripts' digits, which int() reads too)."""
    stack: list[object] = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if len(value) > JSON_MAX_DIGITS and _LONG_NUMBER.search(value):
                return True
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


_L = TypeVar("_L", bound=str)
# the default of a key that must be present
MISSING: Any = object()


def json_type(value: object) -> str:
    """How a message names the JSON type of `value` ('a string', 'null')."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


class Fields:
    """One JSON object at `path`; each read raises ValueError naming `path.key` when the
    value is missing (and has no default) or of the wrong type."""

    def __init__(self, data: object, path: str) -> None:
        if not isinstance(data, Mapping):
            raise ValueError(f"{path}: expected an object, got {json_type(data)}")
        self.data: Mapping[str, object] = data
        self.path = path

    def _get(self, key: str, default: Any) -> object:
        if key in self.data:
            return self.data[key]
        if default is MISSING:
            raise ValueError(f"{self.path}.{key}: missing")
        return cast(object, default)

    def _wrong(self, key: str, expected: str, value: object) -> ValueError:
        return ValueError(f"{self.path}.{key}: expected {expected}, got {json_type(value)}")

    def text(self, key: str, default: Any = MISSING) -> str:
        """A string."""
        value = self._get(key, default)
        if not isinstance(value, str):
            raise self._wrong(key, "a string", value)
        return value

    def opt_text(self, key: str) -> str | None:
        """A string or null (absent: None)."""
        value = self._get(key, None)
        if value is not None and not isinstance(value, str):
            raise self._wrong(key, "a string or null", value)
        return value

    def opt_texts(self, key: str) -> tuple[str, ...] | None:
        """A list of strings or null (absent: None)."""
        return None if self._get(key, None) is None else self.texts(key)

    def flag(self, key: str, default: Any = MISSING) -> bool:
        """true or false."""
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise self._wrong(key, "true or false", value)
        return value

    def texts(self, key: str, default: Any = MISSING) -> tuple[str, ...]:
        """A list of strings."""
        value = self._get(key, default)
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise self._wrong(key, "a list of strings", value)
        return tuple(value)

    def choice(self, key: str, allowed: Sequence[_L], default: Any = MISSING) -> _L:
        """One of the strings `allowed`."""
        value = self.text(key, default)
        for option in allowed:
            if value == option:
                return option
        raise ValueError(
            f"{self.path}.{key}: {value!r} is not one of {', '.join(map(repr, allowed))}"
        )

    def label(self, key: str, default: Any = None) -> str | tuple[str, ...] | None:
        """A string or a list of strings (a runner label); null where `default` is None."""
        value = self._get(key, default)
        if value is None and default is None:
            return None
        if isinstance(value, str):
            return value
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._wrong(key, "a string or a list of strings", value)
        return tuple(value)

    def items(self, key: str) -> list[object]:
        """A list, its items unchecked."""
        value = self._get(key, MISSING)
        if not isinstance(value, list):
            raise self._wrong(key, "a list", value)
        return value

    def objects(self, key: str) -> list[Fields]:
        """A list of objects, each read with its index in the path."""
        return [Fields(item, f"{self.path}.{key}[{i}]") for i, item in enumerate(self.items(key))]
