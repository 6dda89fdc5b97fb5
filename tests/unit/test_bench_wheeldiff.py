"""bench/distributed.py names where two wheels differ: the member, and the ELF section."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

from elftools.elf.elffile import ELFFile

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import distributed  # noqa: E402  (bench/distributed.py)

ELF = Path(sys.executable).resolve()


def _wheel(path: Path, so: bytes, record: str) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("pkg/_ext.so", so)
        zf.writestr("pkg/__init__.py", "")
        zf.writestr("pkg-1.dist-info/RECORD", record)
    return path


def test_differences_name_the_member_and_its_section(tmp_path: Path) -> None:
    so = ELF.read_bytes()
    with ELF.open("rb") as f:
        text = ELFFile(f).get_section_by_name(".text")
        assert text is not None
        at = text["sh_offset"] + text["sh_size"] // 2
    changed = bytearray(so)
    changed[at] ^= 0xFF
    a = distributed.digests(_wheel(tmp_path / "a.whl", so, "r"))
    b = distributed.digests(_wheel(tmp_path / "b.whl", bytes(changed), "r"))
    c = distributed.digests(_wheel(tmp_path / "c.whl", so, "other"))
    assert distributed.differences(a, a) == []
    assert distributed.differences(a, b) == ["pkg/_ext.so", "pkg/_ext.so[.text]"]
    assert distributed.differences(a, c) == ["pkg-1.dist-info/RECORD"]


def test_a_member_that_only_looks_like_elf_is_named_not_raised(tmp_path: Path) -> None:
    a = distributed.digests(_wheel(tmp_path / "a.whl", b"\x7fELF garbage", "r"))
    assert "pkg/_ext.so" in a and "pkg/_ext.so[unreadable]" in a


def test_a_killed_run_without_a_fallback_proves_nothing() -> None:
    runs = {
        "2x1": {"compiles": {"fell_back": 0}},
        "2x1-killed": {"during_done": True, "compiles": {"fell_back": 1}},
        "late-kill": {"during_done": True, "compiles": {"fell_back": 0}},
        "no-kill": {"during_done": False, "compiles": {"fell_back": 0}},
    }
    assert distributed._kills_proved(runs) == {
        "2x1-killed_proved": True,
        "late-kill_proved": False,
        "no-kill_proved": False,
    }


def test_the_model_of_more_servers_only_from_a_cluster_budget_run() -> None:
    # with the build's own budget the client compiles refused units too: the model, which
    # takes every unit for a remote one, would be nonsense there
    def run(wall: float, sha: str) -> dict[str, object]:
        return {"wall_s": wall, "sha256": sha, "unit_s": [10.0, 20.0, 30.0]}

    runs = {"here": run(200.0, "a"), "1x1": run(160.0, "a"), "2x1": run(100.0, "b")}
    plain = distributed._ratios(runs, 1, modelled=False)
    assert plain["ratio_2x1_vs_1x1"] == 100.0 / 160.0
    assert plain["ratio_2x1_vs_here"] == 0.5
    assert "model_wall_s_by_servers" not in plain
    modelled = distributed._ratios(runs, 1, modelled=True)
    assert modelled["model_wall_s_by_servers"]["1"] == 160.0
