"""The torch a wheel must work with, read from its installation without importing it."""

from __future__ import annotations

__all__ = ["TorchTarget", "load_torch_target"]

import ast
import json
from dataclasses import dataclass
from pathlib import Path

from ...errors import ToolchainError
from ...runner import Runner
from ..elf import inspect_elf


@dataclass(frozen=True, kw_only=True)
class TorchTarget:
    """One installed torch a wheel must work with."""

    version: str
    site_packages: Path
    cuda_version: str | None = None
    hip_version: str | None = None
    cxx11_abi: bool = True

    @property
    def label(self) -> str:
        return f"torch {self.version}"


def _literal_assignments(source: str) -> dict[str, object]:
    values: dict[str, object] = {}
    for node in ast.parse(source).body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and value is not None:
            try:
                values[target.id] = ast.literal_eval(value)
            except ValueError:
                continue
    return values


def _c10_cxx11(libc10: Path) -> bool:
    exported = inspect_elf(libc10).exported
    ctors = [s for s in exported if s.startswith("_ZN3c105ErrorC")]
    if ctors:
        return any("__cxx11" in s for s in ctors)
    return any("__cxx11" in s for s in exported)


def load_torch_target(site_packages: Path, *, runner: Runner | None = None) -> TorchTarget:
    """Describe the torch installed in `site_packages` without importing it.

    Reads torch/version.py (`__version__`, `cuda`, `hip`) and takes the C++ ABI from
    libc10.so's c10::Error constructor. With a `runner`, a torch whose version.py cannot
    be read is asked directly (`python -c 'import torch'` in that environment).
    """
    site_packages = site_packages.resolve()
    version_py = site_packages / "torch" / "version.py"
    values: dict[str, object] = {}
    if version_py.is_file():
        values = _literal_assignments(version_py.read_text(errors="replace"))
    if not isinstance(values.get("__version__"), str) and runner is not None:
        values = _ask_torch(site_packages, runner)
    version = values.get("__version__")
    if not isinstance(version, str):
        raise ToolchainError(
            f"{site_packages}: no readable torch/version.py; install the target torch there "
            "(pip install torch==X.Y.Z --target or into the job's venv)"
        )
    libc10 = site_packages / "torch" / "lib" / "libc10.so"
    if not libc10.is_file():
        raise ToolchainError(f"{libc10}: missing; the torch installation is incomplete")
    cuda = values.get("cuda")
    hip = values.get("hip")
    return TorchTarget(
        version=version,
        site_packages=site_packages,
        cuda_version=cuda if isinstance(cuda, str) else None,
        hip_version=hip if isinstance(hip, str) else None,
        cxx11_abi=_c10_cxx11(libc10),
    )


def _ask_torch(site_packages: Path, runner: Runner) -> dict[str, object]:
    # <env>/lib/pythonX.Y/site-packages → <env>/bin/python
    python = site_packages.parents[2] / "bin" / "python"
    code = (
        "import json, torch; print(json.dumps({'__version__': torch.__version__, "
        "'cuda': torch.version.cuda, 'hip': torch.version.hip}))"
    )
    result = runner.run([str(python), "-c", code], capture=True)
    for line in reversed(result.output.splitlines()):
        if line.startswith("{"):
            data = json.loads(line)
            if isinstance(data, dict):
                return data
    return {}
