"""Field types several sections of matrix.yaml share: the strict base model, runner labels
and URLs that nothing generated from them (YAML, HTML, shell) can be broken out of."""

from __future__ import annotations

__all__ = ["ByteSize", "Label", "RunnerLabel", "Strict", "check_label", "check_url"]

import re
import urllib.parse
from typing import Annotated, Any, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field


class Strict(BaseModel):
    """Every matrix.yaml section: unknown keys are errors, values frozen once loaded."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


# GitHub runner labels: letters, digits and `._-` (a self-hosted label cannot hold spaces or
# commas, and anything else could break out of the generated YAML or shell); at most 100.
_LABEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_label(value: str) -> str:
    """A runner label (also used for other names the workflows write: environments, groups)."""
    if not _LABEL_RE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a runner label; allowed: letters, digits, '.', '_' and '-' "
            "(at most 100, e.g. ubuntu-24.04 or [self-hosted, linux, gpu-h100])"
        )
    return value


Label = Annotated[str, AfterValidator(check_label)]
RunnerLabel = Union[Label, list[Label]]  # noqa: UP007 (pydantic needs a runtime union here)


def check_url(value: str, *, schemes: tuple[str, ...]) -> str:
    """An absolute URL of one of `schemes` that no HTML attribute, YAML or shell can be broken
    out of with: no whitespace, quotes, angle brackets or backslashes."""
    parsed = urllib.parse.urlsplit(value)
    if parsed.scheme not in schemes or not (parsed.netloc or parsed.scheme == "file"):
        raise ValueError(
            f"{value!r} is not an absolute {' or '.join(s + '://' for s in schemes)} URL"
        )
    bad = next((ch for ch in value if ch.isspace() or ch in "\"'<>\\`"), None)
    if bad is not None:
        raise ValueError(f"{value!r} contains {bad!r}; percent-encode it (e.g. %20 for a space)")
    return value


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|KB|MB|GB)?\s*$")
_UNITS = {
    "B": 1,
    "KiB": 1 << 10,
    "MiB": 1 << 20,
    "GiB": 1 << 30,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
}


def _byte_size(value: Any) -> Any:
    """'100 MiB', '2 GiB', '500MB' or a number of bytes → bytes."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    match = _SIZE_RE.match(str(value))
    if match is None:
        raise ValueError(
            f"{value!r} is not a size; write bytes or a number with B, KiB, MiB, GiB, KB, MB "
            'or GB, e.g. "100 MiB"'
        )
    return int(float(match[1]) * _UNITS[match[2] or "B"])


ByteSize = Annotated[int | None, BeforeValidator(_byte_size), Field(default=None, gt=0)]
