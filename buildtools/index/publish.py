"""Publishing: the gate, the merge and the pages decided, then one atomic swap of the site.

The only writer of the index. Everything is decided (under the site's lock) before the
first file is written, but the old wheels: they are linked into the staging directory
meanwhile (the few a decision drops are unlinked again). The new site is staged next to
the old one and swapped in by `transaction`, so a crash at any point leaves the old site
byte-identical. A page the old site holds with the very bytes rendered now is kept, not
written again.
"""

from __future__ import annotations

__all__ = ["PublishOptions", "PublishResult", "publish"]

import contextlib
import stat
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ImmutableWheelError, PublishError
from ..files import sha256_file
from ..knowledge import Knowledge
from ..planner import MatrixCells
from .coverage import CoverageMap, coverage_map
from .gate import SmokeGate
from .manifest import MANIFEST_NAME, Manifest, read_manifest
from .merge import MergeResult, merge
from .pages import WHEELS_DIR
from .settings import IndexSettings
from .site import render_site
from .transaction import Exchange, Fault, exchange_dirs, site_transaction
from .variantindex import refuse_variant_inputs, variant_sources
from .variants import unknown_variant
from .wheels import WheelSource


@dataclass(frozen=True, kw_only=True)
class PublishResult:
    site: Path
    added: tuple[str, ...]
    unchanged: tuple[str, ...]
    held_back: tuple[tuple[str, str], ...]  # (file name, reason)
    same_inputs: tuple[tuple[str, str], ...] = ()  # (file name, why): kept the published one
    pages: tuple[str, ...]  # find-links pages
    wheels: int  # wheels the site lists now
    written: bool
    coverage: CoverageMap = field(default_factory=CoverageMap)  # the map of the new site
    notes: tuple[str, ...] = ()  # e.g. a wheel that gets no variant twin, and why


def _check_foreign(site: Path, added: Sequence[WheelSource]) -> None:
    """A new hosted wheel must not replace a file the site serves outside the manifest."""
    clashes = []
    for src in added:
        if src.wheel.url is not None:
            continue
        existing = site / WHEELS_DIR / src.wheel.filename
        if existing.is_file():
            sha = sha256_file(existing)
            if sha != src.wheel.sha256:
                clashes.append(
                    f"{existing}: served (not in {MANIFEST_NAME}) with sha256 {sha}, "
                    f"the new file ({src.path}) has sha256 {src.wheel.sha256}"
                )
    if clashes:
        raise ImmutableWheelError(
            "published files are immutable; nothing was written:\n  " + "\n  ".join(clashes)
        )


def _holds(site: Path, rel: str, files: dict[str, bytes]) -> bool:
    """Whether the site's `rel` is a regular file with exactly the bytes of `files[rel]`."""
    path = site / rel
    try:
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_size != len(files[rel]):
            return False
        return path.read_bytes() == files[rel]
    except OSError:
        return False


@dataclass(frozen=True, kw_only=True)
class PublishOptions:
    """How a publish writes: `dry_run` (nothing), `link` (reflink or hard-link new wheels,
    else copy), `verify` (their sha256 again first); `exchange` and `fault` are the swap and
    a crash point (tests)."""

    dry_run: bool = False
    link: bool = True
    verify: bool = False
    exchange: Exchange = exchange_dirs
    fault: Fault | None = None


_DEFAULT_OPTIONS = PublishOptions()


def _check_variants(sources: Sequence[WheelSource], kb: Knowledge) -> None:
    """PublishError naming a new wheel whose build record names a torch release or an
    accelerator torch never shipped, before any page is named after it."""
    for src in sources:
        for torch in src.wheel.torch_versions:
            problem = unknown_variant(torch, src.wheel.accelerator, kb)
            if problem is not None:
                raise PublishError(
                    f"{src.wheel.filename}: its build record names torch {torch} "
                    f"({src.wheel.accelerator}): {problem}; no page is named after a release "
                    "the knowledge base does not know (rebuild it, or update buildtools)"
                )


def publish(
    site: Path,
    sources: Sequence[WheelSource],
    settings: IndexSettings,
    kb: Knowledge,
    *,
    gate: SmokeGate | None = None,
    matrix: MatrixCells | None = None,
    options: PublishOptions = _DEFAULT_OPTIONS,
) -> PublishResult:
    """Merge `sources` into the site at `site` and swap the new site in atomically.

    New wheels are reflinked or hard-linked into the site where the filesystem allows
    (`link`; else copied), after checking they are still the files that were read: same
    size and mtime, and with `verify` the same sha256. The passing smoke runs of the
    gate's reports join those `index.json` keeps, for every wheel the site lists (one
    published before included); `matrix` (the cells matrix.yaml names) completes the
    coverage map.
    """
    refuse_variant_inputs(sources)
    _check_variants(sources, kb)
    with _workdir(site if settings.wheel_variants else None) as workdir:
        how = _How(gate=gate, matrix=matrix, options=options, workdir=workdir)
        return _publish(site, sources, settings, kb, how)


