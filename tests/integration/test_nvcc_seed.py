"""nvcc's module id with and without buildtools' seed, with the real nvcc (no GPU needed).

A `.cu` file with no external function: cudafe++ ends its module id with its own process id,
so two compiles of the same file differ; with `nvcc_seed_env`'s flag they are the same bytes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from buildtools.backends.base import nvcc_seed_env
from buildtools.ecosystem import load_ecosystem

NVCC = shutil.which("nvcc")
ANONYMOUS_CU = (
    "namespace {\n__global__ void kern(int* x) { x[0] = 1; }\n}\n"
    "static void (*keep)(int*) = kern;\n"
)


def _version() -> str | None:
    if NVCC is None:
        return None
    argv = [NVCC, "--version"]
    out = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60).stdout
    found = re.search(r"release (\d+\.\d+)", out)
    return found[1] if found else None


VERSION = _version()
pytestmark = pytest.mark.skipif(NVCC is None, reason="needs nvcc on PATH (no GPU needed)")


def _compile(tmp_path: Path, name: str, flags: dict[str, str]) -> bytes:
    assert NVCC is not None
    keep = tmp_path / f"keep-{name}"  # nvcc's own temporary names out of the object
    keep.mkdir()
    env = {**os.environ, "NVCC_APPEND_FLAGS": flags.get("NVCC_APPEND_FLAGS", "")}
    subprocess.run(
        [NVCC, "-c", "k.cu", "-o", f"{name}.o", "-gencode", "arch=compute_90,code=sm_90",
         "--keep", "--keep-dir", str(keep)],
        cwd=tmp_path, env=env, check=True, timeout=300,
    )  # fmt: skip
    return (tmp_path / f"{name}.o").read_bytes()


@pytest.mark.parametrize(("seeded", "same"), [(True, True), (False, False)], ids=["ours", "none"])
def test_the_seed_makes_a_cu_file_without_external_functions_reproducible(
    tmp_path: Path, seeded: bool, same: bool
) -> None:
    flags = nvcc_seed_env({}, VERSION) if seeded else {}
    if seeded and not flags:
        since = load_ecosystem().nvcc_options_since["-frandom-seed"]
        pytest.skip(f"nvcc {VERSION} has no -frandom-seed (since {since})")
    (tmp_path / "k.cu").write_text(ANONYMOUS_CU)
    assert (_compile(tmp_path, "a", flags) == _compile(tmp_path, "b", flags)) is same
