"""A compile of over a minute shows its units in a CI log while it runs: a real build.

tests/fixtures/ext_units (a torch/extension.h binding and four light ATen units, 67 s of
CPU on the build machine) is built with MAX_JOBS=1 against torch 2.13.0 (CPU), no
compiler cache, in a cache directory of its own (no timing of the job recorded, so the
ETA must come from the units) that shares the torch environments of the other tests.
The plain progress lines come every 5 s here instead of 30 (the progress_interval
parameter, not a sleep): the light units after the binding take seconds each.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import textwrap
from pathlib import Path

from fixtures.cli import REPO
from fixtures.envs import cache_dir

from buildtools.backends.base import BackendOptions, BackendSetting
from buildtools.backends.registry import make_backend
from buildtools.knowledge import load_knowledge
from buildtools.planning import PlanRequest, load_plan
from buildtools.wheelbuild.orchestrate import BuildOptions, build_plan

CELL = "torch2.13.0-cpu-cp311"
SOURCES = {f"csrc/{n}.cpp" for n in ("binding", "scale", "shift", "clamp", "norm")}
LINE = re.compile(
    rf"^\[\s*[\d.]+s\] {CELL}: build (\d+)/(\d+) units, (.*), ETA (\d+ s|\d+ min \d+ s|\d+ h \d+ min)$"
)


def test_a_long_compile_prints_units_done_of_total_and_an_eta(tmp_path: Path) -> None:
    project = tmp_path / "ext_units"
    shutil.copytree(REPO / "tests" / "fixtures" / "ext_units", project)
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        textwrap.dedent("""\
        project: {path: ext_units}
        axes:
          torch: ["2.13.0"]
          accelerator: [cpu]
          python: ["3.11"]
        accelerators:
          cpu: {torch_index: https://download.pytorch.org/whl/cpu}
        """)
    )
    env = dict(os.environ)
    plan, project_dir = load_plan(PlanRequest(matrix=matrix), env=env)
    assert [j.id for j in plan.jobs] == [CELL]
    cache = tmp_path / "cache"
    cache.mkdir()
    shared = cache_dir() / "envs"  # the torch environment other tests made, reused
    shared.mkdir(parents=True, exist_ok=True)
    (cache / "envs").symlink_to(shared)
    kb = load_knowledge()
    out = io.StringIO()
    report = build_plan(
        plan,
        kb=kb,
        opts=BuildOptions(
            project_dir=project_dir,
            wheelhouse=tmp_path / "wheelhouse",
            cache_dir=cache,
            env=env,
            live=False,
            max_jobs=1,
            compiler_cache="none",
            progress_interval=5.0,
        ),
        backend=make_backend(
            "local", BackendSetting(kb=kb, cache_dir=cache, env=env), BackendOptions()
        ),
        out=out,
    )
    text = out.getvalue()
    (cell,) = report.cells
    assert cell.status.value == "built", f"{cell.reason}\n{text}"
    lines = [m for m in map(LINE.match, text.splitlines()) if m]
    assert lines, text
    # every line counts the fixture's five units; one that has units done has an ETA by their rate
    assert {m[2] for m in lines} == {"5"}, text
    assert any(int(m[1]) >= 1 for m in lines), text
    # the unit running now, read from the job's ninja in /proc: MAX_JOBS=1, one at a time
    running = [m[3] for m in lines if m[3].startswith("1 running (longest: csrc/")]
    assert running, text
    assert all(r.split("longest: ")[1].split(" ")[0] in SOURCES for r in running), text
    # the report's slowest units: every unit ninja ran, by its seconds in .ninja_log
    data = json.loads((tmp_path / "wheelhouse" / "report.json").read_text())
    slowest = data["cells"][0]["slowest_units"]
    assert {u["unit"] for u in slowest} == SOURCES
    assert slowest[0]["unit"] == "csrc/binding.cpp"  # torch/extension.h: ~15x a light unit
    assert all(u["seconds"] > 0 for u in slowest)
