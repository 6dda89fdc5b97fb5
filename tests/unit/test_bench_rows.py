"""bench/suite.py's rows: the docker edit target of a corpus extension is its own row."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import suite  # noqa: E402  (bench/suite.py)


def _corpus(edit: float) -> dict[str, object]:
    return {
        "cells": [
            {
                "cell": "torch2.11.0-cu130-cp312",
                "project": "xformers-0.0.33.post2",
                "edited": "xformers/csrc/attention/cuda/matmul.cu",
                "median_s": {"cold": 500.0, "noop": 2.0, "edit": edit},
                "noop_ratio": 2.0 / 500.0,
                "edit_ratio": edit / 500.0,
            }
        ]
    }


def test_the_corpus_edit_row_holds_the_many_cu_target() -> None:
    rows = {r.name: r for r in suite.device_rows({"containers_corpus": _corpus(112.0)})}
    edit = rows[
        "docker: code edit of one .cu (matmul.cu) / cold build "
        "(xformers-0.0.33.post2, torch2.11.0-cu130-cp312)"
    ]
    assert (edit.target, edit.ok, round(edit.ratio or 0, 3)) == ("≤ 0.25", True, 0.224)
    missed = suite.device_rows({"containers_corpus": _corpus(415.0)})
    assert [r.ok for r in missed] == [True, False]


def test_a_skipped_corpus_run_gives_no_rows() -> None:
    assert suite.device_rows({"containers_corpus": {"skipped": "no Docker engine"}}) == []


def test_every_benchmark_has_its_script() -> None:
    for name in suite.NAMES:
        assert (BENCH / f"{suite.SCRIPT.get(name, name)}.py").is_file(), name
