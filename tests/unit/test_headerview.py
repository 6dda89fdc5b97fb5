"""Header views (toolchain/headerview.py): an include directory of the cell's site-packages
copied to a path named by its content, every file dated VIEW_MTIME; a compile's words with
those directories replaced, and the host compiler told to map each view back."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from buildtools.toolchain import devicewrap, headerview
from buildtools.toolchain.devicewrap import WrapConfig, unit_key


def _tree(root: Path, mtime: int, body: str = "int x;\n") -> Path:
    inc = root / "site-packages" / "torch" / "include"
    (inc / "torch").mkdir(parents=True)
    (inc / "torch" / "a.h").write_text(body)
    (inc / "b.h").write_text("#pragma once\n")
    for p in (inc / "torch" / "a.h", inc / "b.h"):
        os.utime(p, (mtime, mtime))
    return inc


def test_include_dirs_reads_every_spelling() -> None:
    words = ["-I/a", "-I", "/b", "-isystem", "/c", "-isystem/d", "--include-path=/e",
             "--include-path", "/f", "-idirafter", "/g", "-Ifoo", "-o", "/h"]  # fmt: skip
    assert headerview.include_dirs(words) == ["/a", "/b", "/c", "/d", "/e", "/f", "/g", "foo"]


def test_one_view_for_the_same_headers_installed_at_other_times(tmp_path: Path) -> None:
    store = tmp_path / "store"
    one = headerview.view_of(store, str(_tree(tmp_path / "cp311", 1_700_000_000)))
    two = headerview.view_of(store, str(_tree(tmp_path / "cp312", 1_750_000_000)))
    assert one is not None and one == two
    assert Path(one, "torch", "a.h").read_text() == "int x;\n"
    assert {p.stat().st_mtime for p in Path(one).rglob("*.h")} == {headerview.VIEW_MTIME}
    other = headerview.view_of(store, str(_tree(tmp_path / "edited", 1, body="int y;\n")))
    assert other is not None and other != one  # other content, another view


def test_a_directory_over_the_limits_gets_no_view(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(headerview, "MAX_FILES", 1)
    assert headerview.view_of(tmp_path / "store", str(_tree(tmp_path, 1))) is None
    assert not list((tmp_path / "store").glob("views/[0-9a-f]*"))


def test_apply_replaces_only_the_site_packages_include_directories(tmp_path: Path) -> None:
    inc = _tree(tmp_path, 1)
    site = inc.parent.parent
    other = tmp_path / "proj" / "csrc"
    other.mkdir(parents=True)
    api = inc / "torch" / "csrc" / "api" / "include"
    api.mkdir(parents=True)
    (api / "c.h").write_text("\n")
    args = ["-c", "k.cu", f"-I{inc}", "-isystem", str(api), f"-I{other}",
            f"-Xcompiler=-ffile-prefix-map={site}=/site-packages"]  # fmt: skip
    env = {"NVCC_APPEND_FLAGS": f"-I{inc} -lineinfo", "PATH": "/bin"}
    done = headerview.apply(tmp_path / "store", str(site), args, env, ("NVCC_APPEND_FLAGS",))
    assert not isinstance(done, str)
    out, out_env, count = done
    assert count == 2
    views = tmp_path / "store" / "views"
    assert out[2].startswith(f"-I{views}/") and out[4].startswith(f"{views}/")
    assert out[5] == f"-I{other}" and out[6] == args[6]  # not in site-packages: kept
    assert out_env["NVCC_APPEND_FLAGS"].startswith(f"-I{views}/")
    assert out_env["PATH"] == "/bin"
    maps = [w for w in out[7:] if w != "-Xcompiler"]
    assert maps == [
        f"-ffile-prefix-map={out[2][2:]}=/site-packages/torch/include",
        f"-ffile-prefix-map={out[4]}=/site-packages/torch/include/torch/csrc/api/include",
    ]


def test_a_unit_with_line_info_has_a_key_only_through_views(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text("__global__ void k() {}\n")
    config = WrapConfig(downstream=("nvcc",), store=str(tmp_path / "store"), job="j")
    base = ["-c", str(tmp_path / "k.cu"), "-o", "k.o", "-MD", "-MF", "k.o.d"]
    for flags in (["-lineinfo"], ["--ptxas-options=-lineinfo"], ["--generate-line-info"]):
        assert unit_key([*base, *flags], {}, config, []) is None
        assert unit_key([*base, *flags], {}, config, [], line_info=True) is not None
    for flags in (["-lineinfo", "-G"], ["-lineinfo", "-Xcompiler=-g"]):  # debug info: never
        assert unit_key([*base, *flags], {}, config, [], line_info=True) is None
    plain = unit_key(base, {}, config, [])
    assert plain != unit_key([*base, "-lineinfo"], {}, config, [], line_info=True)


def test_a_cluster_launcher_turns_line_info_reuse_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build server writes other line tables (no files there to date): a unit with line
    info sent to another launcher than the config's is compiled, not stored."""
    seen: list[WrapConfig] = []
    monkeypatch.setattr(devicewrap, "run", lambda config, args, env: seen.append(config) or 0)
    path = tmp_path / "c.json"
    config = WrapConfig(downstream=("nvcc",), store=str(tmp_path), job="j")
    path.write_text(__import__("json").dumps(config.to_json()))
    monkeypatch.setenv(devicewrap.DOWNSTREAM_VAR, "nvcc")
    assert devicewrap.main([str(path), "-c", "k.cu"]) == 0
    monkeypatch.setenv(devicewrap.DOWNSTREAM_VAR, "sccache nvcc")
    assert devicewrap.main([str(path), "-c", "k.cu"]) == 0
    assert [c.local for c in seen] == [True, False]


def test_a_relative_include_directory_puts_the_compile_directory_in_a_line_info_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-Icsrc` resolves in each cell's own build directory, whose path a line-info object
    keeps: two directories, two keys (one absolute -I: one key, wherever it compiles)."""
    (tmp_path / "k.cu").write_text("__global__ void k() {}\n")
    config = WrapConfig(downstream=("nvcc",), store=str(tmp_path / "store"), job="j")
    base = ["-c", str(tmp_path / "k.cu"), "-o", "k.o", "-MD", "-MF", "k.o.d", "-lineinfo"]
    keys: dict[str, set[str | None]] = {"relative": set(), "absolute": set()}
    for cell in ("cp311", "cp312"):
        (tmp_path / cell).mkdir()
        monkeypatch.chdir(tmp_path / cell)
        keys["relative"].add(unit_key([*base, "-Icsrc"], {}, config, [], line_info=True))
        keys["absolute"].add(unit_key([*base, f"-I{tmp_path}"], {}, config, [], line_info=True))
    assert len(keys["relative"]) == 2 and len(keys["absolute"]) == 1
    assert headerview.compile_dir([f"-I{tmp_path}", "-isystem", "/usr/include"]) is None
