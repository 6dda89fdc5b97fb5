"""`buildtools init` adds what the tests import at top level to project.smoke_requires."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from buildtools.adopt import inspect_project
from buildtools.adopt.smokedeps import load_import_dists, top_level_imports
from buildtools.cli import main as cli
from buildtools.errors import KnowledgeError

TEST_MODULE = """\
import math
import os.path
import pytest
import torch
import torch.nn.functional as F
from einops import rearrange
import yaml, cv2
from PIL import Image
import sklearn.metrics
from . import helpers
from conftest import make
from test_other import shared
from ops_pkg import kernels
import ops_cuda
import torchvision
import triton

try:
    import scipy
except ImportError:
    scipy = None

if torch.cuda.is_available():
    import pynvml


def test_x():
    import pandas
"""


def test_only_unconditional_top_level_imports() -> None:
    assert top_level_imports(TEST_MODULE) == (
        "math",
        "os",
        "pytest",
        "torch",
        "einops",
        "yaml",
        "cv2",
        "PIL",
        "sklearn",
        "conftest",
        "test_other",
        "ops_pkg",
        "ops_cuda",
        "torchvision",
        "triton",
    )
    assert top_level_imports("def (:\n") == ()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "ops"
    (root / "ops_pkg").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "ops_pkg" / "__init__.py").write_text("")
    (root / "setup.py").write_text(
        "from setuptools import setup\n"
        "from torch.utils.cpp_extension import CUDAExtension\n"
        'setup(name="ops-pkg", ext_modules=[CUDAExtension("ops_cuda", ["k.cu"])])\n'
    )
    (root / "tests" / "test_ops.py").write_text(TEST_MODULE)
    (root / "tests" / "conftest.py").write_text("import hypothesis\n")
    (root / "tests" / "test_other.py").write_text("shared = 1\n")
    return root


def test_the_tests_imports_become_smoke_requires(project: Path) -> None:
    found = inspect_project(project)
    # stdlib, torch, pytest, the project's package and compiled module, the tests' own
    # modules left out; import names mapped to their distributions
    assert found.smoke_requires == (
        "hypothesis",  # conftest.py's, read first
        "einops",
        "PyYAML",
        "opencv-python",
        "Pillow",
        "scikit-learn",
    )
    assert found.notes == (
        "the tests import torchvision: not added to smoke_requires, must be the release made "
        "for the cell's torch: add it with its pin yourself",
        "the tests import triton: not added to smoke_requires, installed with a CUDA torch on "
        "Linux (its Requires-Dist)",
    )
    out = io.StringIO()
    assert cli.main(["init", str(project), "--torch", "2.11.0"], out=out) == 0
    matrix = (project / "matrix.yaml").read_text()
    assert (
        "  smoke_requires: [pytest, hypothesis, einops, PyYAML, opencv-python, Pillow, "
        "scikit-learn]   # pytest and what the tests import at top level\n"
    ) in matrix
    assert "the tests import at top level: hypothesis, einops, PyYAML" in out.getvalue()
    assert cli.main(["plan", "--matrix", str(project / "matrix.yaml")]) == 0


def test_a_name_yaml_would_read_as_another_type_is_quoted(project: Path) -> None:
    (project / "tests" / "test_ops.py").write_text("import null\nimport yes\n")
    (project / "tests" / "conftest.py").unlink()
    assert cli.main(["init", str(project), "--torch", "2.11.0"]) == 0
    assert '  smoke_requires: [pytest, "null", "yes"]' in (project / "matrix.yaml").read_text()


def test_the_table_is_validated(tmp_path: Path) -> None:
    table = load_import_dists()
    assert table.dists["yaml"] == "PyYAML" and "torchvision" in table.with_torch
    bad = tmp_path / "import_dists.yaml"
    bad.write_text("dists:\n  - {import: 'a-b', dist: x, source: y}\nwith_torch: []\n")
    with pytest.raises(KnowledgeError, match=r"dists\[0\]: needs import \(a Python identifier\)"):
        load_import_dists(bad)
    bad.write_text("dists:\n  - {import: a, dist: 'x y', source: s}\nwith_torch: []\n")
    with pytest.raises(KnowledgeError, match="'x y' is not a project name"):
        load_import_dists(bad)
    bad.write_text("dists: []\n")
    with pytest.raises(KnowledgeError, match="with_torch: a list of rows is required"):
        load_import_dists(bad)
