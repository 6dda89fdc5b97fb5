"""Which find-links pages list a wheel: its torch versions, their patch aliases, extra aliases.

A page is one torch release × one accelerator (`torch-2.11.0+cu130.html`). A wheel built
against 2.11.0 also serves 2.11.1 when its own `Requires-Dist: torch…` admits it, so users
find it from the page of the torch they have.

A stable-ABI wheel (its `Requires-Dist` a range, `published.is_window`) is listed on the
pages of the releases its build record names and of those a passing smoke run proved since
(`proven_variants`: a torch released after the wheel, inside its range, once the backfill's
smoke-only run passed there), never on a patch its range merely admits.
"""

from __future__ import annotations

__all__ = ["Aliases", "Variant", "proven_variants", "unknown_variant"]

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ..knowledge import Knowledge
from ..model import Accelerator
from .manifest import IndexedWheel
from .published import is_window, proven_releases
from .settings import IndexSettings
from .smokelog import SmokeRun


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One find-links page: a torch release × an accelerator ('2.11.0+cu130')."""

    torch: str
    accelerator: str

    @classmethod
    def parse(cls, key: str) -> Variant:
        torch, sep, accelerator = key.partition("+")
        if not sep:
            raise ValueError(f"{key!r} is not TORCH+ACCELERATOR, e.g. '2.11.0+cu130'")
        return cls(torch=torch, accelerator=accelerator)

    @property
    def key(self) -> str:
        return f"{self.torch}+{self.accelerator}"

    @property
    def page(self) -> str:
        """The find-links page, relative to the site root."""
        return f"torch-{self.key}.html"

    @property
    def index_dir(self) -> str:
        """The per-variant PEP 503 root, relative to the site root."""
        return f"torch-{self.key}"

    def sort_key(self) -> tuple[Any, ...]:
        try:
            torch: Any = (0, Version(self.torch))
        except InvalidVersion:
            torch = (1, self.torch)
        try:
            acc = Accelerator.parse(self.accelerator)
            kind = ("cpu", "cuda", "rocm").index(acc.kind)
            accel: Any = (kind, Version(acc.version) if acc.version else Version("0"))
        except ValueError:
            accel = (3, Version("0"), self.accelerator)
        return (torch, accel, self.accelerator)


class Aliases:
    """Which pages list a wheel, with the knowledge look-ups and specifier checks cached."""

    def __init__(self, settings: IndexSettings, kb: Knowledge) -> None:
        self.settings = settings
        self.kb = kb
        self._patches: dict[str, tuple[str, ...]] = {}
        self._admits: dict[tuple[str, str], bool] = {}
        # a site's wheels share a handful of (accelerator, torch versions, specifier)
        self._variants: dict[tuple[str, tuple[str, ...], str | None], frozenset[Variant]] = {}

    def patches(self, torch: str) -> tuple[str, ...]:
        if torch not in self._patches:
            try:
                self._patches[torch] = self.kb.torch_release(torch).patches
            except (LookupError, ValueError):
                self._patches[torch] = ()
        return self._patches[torch]

    def admits(self, specifier: str, torch: str) -> bool:
        key = (specifier, torch)
        if key not in self._admits:
            try:
                spec = SpecifierSet(specifier)
            except InvalidSpecifier:
                spec = SpecifierSet()
            self._admits[key] = spec.contains(torch, prereleases=True)
        return self._admits[key]

    def variants(self, wheel: IndexedWheel) -> frozenset[Variant]:
        """The pages that list `wheel` (computed once per kind of wheel)."""
        key = (wheel.accelerator, wheel.torch_versions, wheel.torch_specifier)
        found = self._variants.get(key)
        if found is None:
            found = self._variants[key] = frozenset(self._find(wheel))
        return found

    def _find(self, wheel: IndexedWheel) -> set[Variant]:
        found = {Variant(torch=t, accelerator=wheel.accelerator) for t in wheel.torch_versions}
        if self.settings.alias_patches and not is_window(wheel):  # a window: proven pages only
            spec = wheel.torch_specifier or ""
            for torch in wheel.torch_versions:
                for patch in self.patches(torch):
                    if self.admits(spec, patch):
                        found.add(Variant(torch=patch, accelerator=wheel.accelerator))
        for variant in list(found):
            for target in self.settings.aliases.get(variant.key, ()):
                found.add(Variant.parse(target))
        return found


def proven_variants(
    wheel: IndexedWheel, runs: Iterable[SmokeRun], kb: Knowledge
) -> frozenset[Variant]:
    """The pages of the releases passing smoke runs proved a window wheel on, beyond its
    record's: each release a run of it proved (`published.proven_releases`) that the wheel's
    range admits and the knowledge base knows as a release of the wheel's accelerator."""
    if not is_window(wheel):
        return frozenset()
    spec = SpecifierSet(wheel.torch_specifier or "")
    return frozenset(
        Variant(torch=torch, accelerator=wheel.accelerator)
        for torch in proven_releases(runs).get(wheel.sha256, ())
        if spec.contains(torch, prereleases=False)
        and not unknown_variant(torch, wheel.accelerator, kb)
    )


def unknown_variant(torch: str, accelerator: str, kb: Knowledge) -> str | None:
    """Why no page may be named for torch `torch` × `accelerator`, or None: a page name
    comes from a wheel's build record, so the release and the accelerator must be ones the
    knowledge base knows torch shipped (`torch-99.0.0+cpu` or `+cu999` is a record's
    invention, not a page)."""
    try:
        acc = Accelerator.parse(accelerator)
        release = kb.torch_release(torch)
        version = Version(torch)
    except (LookupError, ValueError) as exc:  # InvalidVersion is a ValueError
        return str(exc)
    if version.public != torch or version.is_prerelease or version.is_devrelease:
        return f"torch {torch!r} is not a release (a page names a public release, e.g. 2.11.0)"
    if len(version.release) > 2 and torch not in release.patches:
        return (
            f"torch {torch} is not a known release; known {release.minor} releases: "
            f"{', '.join(release.patches)}"
        )
    built = {
        "cpu": ("cpu",),
        "cuda": tuple(dict.fromkeys((*release.cuda, *release.aarch64.cuda))),
        "rocm": release.rocm,
    }[acc.kind]
    if acc.kind != "cpu" and acc.version not in built:
        return (
            f"torch {release.minor} was not built for {accelerator} (built: "
            f"{', '.join(built) or 'none'})"
        )
    return None
