"""`buildtools index`: publish wheels as a static find-links site and PEP 503 index."""

from __future__ import annotations

__all__ = ["add_index_parser"]

import argparse
from pathlib import Path
from typing import Any, TextIO

from ..errors import PublishError
from ..index.coverage import render_markdown
from ..index.gate import SmokeGate
from ..index.publish import PublishOptions, publish
from ..index.settings import IndexSettings
from ..index.wheels import collect_wheels, read_wheels
from ..knowledge import Knowledge, load_knowledge
from ..matrix.config import IndexConfig, MatrixFile, load_matrix
from ..model import Accelerator
from ..planner import MatrixCells, matrix_cells, torch_index_for
from ..planning import default_matrix_path, host_python


def _matrix(args: argparse.Namespace, kb: Knowledge) -> MatrixFile | None:
    """The matrix.yaml whose `index:` settings and cells the site follows, if any."""
    matrix_path: Path | None = args.matrix
    if matrix_path is None:
        default = default_matrix_path()
        matrix_path = default if default.is_file() else None
    if matrix_path is None or args.no_matrix:
        return None
    return load_matrix(matrix_path, knowledge=kb)


def _torch_indexes(mf: MatrixFile, cells: MatrixCells) -> dict[str, str]:
    """Accelerator → the torch index `accelerators:` names for it, for the matrix's cells."""
    names = {c.accelerator for c in cells.cells} | {r.cell.accelerator for r in cells.impossible}
    found: dict[str, str] = {}
    for name in sorted(names):
        try:
            index = torch_index_for(mf, Accelerator.parse(name))
        except ValueError:
            continue
        if index:
            found[name] = index
    return found


def _settings(
    args: argparse.Namespace, mf: MatrixFile | None, cells: MatrixCells | None
) -> IndexSettings:
    from pydantic import ValidationError

    config = mf.matrix.index if mf is not None else IndexConfig()
    wheel_url_template = args.wheel_url if args.wheel_url is not None else config.wheel_url
    # the options meet the same rules as matrix.yaml's index: settings
    for option, field, value in (
        ("--wheel-url", "wheel_url", args.wheel_url),
        ("--base-url", "base_url", args.base_url),
    ):
        if value:
            try:
                IndexConfig.model_validate({field: value})
            except ValidationError as exc:
                msg = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
                raise PublishError(f"{option}: {msg}") from None
    return IndexSettings(
        base_url=args.base_url if args.base_url is not None else config.base_url,
        wheel_url=wheel_url_template or None,
        alias_patches=config.alias_patches if args.alias_patches is None else args.alias_patches,
        aliases={k: tuple(v) for k, v in sorted(config.aliases.items())},
        torch_indexes=_torch_indexes(mf, cells) if mf is not None and cells is not None else {},
        wheel_variants=config.wheel_variants,
        local_version=config.local_version,
    )


def cmd_index(args: argparse.Namespace, out: TextIO) -> int:
    """`buildtools index`: read wheels, gate them, merge, and publish the site."""
    kb = load_knowledge()
    mf = _matrix(args, kb)
    cells = matrix_cells(mf, kb, host_python=host_python()) if mf is not None else None
    settings = _settings(args, mf, cells)
    paths = collect_wheels(args.paths or [Path("wheelhouse")])
    sources = read_wheels(
        paths, site=args.site, wheel_url_template=settings.wheel_url, verify=args.verify
    )
    gate = SmokeGate.load(args.require_smoke) if args.require_smoke else None
    result = publish(
        args.site,
        sources,
        settings,
        kb,
        gate=gate,
        matrix=cells,
        options=PublishOptions(dry_run=args.dry_run, link=not args.copy, verify=args.verify),
    )
    for name in result.added:
        out.write(f"  new        {name}\n")
    for name in result.unchanged:
        out.write(f"  unchanged  {name}\n")
    for name, why in result.same_inputs:
        out.write(f"  kept       {name} ({why})\n")
    for name, reason in result.held_back:
        out.write(f"  held back  {name} ({reason})\n")
    for note in result.notes:
        out.write(f"note: {note}\n")
    verb = "would publish" if args.dry_run else "published"
    links = settings.base_url or "relative links"
    out.write(
        f"{verb} {len(result.added)} new wheel(s) into {result.site} ({links}); "
        f"{len(result.unchanged)} already published, {len(result.held_back)} held back; "
        f"the site lists {result.wheels} wheel(s) on {len(result.pages)} find-links page(s)\n"
    )
    if not paths:
        out.write("note: no wheels given (pages regenerated from index.json)\n")
    if args.summary:  # '' (an unset $GITHUB_STEP_SUMMARY): no summary
        # a GitHub step summary grows by each step's part: append, never replace
        with Path(args.summary).open("a", encoding="utf-8") as fh:
            fh.write("\n" + render_markdown(result.coverage, title="Coverage of the index"))
    if settings.base_url and not args.dry_run:
        out.write(
            f"note: the links point at {settings.base_url}; to try this site from a local "
            "server (python -m http.server), publish it with --base-url '' (relative links)\n"
        )
    return 0


def add_index_parser(sub: Any) -> None:
    p = sub.add_parser(
        "index",
        help="publish wheels as a static find-links site and PEP 503 index",
        description="Merge wheels into a static site: one find-links page per torch × "
        "accelerator, PEP 503 indexes with PEP 658 metadata, a landing page. Published "
        "wheels are immutable; the site is replaced atomically.",
    )
    p.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="WHEEL_OR_DIR",
        help="wheels, or directories of wheels (default: wheelhouse)",
    )
    p.add_argument("--site", type=Path, default=Path("site"), help="site directory (default: site)")
    p.add_argument("--matrix", type=Path, default=None, help="matrix.yaml for `index:` settings")
    p.add_argument("--no-matrix", action="store_true", help="ignore matrix.yaml's settings")
    p.add_argument(
        "--base-url",
        default=None,
        help="URL the site is served from; links become absolute ('' for relative links)",
    )
    p.add_argument(
        "--wheel-url",
        default=None,
        metavar="TEMPLATE",
        help="wheels live elsewhere: URL template with {filename} (also {project}, {version}, "
        "{public_version}); they are not copied into the site",
    )
    p.add_argument(
        "--alias-patches",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="list a wheel on every patch release of its torch minor (default: on)",
    )
    p.add_argument(
        "--require-smoke",
        action="append",
        type=Path,
        default=[],
        metavar="REPORT",
        help="publish only wheels a smoke report (JSON) marks passed; repeatable",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="hash every wheel (default: reuse the sha256 of the build report or the site's "
        "index.json for a file whose size and mtime are unchanged)",
    )
    p.add_argument(
        "--copy",
        action="store_true",
        help="copy wheels into the site (default: reflink, else hard-link where the "
        "filesystem allows)",
    )
    p.add_argument(
        "--summary",
        default=None,
        metavar="FILE",
        help="append the coverage map (markdown: published, smoke-tested, missing, "
        'impossible) to FILE, e.g. "$GITHUB_STEP_SUMMARY"',
    )
    p.add_argument("--dry-run", action="store_true", help="say what would change; write nothing")
    p.set_defaults(handler=cmd_index)
