"""Every reference resolves: source tags are defined in docs/sources.md, and nothing in the
repository points at notes that live outside it."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

from buildtools.cli.main import main
from buildtools.knowledge import DATA_DIR

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "docs" / "sources.md"
# R1, V1, M2 … as a word; not 'V13' of 'V13.0.88' (an nvcc version) nor part of a hash or path
TAG_RE = re.compile(r"(?<![\w./@-])([RVM]\d+)(?![\w-]|\.\d)")
DEFINITION_RE = re.compile(r"^- \*\*([RVM]\d+)\*\* ", re.MULTILINE)
# Notes kept outside the repository; written so that this file does not match itself.
OUTSIDE_RE = re.compile(r"FACTS\.md|DESIGN\.md|research[/]|\b[Dd]ecision \d|/work[/]shared")
# Ignored build outputs and caches (.gitignore), never part of the repository.
SKIPPED_DIRS = {"__pycache__", "build", "dist", "wheelhouse", "site", "node_modules"}


def defined_tags() -> list[str]:
    return DEFINITION_RE.findall(SOURCES.read_text(encoding="utf-8"))


def citing_files() -> Iterator[Path]:
    """Data, code and docs: everywhere a source tag may be cited."""
    yield from sorted(DATA_DIR.glob("*.yaml"))
    yield from sorted(DATA_DIR.glob("*.json"))
    yield from sorted((ROOT / "buildtools").rglob("*.py"))
    yield from sorted(p for p in (ROOT / "docs").glob("*.md") if p != SOURCES)
    yield ROOT / "README.md"


def repository_files(top: Path = ROOT) -> Iterator[Path]:
    for path in sorted(top.iterdir()):
        if path.is_dir():
            hidden = path.name.startswith(".") and path.name not in (".github", ".ci")
            if not (hidden or path.name in SKIPPED_DIRS or path.name.endswith(".egg-info")):
                yield from repository_files(path)
        elif path.is_file():
            yield path


def test_sources_md_defines_each_tag_once() -> None:
    tags = defined_tags()
    assert tags, f"no '- **R1** …' entries in {SOURCES}"
    assert len(tags) == len(set(tags)), sorted(t for t in tags if tags.count(t) > 1)


def test_every_source_tag_used_in_data_code_and_docs_is_defined() -> None:
    defined = set(defined_tags())
    missing = [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m[1]}"
        for path in citing_files()
        for text in [path.read_text(encoding="utf-8")]
        for m in TAG_RE.finditer(text)
        if m[1] not in defined
    ]
    assert not missing, "tags not defined in docs/sources.md:\n" + "\n".join(missing)


def test_no_file_points_at_notes_outside_the_repository() -> None:
    hits = []
    for path in repository_files():
        text = path.read_bytes().decode("utf-8", errors="replace")
        hits += [
            f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m[0]}"
            for m in OUTSIDE_RE.finditer(text)
        ]
    assert not hits, "references to files outside the repository:\n" + "\n".join(hits)


def test_tag_pattern() -> None:
    text = "R1 test-infra; (R14, R15); [R9]; nvcc V13.0.88; @e8208cf27; gfx1030; PR2 x R2a"
    assert TAG_RE.findall(text) == ["R1", "R14", "R15", "R9"]


def test_knowledge_command_says_where_its_source_tags_are_explained() -> None:
    out = io.StringIO()
    assert main(["knowledge"], out=out) == 0
    text = out.getvalue()
    assert text.splitlines()[-1].startswith("sources: ") and "docs/sources.md" in text
    assert set(TAG_RE.findall(text)) <= set(defined_tags())
