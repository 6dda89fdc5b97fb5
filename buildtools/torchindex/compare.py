"""The knowledge base against what the index serves, release by release.

Per release: it exists (a patch the data lists and the index does not, or the reverse),
its Python tags (free-threaded ones too), its Linux platforms and their manylinux tag,
and the CUDA of the plain PyPI wheel (its own pins). Each difference names the data file,
line and key to change; a release older than the knowledge base is listed as not checked.
"""

from __future__ import annotations

__all__ = ["CheckReport", "Difference", "compare"]

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from packaging.version import Version

from ..knowledge import Knowledge, TorchRelease
from .served import PlatformFacts, ServedRelease

# (minor or None for the file's list, key path inside the row) → 'file:line: row: key'
Locator = Callable[[str | None, tuple[str, ...]], str]


@dataclass(frozen=True, kw_only=True)
class Difference:
    """One fact the data and the index disagree on."""

    version: str
    where: str  # 'buildtools/data/torch.yaml:412: releases[14] (minor 2.14): free_threaded'
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass(frozen=True, kw_only=True)
class CheckReport:
    """Every release checked (with what it serves), the differences, what was not checked."""

    checked: tuple[tuple[str, str], ...]
    differences: tuple[Difference, ...]
    not_checked: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.differences


def _list(values: Sequence[str] | None) -> str:
    return ", ".join(values) if values else "none"


def summary(release: ServedRelease) -> str:
    """'linux_x86_64: 3.10–3.14 + 3.14t, manylinux_2_28, CUDA 13.0 (cuda-toolkit 13.0.3); …'"""
    parts = []
    for facts in release.platforms.values():
        pythons = _list(facts.pythons) + "".join(f" + {p}t" for p in facts.free_threaded)
        cuda = "not read"
        if facts.metadata_of is not None:
            cuda = f"CUDA {facts.cuda}" if facts.cuda else "CPU"
            if facts.cuda_toolkit:
                cuda += f" (cuda-toolkit {facts.cuda_toolkit})"
        parts.append(f"{facts.platform}: {pythons}, {'/'.join(facts.tags)}, {cuda}")
    if release.other_platforms:
        parts.append(f"also {len(release.other_platforms)} other platform tag(s), not built for")
    return "; ".join(parts)


def _platform(
    version: str,
    release: TorchRelease,
    facts: PlatformFacts,
    where: Callable[[tuple[str, ...]], str],
) -> list[Difference]:
    aarch64 = facts.platform == "linux_aarch64"
    row = release.aarch64
    prefix: tuple[str, ...] = ("aarch64",) if aarch64 else ()
    found: list[Difference] = []

    def differ(key: tuple[str, ...], data: str, index: str) -> None:
        found.append(
            Difference(
                version=version,
                where=where(key),
                message=f"the data says {data}; the index serves {index} "
                f"(torch {version}, {facts.platform})",
            )
        )

    pythons = (row.python if aarch64 else None) or release.python
    py_key = ("aarch64", "python") if aarch64 and row.python is not None else ("python",)
    if tuple(pythons) != facts.pythons:
        differ(py_key, _list(pythons), _list(facts.pythons))
    ft = release.free_threaded_of(version, aarch64=aarch64)
    if ft != facts.free_threaded:
        if aarch64 and row.free_threaded is not None:
            ft_key: tuple[str, ...] = ("aarch64", "free_threaded")
        elif version in release.free_threaded_patches:
            ft_key = ("free_threaded_patches", version)
        else:
            ft_key = ("free_threaded",)
        differ(ft_key, _list(ft), _list(facts.free_threaded))
    tag = row.platform_tag if aarch64 else (release.index_platform_tag or release.platform_tag)
    if facts.tags != (tag,):
        key = "index_platform_tag" if release.index_platform_tag and not aarch64 else "platform_tag"
        differ((*prefix, key), tag, _list(facts.tags))
    if facts.metadata_of is None:
        return found
    cuda = row.pypi_cuda if aarch64 else release.pypi_cuda
    if cuda != facts.cuda:
        differ(
            (*prefix, "pypi_cuda"),
            f"CUDA {cuda}" if cuda else "a CPU wheel",
            f"{f'CUDA {facts.cuda}' if facts.cuda else 'a CPU wheel'} ({facts.metadata_of})",
        )
    if not aarch64 and facts.cuda == cuda and release.pypi_cuda_toolkit != facts.cuda_toolkit:
        differ(
            ("pypi_cuda_toolkit",),
            str(release.pypi_cuda_toolkit),
            f"cuda-toolkit=={facts.cuda_toolkit} ({facts.metadata_of})",
        )
    return found


def _at(locate: Locator, minor: str) -> Callable[[tuple[str, ...]], str]:
    def where(key: tuple[str, ...]) -> str:
        return locate(minor, key)

    return where


def compare(
    kb: Knowledge, served: Sequence[ServedRelease], locate: Locator, *, since: str | None = None
) -> CheckReport:
    """Check every served release the knowledge base covers (see the module docstring);
    `since` ('2.14'): only that minor and newer ones, both ways."""
    oldest = Version(next(iter(kb.torch)))
    floor = max(oldest, Version(since)) if since else oldest
    checked: list[tuple[str, str]] = []
    differences: list[Difference] = []
    too_old: list[str] = []
    served_versions = {r.version for r in served}
    for release in sorted(served, key=lambda r: Version(r.version)):
        v = Version(release.version)
        minor = f"{v.major}.{v.minor}"
        if Version(minor) < floor:
            too_old.append(release.version)
            continue
        checked.append((release.version, summary(release)))
        row = kb.torch.get(minor)
        if row is None:
            differences.append(
                Difference(
                    version=release.version,
                    where=locate(None, ()),
                    message=f"no row for torch {minor}, which the index serves "
                    f"({release.version}); propose one with "
                    f"`python ci/propose-torch-release.py {release.version}`",
                )
            )
            continue
        if release.version not in row.patches:
            differences.append(
                Difference(
                    version=release.version,
                    where=locate(minor, ("patches",)),
                    message=f"the data lists {_list(row.patches)}; the index also serves "
                    f"{release.version}",
                )
            )
        for platform in ("linux_x86_64", "linux_aarch64"):
            facts = release.platforms.get(platform)
            if facts is None:
                differences.append(
                    Difference(
                        version=release.version,
                        where=locate(minor, ("aarch64",) if "aarch64" in platform else ()),
                        message=f"the data describes {platform} wheels; the index serves "
                        f"none for {release.version}",
                    )
                )
                continue
            differences += _platform(release.version, row, facts, _at(locate, minor))
    for row in kb.torch.values():
        if Version(row.minor) < floor:
            continue
        for patch in row.patches:
            if patch not in served_versions:
                differences.append(
                    Difference(
                        version=patch,
                        where=locate(row.minor, ("patches",)),
                        message=f"the data lists {patch}; the index serves no wheel of it",
                    )
                )
    not_checked = []
    if too_old:
        not_checked.append(
            f"{len(too_old)} release(s) before {floor} ({too_old[0]} … {too_old[-1]}; "
            + ("the knowledge base starts there)" if floor == oldest else "--since)")
        )
    return CheckReport(
        checked=tuple(checked), differences=tuple(differences), not_checked=tuple(not_checked)
    )
