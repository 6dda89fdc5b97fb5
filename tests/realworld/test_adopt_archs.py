"""`buildtools init` on published extensions that hard-code their arch flags (issue 40):
the archs it reports per CUDA version are the ones their setup.py passes to nvcc.

Opt-in (`-m realworld`, or `nox -s realworld -- -k archs`). Each sdist is fetched unmodified
from PyPI by `fetch` (pinned by sha256; pip prepares its metadata by running its setup.py,
so the projects' own SKIP_CUDA_BUILD switches are set for that step only) and unpacked;
`init` reads it and never runs it. The expected archs were read from each setup.py by hand
(the `-gencode` pairs and the CUDA versions they are appended under).
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from .corpus import Extension
from .test_corpus import fetch

pytestmark = pytest.mark.realworld


@dataclass(frozen=True, kw_only=True)
class Hardcoded:
    ext: Extension
    skip_env: str  # the project's switch that keeps pip's metadata step from compiling
    # CUDA version → the arch list its build compiles, as init must report it
    archs: dict[str, str]
    # the conditions init cannot evaluate and says it assumed
    assumed: tuple[str, ...] = ()


_MAMBA_STYLE = {
    "12.6": "7.5;8.0;8.7;9.0",  # sm_75, sm_80, sm_87 always; sm_90 from CUDA 11.8
    "13.0": "7.5;8.0;8.7;9.0;10.0;10.3;11.0;12.0;12.1",  # + sm_100, 120 (12.8), 103, 110, 121 (13.0)
}

HARDCODED = (
    Hardcoded(
        ext=Extension(
            name="causal-conv1d",
            version="1.7.0",
            sdist="causal_conv1d-1.7.0.tar.gz",
            sha256="3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b",
            style="setup.py, nine -gencode pairs appended under CUDA-version conditions",
            module="causal_conv1d",
        ),
        skip_env="CAUSAL_CONV1D_SKIP_CUDA_BUILD",
        archs=_MAMBA_STYLE,
    ),
    Hardcoded(
        ext=Extension(
            name="mamba-ssm",
            version="2.3.2.post1",
            sdist="mamba_ssm-2.3.2.post1.tar.gz",
            sha256="104cc47e9101e5401a675fa2b784f2952b9b037f3b1dd83b5ac544394e95d028",
            style="setup.py, the same -gencode pairs, and TORCH_CUDA_ARCH_LIST emptied",
            module="mamba_ssm",
        ),
        skip_env="MAMBA_SKIP_CUDA_BUILD",
        archs=_MAMBA_STYLE,
    ),
    Hardcoded(
        ext=Extension(
            name="flash-attn",
            version="2.8.3.post2",
            sdist="flash_attn-2.8.3.post2.tar.gz",
            sha256="d0f9f0b08a986cdeadbffcf5ec8b3a8f514366c68ad1853d3ab061bc83cc340b",
            style="setup.py, -gencode pairs under CUDA versions and its FLASH_ATTN_CUDA_ARCHS",
            module="flash_attn",
        ),
        skip_env="FLASH_ATTENTION_SKIP_CUDA_BUILD",
        archs={"12.6": "8.0;9.0", "13.0": "8.0;9.0;10.0;12.0"},
        assumed=('"80" in cuda_archs()', '"90" in cuda_archs()', '"120" in cuda_archs()'),
    ),
)


@pytest.mark.parametrize("case", HARDCODED, ids=[h.ext.name for h in HARDCODED])
def test_init_reports_the_archs_the_build_really_compiles(
    case: Hardcoded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(case.skip_env, "TRUE")
    with tarfile.open(fetch(case.ext)) as tar:
        tar.extractall(tmp_path, filter="data")
    (src,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    argv = [sys.executable, "-m", "buildtools", "init", str(src)]
    init = subprocess.run(
        [*argv, "--torch", "2.9.1", "--torch", "2.11.0"],
        text=True,
        capture_output=True,
        check=False,
        timeout=300,
    )
    assert init.returncode == 0, init.stdout + init.stderr
    out = init.stdout
    (tmp_path / "init.txt").write_text(out)
    for cuda, archs in case.archs.items():
        assert f"  CUDA {cuda} build compiles: {archs}\n" in out, out
    for condition in case.assumed:
        assert condition in out
    matrix = (src / "matrix.yaml").read_text()
    assert f'  cu130:\n    arch_list: "{case.archs["13.0"]}"   # setup.py:' in matrix
    assert f'  cu126:\n    arch_list: "{case.archs["12.6"]}"   # setup.py:' in matrix
    assert "    # arch_flags: enforce" in matrix
    assert "einops" in matrix  # their tests import it at top level (issue 40, item 4)
    matrix_argv = ["--matrix", str(src / "matrix.yaml"), "--profile", "release"]
    plan = subprocess.run(
        [*argv[:3], "plan", *matrix_argv, "--format", "ids"],
        text=True,
        capture_output=True,
        check=False,
        timeout=300,
    )
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "torch2.11.0-cu130-cp312" in plan.stdout.split()
