"""`.github/zizmor.yml`: the findings of zizmor that the generated workflows have by design.

`nox -s lint` runs `zizmor --offline --persona=auditor` (pinned) on the generated workflows;
everything it reports is fixed in the generator except two kinds, which are what the
design is (docs/ci.md, "Workflow audits", says why for each):

- `dangerous-triggers`: `release.yml` and `self-hosted.yml` start on `workflow_run`, so
  they run the default branch's workflow file (the one ref the runner groups admit); their
  plan jobs run only for a tag push of this repository, or a pull request from a branch of
  it, and release.yml vets the tag before anything is checked out;
- `self-hosted-runner`: the smoke jobs (and builds) on the project's own GPU machines run
  only in those trusted workflows.

Each is ignored at its exact line (`file:line`), computed here from the generated text,
so a finding anywhere else, or a new kind, still fails the lint; the drift check keeps the
lines current.
"""

from __future__ import annotations

__all__ = ["zizmor_config"]

from collections.abc import Collection, Mapping
from pathlib import PurePosixPath

from ruamel.yaml import YAML

from .yamlwriter import dump


def _lines(text: str, hosted: Collection[str]) -> dict[str, list[int]]:
    """rule → the 1-based lines of `text` (one workflow) where its designed finding sits."""
    doc = YAML(typ="safe", pure=True).load(text) or {}
    lines = text.splitlines()
    found: dict[str, list[int]] = {"dangerous-triggers": [], "self-hosted-runner": []}
    if "workflow_run" in (doc.get("on") or {}):
        found["dangerous-triggers"].append(lines.index("  workflow_run:") + 1)
    start = lines.index("jobs:")
    for name, job in (doc.get("jobs") or {}).items():
        label = job.get("runs-on")
        own = isinstance(label, list) or (
            isinstance(label, str) and "${{" not in label and label not in hosted
        )
        if not own:
            continue
        head = lines.index(f"  {name}:", start)
        line = next(i for i in range(head, len(lines)) if lines[i].startswith("    runs-on:"))
        found["self-hosted-runner"].append(line + 1)
    return found


def zizmor_config(workflows: Mapping[str, str], *, hosted: Collection[str], header: str) -> str:
    """The zizmor configuration ignoring exactly the designed findings of `workflows`
    (path → generated text)."""
    rules: dict[str, dict[str, list[str]]] = {}
    for path, text in workflows.items():
        name = PurePosixPath(path).name
        for rule, numbers in _lines(text, hosted).items():
            for number in numbers:
                rules.setdefault(rule, {"ignore": []})["ignore"].append(f"{name}:{number}")
    notes = [
        header,
        "zizmor's findings that are there by design, each at its line (docs/ci.md, Workflow",
        "audits): `zizmor --offline --persona=auditor --config .github/zizmor.yml .github/workflows`",
    ]
    return dump({"rules": rules}, header=notes)
