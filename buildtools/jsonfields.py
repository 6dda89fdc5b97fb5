"""Typed reads from decoded JSON, each error naming the key path and what was expected.

The records of `model` read their JSON through `Fields`, so a malformed plan or build record
is refused with `job.cells[0].python: expected a string, got a number`, never a traceback.
"""

from __future__ import annotations

__all__ = ["MISSING", "Fields", "json_type"]

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, cast

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
