"""The container's import test loads a package's torch op library (a `.so` without
`PyInit_<name>`, xformers' `_C.so`) with torch.ops.load_library, for real in a torch env: a
library that loads passes, one that cannot load fails (before, a good one failed the import
by name, and nothing would have noticed a broken one the package loads lazily)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from fixtures.envs import TorchEnv

from buildtools.backends.docker.incontainer import _IMPORT_CODE


def _run(
    env: TorchEnv, site: Path, libraries: list[tuple[str, str]]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(env.python), "-c", _IMPORT_CODE, json.dumps(["xf"]), json.dumps(libraries)],
        cwd=site.parent,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
def test_an_op_library_is_loaded_and_one_that_cannot_load_fails(
    torch213: TorchEnv, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    (site / "xf").mkdir(parents=True)
    (site / "xf" / "__init__.py").write_text("")
    (tmp_path / "lib.c").write_text("int xf_answer(void) { return 42; }\n")
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(site / "xf" / "_C.so"), str(tmp_path / "lib.c")],
        check=True,
        timeout=120,
    )
    good = _run(torch213, site, [("xf", "_C.so")])
    assert good.returncode == 0, good.stderr
    assert "[buildtools] torch.ops.load_library xf/_C.so: ok" in good.stdout

    (site / "xf" / "_broken.so").write_bytes(b"not a shared object")
    bad = _run(torch213, site, [("xf", "_C.so"), ("xf", "_broken.so")])
    assert bad.returncode != 0
    assert "_broken.so" in bad.stderr
