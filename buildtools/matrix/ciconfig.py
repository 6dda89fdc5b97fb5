"""matrix.yaml `ci:`: how the generated GitHub Actions workflows release, beyond the runners.

Every key is optional and the defaults are what a maintainer of a public extension would
pick: families without a smoke runner are not built for a release, wheel artifacts are
kept 30 days (7 for pull requests), the publish shares the `pages` concurrency group with
any other Pages workflow, builder images go through the Actions cache, and nothing is
published to PyPI. `ci.pypi` turns on trusted publishing of one variant.
"""

from __future__ import annotations

__all__ = ["DEFAULT_TAG_PATTERN", "CiConfig", "PypiConfig", "check_tag_pattern"]

import re
from typing import Literal

from pydantic import Field, field_validator

from .fields import Label, Strict

_TORCH_RE = re.compile(r"\d+\.\d+\.\d+")
_PATH_RE = re.compile(r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
# a registry host (with a dot or a port, as docker requires to tell it from a user name)
# and a repository path; no tag: the workflows add one tag per builder recipe
_REGISTRY_RE = re.compile(
    rf"(?:[a-z0-9-]+(?:\.[a-z0-9-]+)+|localhost)(?::[0-9]{{1,5}})?/{_COMPONENT}(?:/{_COMPONENT})*"
)
_CRON_FIELD = r"[0-9*/,-]+"
_CRON_RE = re.compile(rf"{_CRON_FIELD}(?: {_CRON_FIELD}){{4}}")
_N = "(0|[1-9][0-9]*)"
# `v` + a PEP 440 public version in its normal form (no epoch, no local label); group 1 is
# the version. POSIX ERE as well as Python: the workflow checks it with bash's [[ =~ ]].
DEFAULT_TAG_PATTERN = rf"^v({_N}(\.{_N})*((a|b|rc){_N})?(\.post{_N})?(\.dev{_N})?)$"
# what bash's ERE does not read as Python does: classes, look-arounds, lazy quantifiers
_NOT_ERE = re.compile(r"\\[dDwWsSbBAZz0-9]|\(\?|[*+?}]\?")


def check_tag_pattern(value: str) -> str:
    """A release tag pattern both bash (ERE) and Python read alike; group 1 the version."""
    try:
        compiled = re.compile(value)
    except re.error as exc:
        raise ValueError(f"{value!r} is not a regular expression: {exc}") from None
    if not value.startswith("^") or not value.endswith("$") or len(value) > 300:
        raise ValueError(
            f"{value!r}: anchor the pattern (^…$, at most 300 characters), e.g. "
            "'^v([0-9]+(\\.[0-9]+)*)$'"
        )
    if _NOT_ERE.search(value):
        raise ValueError(
            f"{value!r}: the workflow checks tags with bash's extended regular expressions; "
            "write [0-9] for \\d, no (?…) groups, no lazy quantifiers"
        )
    if compiled.groups < 1:
        raise ValueError(f"{value!r}: the first group (…) must capture the version")
    return value


class PypiConfig(Strict):
    """Trusted publishing to PyPI of one variant (built without the local version label)."""

    torch: str  # one of axes.torch (checked with the axes)
    accelerator: str  # one of axes.accelerator
    environment: Label = "pypi"  # the reviewed GitHub environment PyPI trusts
    sdist: bool = True

    @field_validator("torch")
    @classmethod
    def _torch(cls, value: str) -> str:
        if not _TORCH_RE.fullmatch(value):
            raise ValueError(f"{value!r} is not a torch release; write MAJOR.MINOR.PATCH")
        return value


class CiConfig(Strict):
    """Settings of the generated workflows (`buildtools ci github`)."""

    # a release builds the families without runners.smoke.<family> only when asked
    unsmoked: Literal["skip", "build"] = "skip"
    # where the release's tag check reads the version (default: pyproject.toml, setup.cfg,
    # or the package's __init__.py), relative to project.path
    version_file: str | None = None
    retention_days: int = Field(default=30, ge=1, le=90)
    pr_retention_days: int = Field(default=7, ge=1, le=90)
    # the concurrency group of the publish (restore, index, deploy), shared with any other
    # workflow that deploys GitHub Pages
    pages_group: Label = "pages"
    # builder images go here (one tag per recipe) instead of the Actions cache
    image_registry: str | None = None
    # when the scheduled run on the default branch refreshes the caches (cron, UTC)
    cache_schedule: str = "23 4 * * 1"
    pypi: PypiConfig | None = None
    # a release starts only for a tag matching this (group 1: the version the source must
    # declare); checked by the workflow before any checked-out code runs
    tag_pattern: str = DEFAULT_TAG_PATTERN
    # the protected environment of every release job that can write (contents, id-token):
    # its required reviewers approve each publish (docs/ci.md gives the settings)
    environment: Label = "release"

    _tag = field_validator("tag_pattern")(classmethod(lambda cls, v: check_tag_pattern(v)))

    @field_validator("version_file")
    @classmethod
    def _version_file(cls, value: str | None) -> str | None:
        if value is not None and (not _PATH_RE.fullmatch(value) or ".." in value.split("/")):
            raise ValueError(
                f"{value!r} is not a relative path inside the project (letters, digits, "
                "'._-' and '/', no '..'), e.g. src/my_ext/__init__.py"
            )
        return value

    @field_validator("image_registry")
    @classmethod
    def _registry(cls, value: str | None) -> str | None:
        if value is not None and (not _REGISTRY_RE.fullmatch(value) or len(value) > 200):
            raise ValueError(
                f"{value!r} is not a registry repository; write HOST/PATH in lowercase "
                "without a tag, e.g. ghcr.io/acme/my-ext-builder"
            )
        return value

    @field_validator("cache_schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        if not _CRON_RE.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a cron schedule of five fields (minute hour day month "
                "weekday), e.g. '23 4 * * 1'"
            )
        return value