@dataclass(frozen=True, kw_only=True)
class _How:
    """What `publish` was given beyond the wheels, and where variant wheels are made."""

    gate: SmokeGate | None
    matrix: MatrixCells | None
    options: PublishOptions
    workdir: Path | None


@contextlib.contextmanager
def _workdir(site: Path | None) -> Iterator[Path | None]:
    """Where the variant wheels are made: next to the site (one filesystem, so they are
    linked in, not copied), removed after the publish; None without index.wheel_variants."""
    if site is None:
        yield None
        return
    parent = site.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{site.name}.variants-", dir=parent) as tmp:
        yield Path(tmp)


def _publish(
    site: Path,
    sources: Sequence[WheelSource],
    settings: IndexSettings,
    kb: Knowledge,
    how: _How,
) -> PublishResult:
    gate, matrix, options, workdir = how.gate, how.matrix, how.options, how.workdir
    dry_run, link, verify = options.dry_run, options.link, options.verify
    exchange, fault = options.exchange, options.fault
    held: list[tuple[str, str]] = []
    passing: list[WheelSource] = []
    for src in sources:
        reason = gate.verdict(src.wheel.sha256) if gate is not None else None
        if reason is None:
            passing.append(src)
        else:
            held.append((src.wheel.filename, reason))
    notes: list[str] = []
    if workdir is not None:  # the twins of wheels the gate let through vouch by their bytes
        twins, notes = variant_sources(passing, settings, workdir)
        passing += twins
    site = site.absolute()

    def decide() -> tuple[Manifest, MergeResult, dict[str, bytes], PublishResult]:
        manifest = read_manifest(site)
        result = merge(manifest.wheels, passing)
        _check_foreign(site, result.added)
        runs = {*manifest.smoke, *(gate.runs if gate is not None else ())}
        ordinary = [w for w in result.wheels if not w.in_variant_set]
        cmap = coverage_map(ordinary, kb=kb, runs=runs, matrix=matrix)
        files = render_site(result.wheels, settings, kb, runs=runs, matrix=matrix, coverage=cmap)
        outcome = PublishResult(
            site=site,
            added=tuple(s.wheel.filename for s in result.added),
            unchanged=result.unchanged,
            same_inputs=result.same_inputs,
            held_back=tuple(sorted(held)),
            pages=tuple(p for p in files if p.startswith("torch-") and "/" not in p),
            wheels=len(result.wheels),
            written=not dry_run,
            coverage=cmap,
            notes=tuple(notes),
        )
        return manifest, result, files, outcome

    if dry_run:
        return decide()[3]
    with site_transaction(site, exchange=exchange, fault=fault) as txn:
        # the old wheels are linked on another core while the manifest is read and the
        # pages rendered; an input's name is left to carry_over (it may be new: then the
        # site's file of that name, if any, is not the one to keep)
        inputs = [s.wheel.filename for s in passing]
        txn.prelink(WHEELS_DIR, {*inputs, *(f"{n}.metadata" for n in inputs)})
        manifest, result, files, outcome = decide()  # under the lock: nobody else publishes
        # a page the live site holds with exactly these bytes is kept (linked, or already in
        # the previous generation) rather than written again: a merge changes a few pages
        same = {rel for rel in manifest.generated if rel in files and _holds(site, rel, files)}
        replaced = (set(manifest.generated) | set(files)) - same
        new_hosted = {f"{WHEELS_DIR}/{s.wheel.filename}" for s in result.added if not s.wheel.url}
        replaced |= new_hosted | {f"{p}.metadata" for p in new_hosted}
        kept = set(txn.carry_over(lambda rel: rel not in replaced))
        txn.fault("carried-over")
        missing = [
            rel
            for w in manifest.wheels
            if w.url is None
            for rel in (f"{WHEELS_DIR}/{w.filename}", f"{WHEELS_DIR}/{w.filename}.metadata")
            if rel not in kept
        ]
        if missing:
            raise PublishError(
                f"{site} is damaged: {MANIFEST_NAME} lists files that are missing: "
                + ", ".join(missing[:5])
                + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            )
        for src in result.added:
            if src.wheel.url is None:
                rel = f"{WHEELS_DIR}/{src.wheel.filename}"
                if link:
                    txn.link_in(
                        rel,
                        src.path,
                        sha256=src.wheel.sha256,
                        size=src.size,
                        mtime_ns=src.mtime_ns,
                        verify=verify,
                    )
                else:
                    txn.copy_in(rel, src.path, sha256=src.wheel.sha256)
                txn.write(f"{rel}.metadata", src.metadata)
        txn.fault("wheels-copied")
        for rel, data in files.items():
            if rel not in same or rel not in kept:
                txn.write(rel, data)
        txn.fault("pages-written")
        txn.commit()
    return outcome
