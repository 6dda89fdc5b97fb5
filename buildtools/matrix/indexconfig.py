"""matrix.yaml `index:`: the settings of `buildtools index` (find-links pages, PEP 503 index).

The local version label of the wheels (`local_version`, a template of the cell), the site's
base URL, where the wheels are downloaded from when they are not in the site
(`wheel_url`, e.g. the release assets) and the page aliases.
"""

from __future__ import annotations

__all__ = ["DEFAULT_LOCAL_VERSION", "IndexConfig"]

import re
import string
from typing import Annotated

from pydantic import AfterValidator, Field, field_validator, model_validator

from .fields import Strict, check_url

_LOCAL_FIELDS = ("torch_major", "torch_minor", "torch_patch", "accelerator", "abi")
DEFAULT_LOCAL_VERSION = "pt{torch_major}{torch_minor}{accelerator}"


_WHEEL_URL_FIELDS = ("filename", "project", "version", "public_version")
_PAGE_KEY_RE = re.compile(r"^\d+\.\d+\.\d+\+(?:cpu|cu\d{3,4}|rocm\d+\.\d+(?:\.\d+)?)$")


def _check_page_key(value: str) -> str:
    if not _PAGE_KEY_RE.match(value):
        raise ValueError(
            f"{value!r} is not a page key; write TORCH+ACCELERATOR, e.g. '2.11.0+cu130'"
        )
    return value


PageKey = Annotated[str, AfterValidator(_check_page_key)]


class IndexConfig(Strict):
    """Settings of `buildtools index` (the find-links pages and PEP 503 index)."""

    base_url: str | None = None
    local_version: str = DEFAULT_LOCAL_VERSION
    alias_patches: bool = True
    aliases: dict[PageKey, list[PageKey]] = Field(default_factory=dict)
    wheel_url: str | None = None
    # PEP 825 wheel variants (docs/index.md "Wheel variants"): `buildtools index` also
    # publishes each wheel as a variant of the version `local_version` gives without the
    # accelerator, on one index where uv's variant preview picks the accelerator. Off by
    # default: the format is provisional and only previews of installers read it
    wheel_variants: bool = False

    @model_validator(mode="after")
    def _variants_need_accelerator(self) -> IndexConfig:
        if self.wheel_variants and "{accelerator}" not in self.local_version:
            raise ValueError(
                f"wheel_variants: true needs {{accelerator}} in local_version "
                f"({self.local_version!r}): the variants of one version are its accelerators, "
                "e.g. local_version: 'pt{torch_major}{torch_minor}{accelerator}'"
            )
        return self

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        # '' is allowed: relative links (a site served from anywhere)
        return check_url(value, schemes=("https", "http")) if value else value

    @field_validator("wheel_url")
    @classmethod
    def _wheel_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        names = {name for _, name, _, _ in string.Formatter().parse(value) if name is not None}
        unknown = sorted(names - set(_WHEEL_URL_FIELDS))
        if unknown:
            raise ValueError(
                f"unknown placeholder {{{unknown[0]}}}; allowed: "
                + ", ".join("{" + f + "}" for f in _WHEEL_URL_FIELDS)
            )
        if "filename" not in names:
            raise ValueError("the template must use {filename} (the wheel's file name)")
        return check_url(value, schemes=("https", "http", "file"))

    @field_validator("local_version")
    @classmethod
    def _template(cls, value: str) -> str:
        for _, name, _, _ in string.Formatter().parse(value):
            if name is not None and name not in _LOCAL_FIELDS:
                raise ValueError(
                    f"unknown placeholder {{{name}}}; allowed: "
                    + ", ".join("{" + f + "}" for f in _LOCAL_FIELDS)
                )
        probe = value.format(
            torch_major=2, torch_minor=11, torch_patch=0, accelerator="cu130", abi="abi3"
        )
        if not re.fullmatch(r"[A-Za-z0-9]+(\.[A-Za-z0-9]+)*", probe):
            raise ValueError(
                f"{value!r} gives {probe!r}, not a valid PEP 440 local label "
                "(letters, digits and dots only)"
            )
        return value
