"""`ci-run --target backfill-window` (ci/act/window.py): the gate on its last run
(`gates.check_window_publish`) against crafted run directories, and the gh stand-in's
attestation store that lets a later run verify an earlier run's record. The act runs
themselves are tests/integration/test_act.py (opt-in)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CELL = "torch2.12.1-cpu-cp311"
WHEEL = "ext_stable-0.1.0+pt211cpu-cp311-abi3-manylinux_2_34_x86_64.whl"
JOBS = (
    "plan",
    "smoke-only torch2.12.1-cpu-cp311 (cpu, published wheel)",
    "prepare the release",
    "publish the release",
    "status",
)


@pytest.fixture(scope="module")
def gates() -> Iterator[ModuleType]:
    sys.path.insert(0, str(REPO / "ci" / "act"))
    try:
        spec = importlib.util.spec_from_file_location("gates", REPO / "ci" / "act" / "gates.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(REPO / "ci" / "act"))


class _Fake:
    """What the gate reads of the fake GitHub: its state directory (pages, requests)."""

    def __init__(self, state: Path) -> None:
        self.state = state

    def uploads(self) -> list[dict[str, object]]:
        log = self.state / "requests.jsonl"
        rows = [json.loads(x) for x in log.read_text().splitlines()] if log.is_file() else []
        return [r for r in rows if str(r.get("path", "")).startswith("/uploads")]


def _run(
    tmp: Path,
    *,
    jobs: tuple[str, ...] = JOBS,
    smoked: str | None = "2.12.1+cu130",
    status: str = "passed",
    listed: bool = True,
    uploaded: bool = False,
) -> tuple[Path, _Fake]:
    """A run directory as act left it in the run that passed (its log, the artifacts: the
    leg's report also holds the wheel's other torch releases), and the fake's state."""
    run = tmp / "run"
    lines = [f"[release/{j}] 🏁  Job succeeded" for j in jobs]
    lines.append(f"[release/{JOBS[1]}]   | {WHEEL}: sha256 0123…, as the published record says")
    (run / "artifacts" / f"wheels-window-{CELL}").mkdir(parents=True)
    (run / "artifacts" / f"wheels-window-{CELL}" / WHEEL).write_bytes(b"wheel")
    (run / "act.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    results = [
        {"cell": "torch2.13.0-cpu-cp311", "status": "passed", "torch": "2.13.0+cpu"},
        {"cell": "torch2.11.0-cpu-cp311", "status": "passed", "torch": "2.11.0+cu130"},
    ]
    if smoked is not None:
        results.append({"cell": CELL, "status": status, "torch": smoked})
    report = run / "artifacts" / f"smoke-window-{CELL}" / "report.json"
    report.parent.mkdir(parents=True)
    report.write_text(json.dumps({"results": results}), encoding="utf-8")
    state = tmp / "github"
    page = state / "pages" / "whl" / "torch-2.12.1+cpu.html"
    page.parent.mkdir(parents=True)
    href = WHEEL.replace("+", "%2B")
    page.write_text(f'<a href="../{href}">{WHEEL}</a>' if listed else "", encoding="utf-8")
    if uploaded:
        row = {"method": "POST", "path": f"/uploads/repos/o/r/releases/1/assets?name={href}"}
        (state / "requests.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    return run, _Fake(state)


def _problems(gates: ModuleType, run: Path, fake: _Fake) -> list[str]:
    o = gates.Outcome("backfill-window", "", 0, 1.0, run / "act.log", run)
    gates.check_window_publish(o, fake, cell=CELL, torch="2.12.1", uploads_before=0)
    return list(o.problems)


def test_a_smoked_and_listed_window_wheel_passes(gates: ModuleType, tmp_path: Path) -> None:
    assert _problems(gates, *_run(tmp_path)) == []


@pytest.mark.parametrize(
    ("planted", "named"),
    [
        ({"smoked": None}, "without a passing smoke of torch2.12.1-cpu-cp311 on torch 2.12.1"),
        ({"status": "failed"}, "without a passing smoke"),
        ({"smoked": "2.11.0+cu130"}, "without a passing smoke"),
        ({"listed": False}, "no page of torch 2.12.1 lists"),
        ({"jobs": (*JOBS, "build torch2.12.1-cpu-stable")}, "a build ran for the window cell"),
        ({"jobs": JOBS[:1] + JOBS[2:]}, "job 'smoke-only': not run"),
        ({"uploaded": True}, "the wheel was uploaded again"),
    ],
)
def test_the_gate_fails_a_planted_variant(
    gates: ModuleType, tmp_path: Path, planted: dict[str, Any], named: str
) -> None:
    problems = _problems(gates, *_run(tmp_path, **planted))
    assert any(named in p for p in problems), problems


def _gh() -> ModuleType:
    path = REPO / "ci" / "act" / "bin" / "gh"
    loader = importlib.machinery.SourceFileLoader("act_gh", str(path))
    spec = importlib.util.spec_from_loader("act_gh", loader)
    assert spec
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _verify(gh: ModuleType, record: Path) -> int:
    argv = [str(record), "--repo", "o/r", "--signer-workflow", "o/r/.github/workflows/release.yml"]
    argv += ["--predicate-type", "https://example.invalid/release/v1", "--format", "json"]
    return int(gh.verify(argv))


def test_a_later_run_verifies_the_record_an_earlier_run_attested(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The backfill run checks the release's index.json against the repository's
    attestations (GitHub keeps them): with only its own run's log it cannot, and stops."""
    import hashlib

    record = tmp_path / "index.json"
    record.write_bytes(b'{"wheels": []}')
    digest = hashlib.sha256(record.read_bytes()).hexdigest()
    statement = {
        "action": "actions/attest-build-provenance",
        "predicate_type": "https://example.invalid/release/v1",
        "subjects": [f"{digest}  index.json"],
        "certificate": {
            "sourceRepositoryURI": "https://github.com/o/r",
            "buildSignerURI": "https://github.com/o/r/.github/workflows/release.yml@refs/heads/main",
            "runnerEnvironment": "github-hosted",
        },
    }
    store = tmp_path / "github" / "attestations.jsonl"
    store.parent.mkdir()
    store.write_text(json.dumps(statement) + "\n", encoding="utf-8")
    later_run_log = tmp_path / "backfill" / "standins.jsonl"
    later_run_log.parent.mkdir()
    later_run_log.touch()
    monkeypatch.setenv("BT_ACT_LOG", str(later_run_log))
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    gh = _gh()

    monkeypatch.delenv("BT_ACT_ATTESTATIONS", raising=False)
    assert _verify(gh, record) == 1  # this run's own log holds no statement of the record
    assert "no attestation of index.json" in capsys.readouterr().err

    monkeypatch.setenv("BT_ACT_ATTESTATIONS", str(store))
    assert _verify(gh, record) == 0
    verified = json.loads(capsys.readouterr().out)
    assert verified[0]["verificationResult"]["statement"]["subject"][0]["digest"] == {
        "sha256": digest
    }
    record.write_bytes(b'{"wheels": ["other"]}')  # other bytes: the statement does not hold
    assert _verify(gh, record) == 1
