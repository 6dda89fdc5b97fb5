"""`buildtools init`: adopt buildtools in an existing extension's repository.

`inspect` reads the repository (build files, sources, tests), `risks` finds what will break
before any build, `render` writes the matrix.yaml and noxfile.py proposed for it.
"""

from __future__ import annotations

__all__ = [
    "Inspection",
    "MatrixChoice",
    "Risk",
    "choose_matrix",
    "cuda_headers_in_cpu_build",
    "find_risks",
    "inspect_project",
    "render_matrix",
    "render_noxfile",
]

from .inspect import Inspection, inspect_project
from .risks import Risk, cuda_headers_in_cpu_build, find_risks
from .scaffold import MatrixChoice, choose_matrix, render_matrix, render_noxfile
