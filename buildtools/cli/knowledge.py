"""`buildtools knowledge`: print the knowledge base, or check it against the package index."""

from __future__ import annotations

__all__ = ["add_knowledge_parser"]

import argparse
import os
from pathlib import Path
from typing import Any, TextIO

from packaging.version import InvalidVersion, Version

from ..cachedir import default_cache_dir
from ..ecosystem import load_ecosystem
from ..errors import ExitCode, KnowledgeError, PlanError
from ..http import UrllibHttp
from ..knowledge import Knowledge, load_knowledge
from ..torchindex import IndexReader, check_index, served_releases
from ..torchindex.indexcache import DEFAULT_MAX_AGE
from ..torchindex.propose import propose_row
from ..untrusted import shown
from .common import release


def _print_knowledge(kb: Knowledge, out: TextIO) -> None:
    for minor, rel in kb.torch.items():
        cuda = ", ".join(rel.cuda) or "-"
        rocm = ", ".join(rel.rocm) or "-"
        ft = "".join(f" + {p}t" for p in rel.free_threaded)
        flag = "" if rel.confirmed else "  (unconfirmed: " + (rel.note or "") + ")"
        out.write(
            f"torch {minor}: patches {', '.join(rel.patches)}; python {', '.join(rel.python)}"
            f"{ft}; cuda {cuda} (PyPI: {rel.pypi_cuda or 'cpu'}); rocm {rocm}; "
            f"{rel.platform_tag}; cxx11 {'yes' if rel.cxx11_abi else 'no'}; {rel.cxx_std}; "
            f"stable ABI {'yes' if rel.stable_abi else 'no'}{flag}\n"
        )
    # The notes cite source tags (R27, V1, …): say where those are explained.
    out.write(
        "sources: the `source` of each row in buildtools/data/*.yaml; tags such as R1 or V1 "
        "are listed in docs/sources.md of the torch-buildtools repository\n"
    )


def reader_from_args(args: argparse.Namespace) -> IndexReader:
    """The package index reader the options name (URL, cache, its age limit)."""
    cache = args.cache_dir or default_cache_dir(os.environ)
    return IndexReader(
        UrllibHttp(),
        index_url=args.index_url or load_ecosystem().package_index,
        cache_dir=cache,
        max_age=args.max_age,
    )


def check_and_report(
    kb: Knowledge, reader: IndexReader, out: TextIO, *, since: str | None = None
) -> int:
    """Print every release checked and each difference; the exit code."""
    report, answer = check_index(kb, reader, since=since)
    out.write(
        shown(
            f"checking {kb.data_dir} against {answer.page.url} "
            f"({reader.requests} request(s) to the index; "
            f"{'page from the cache' if answer.from_cache else 'page fetched now'})",
            newlines=False,
        )
        + "\n"
    )
    for version, summary in report.checked:  # the index's answers: its text, made printable
        out.write(shown(f"  {version}: {summary}", newlines=False) + "\n")
    for line in report.not_checked:
        out.write(shown(f"  not checked: {line}", newlines=False) + "\n")
    if report.ok:
        out.write(f"{len(report.checked)} release(s) checked: the data matches the index\n")
        return int(ExitCode.OK)
    out.write(f"{len(report.differences)} difference(s):\n")
    for diff in report.differences:
        out.write(shown(f"  {diff}", newlines=False) + "\n")
    out.write(
        "change the data (each row cites its source: docs/sources.md), then run "
        "`buildtools knowledge --check-index` again\n"
    )
    return int(ExitCode.KNOWLEDGE)


def _propose(kb: Knowledge, version: str, args: argparse.Namespace, out: TextIO) -> int:
    try:
        wanted = Version(version)
    except InvalidVersion:
        raise PlanError(f"--propose {version!r}: not a torch version, e.g. 2.16.0") from None
    releases, answer = served_releases(reader_from_args(args), since=str(wanted))
    found = next((r for r in releases if Version(r.version) == wanted), None)
    if found is None:
        raise KnowledgeError(f"{answer.page.url} serves no torch {version} wheel")
    out.write(
        shown(
            f"# a row for buildtools/data/torch.yaml's `releases:` (from {answer.page.url})",
            newlines=False,
        )
        + "\n"
    )
    out.write(propose_row(kb, found))
    return int(ExitCode.OK)


def cmd_knowledge(args: argparse.Namespace, out: TextIO) -> int:
    kb = load_knowledge(args.data)
    if args.propose:
        return _propose(kb, args.propose, args, out)
    if args.check_index:
        return check_and_report(kb, reader_from_args(args), out, since=args.since)
    _print_knowledge(kb, out)
    return int(ExitCode.OK)


def add_index_args(p: argparse.ArgumentParser) -> None:
    """The options of a command that asks the package index about torch."""
    p.add_argument(
        "--index-url",
        default=None,
        metavar="URL",
        help="the PEP 691 simple index to ask (default: PyPI's, data/ecosystem.json)",
    )
    p.add_argument(
        "--max-age",
        type=float,
        default=DEFAULT_MAX_AGE,
        metavar="SECONDS",
        help="reuse the index's answer cached this recently (default: %(default)s; 0: ask again)",
    )
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="where answers are cached (default: $BUILDTOOLS_CACHE_DIR or "
        "~/.cache/torch-buildtools)",
    )


def add_knowledge_parser(sub: Any) -> None:
    p = sub.add_parser(
        "knowledge",
        help="print the torch compatibility knowledge base, or check it against the index",
    )
    p.add_argument(
        "--check-index",
        action="store_true",
        help="compare every torch release the package index serves with the data: exists, "
        f"Python tags (free-threaded too), platforms, manylinux tag, PyPI CUDA; exit "
        f"{int(ExitCode.KNOWLEDGE)} naming the data file and key of each difference",
    )
    p.add_argument(
        "--since",
        metavar="MINOR",
        type=release,
        default=None,
        help="with --check-index: only torch MINOR (e.g. 2.14) and newer releases",
    )
    p.add_argument(
        "--propose",
        metavar="VERSION",
        type=release,
        default=None,
        help="print a torch.yaml row for a release the data lacks (unread facts copied from "
        "the newest release and marked unconfirmed)",
    )
    p.add_argument(
        "--data",
        type=Path,
        default=None,
        metavar="DIR",
        help="the data directory to read (default: the package's; a maintainer's edited copy)",
    )
    add_index_args(p)
    p.set_defaults(handler=cmd_knowledge)
