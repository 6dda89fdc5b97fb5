"""The smoke child's module identity, with real extension modules compiled here (gcc).

An import proves a wheel's module only when what came back is the wheel's file: a name the
standard library takes (`os`), the child's own script name, a stub a package puts in
sys.modules or a `top_level.txt` naming a module the wheel lacks all return something
else. A non-ASCII module (PEP 489's `PyInitU_`) is loaded like any other; a module file
whose init function is another name's is an error found from its ELF symbols.

The child runs under this interpreter with a stand-in `torch` package (the child imports
torch first; what is under test here is what comes after), in a site directory of its own.
"""

from __future__ import annotations

import importlib.machinery
import json
import sys
import sysconfig
from pathlib import Path

import pytest

from buildtools.process import SubprocessRunner
from buildtools.smoke.child import CHILD_SCRIPT, parse_child_report
from buildtools.smoke.modules import child_spec, compiled_modules, load_outcomes
from buildtools.wheel.checks.elves import WheelElf
from buildtools.wheel.elf import inspect_elf

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(sys.platform != "linux", reason="/proc/self/maps and ELF are Linux's"),
]

RUNNER = SubprocessRunner()
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]  # ".cpython-311-x86_64-linux-gnu.so"
PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"

_MODULE_C = """
#include <Python.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "%(name)s", NULL, 0, NULL};
PyMODINIT_FUNC %(init)s(void) { return PyModuleDef_Init(&def); }  /* PEP 489 */
"""


def _compile(path: Path, *, name: str, init: str) -> None:
    source = path.with_suffix(".c")
    source.write_text(_MODULE_C % {"name": name, "init": init}, encoding="utf-8")
    include = sysconfig.get_paths()["include"]
    result = RUNNER.run(
        ["gcc", "-shared", "-fPIC", f"-I{include}", "-o", str(path), str(source)],
        capture=True,
        timeout=120,
    )
    assert result.ok, result.output
    source.unlink()


def _site(tmp_path: Path) -> Path:
    """A site directory with a stand-in torch, the child's first import."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(
        "import types\n__version__ = '0+stand-in'\nversion = types.SimpleNamespace(cuda=None)\n",
        encoding="utf-8",
    )
    return site


def _run_child(tmp_path: Path, site: Path, spec: dict[str, object]) -> tuple[int, str]:
    script = tmp_path / "child" / "buildtools_import_check.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text(CHILD_SCRIPT, encoding="utf-8")
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    result = RUNNER.run(
        [sys.executable, str(script), json.dumps(spec)],
        cwd=cwd,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture=True,
        timeout=120,
    )
    return result.returncode, result.output


def _wheel_files(site: Path, members: list[str]) -> list[WheelElf]:
    return [
        WheelElf(arcname=m, info=inspect_elf(site / m), grafted=False)
        for m in members
        if m.endswith(".so")
    ]


def test_every_compiled_module_is_the_wheels_own_file(tmp_path: Path) -> None:
    site = _site(tmp_path)
    (site / "pkg").mkdir()
    # pkg plants a stub under its module's name, naming the module's own file
    (site / "pkg" / "__init__.py").write_text(
        "import sys, types, os\n"
        "stub = types.ModuleType('pkg._stubbed')\n"
        f"stub.__file__ = os.path.join(os.path.dirname(__file__), '_stubbed{SUFFIX}')\n"
        "sys.modules['pkg._stubbed'] = stub\n",
        encoding="utf-8",
    )
    members = [
        f"os{SUFFIX}",  # shadows the standard library's os: the import returns that one
        f"buildtools_import_check{SUFFIX}",  # the child script's own name
        f"café{SUFFIX}",  # PEP 489: PyInitU_caf_dma
        f"pkg/_fine{SUFFIX}",
        f"pkg/_stubbed{SUFFIX}",
        f"pkg/_renamed{SUFFIX}",  # exports PyInit__original
        "pkg/__init__.py",
    ]
    inits = {
        f"os{SUFFIX}": ("os", "PyInit_os"),
        f"buildtools_import_check{SUFFIX}":
            ("buildtools_import_check", "PyInit_buildtools_import_check"),
        f"café{SUFFIX}": ("café", "PyInitU_caf_dma"),
        f"pkg/_fine{SUFFIX}": ("pkg._fine", "PyInit__fine"),
        f"pkg/_stubbed{SUFFIX}": ("pkg._stubbed", "PyInit__stubbed"),
        f"pkg/_renamed{SUFFIX}": ("pkg._original", "PyInit__original"),
    }  # fmt: skip
    for member, (name, init) in inits.items():
        _compile(site / member, name=name, init=init)
    listed = compiled_modules(_wheel_files(site, members), python=PYTHON)
    spec = child_spec(listed, packages=["pkg"], site=site, members=members)
    code, output = _run_child(tmp_path, site, spec)
    assert code == 0, output
    child = parse_child_report(output)
    outcomes, failures, _ = load_outcomes(listed, child, frozenset())
    got = {o.label: (o.outcome, o.detail or "") for o in outcomes}
    assert got["café"] == ("loaded", "")
    assert got["pkg._fine"] == ("loaded", "")
    assert got["buildtools_import_check"] == ("loaded", "")  # the wheel's, not the script
    outcome, detail = got["os"]
    assert outcome == "failed" and "import os returned" in detail and "os.py" in detail, detail
    outcome, detail = got["pkg._stubbed"]
    assert outcome == "failed" and "not loaded from it as an extension module" in detail, detail
    outcome, detail = got["pkg._renamed"]
    assert outcome == "failed" and detail.startswith(
        "exports PyInit__original, not PyInit__renamed"
    )
    assert len(failures) == 3


@pytest.mark.parametrize("name", ["json", "os"])
def test_a_top_level_name_the_wheel_does_not_install_fails_the_import(
    tmp_path: Path, name: str
) -> None:
    site = _site(tmp_path)
    (site / "pkg").mkdir()
    (site / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    members = ["pkg/__init__.py"]  # top_level.txt says `name` too; the wheel has no such file
    spec = child_spec([], packages=["pkg", name], site=site, members=members)
    code, output = _run_child(tmp_path, site, spec)
    assert code == 1, output
    assert f"ImportError: import {name} returned " in output
    assert "not the wheel's nothing (it installs none)" in output
    assert parse_child_report(output).importing == name


def test_a_package_the_wheel_installs_passes(tmp_path: Path) -> None:
    site = _site(tmp_path)
    (site / "pkg").mkdir()
    (site / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (site / "single.py").write_text("", encoding="utf-8")
    (site / "nspkg" / "inner").mkdir(parents=True)  # a namespace package: no __init__.py
    (site / "nspkg" / "inner" / "__init__.py").write_text("", encoding="utf-8")
    members = ["pkg/__init__.py", "single.py", "nspkg/inner/__init__.py"]
    spec = child_spec([], packages=["pkg", "single", "nspkg"], site=site, members=members)
    code, output = _run_child(tmp_path, site, spec)
    assert code == 0, output
    assert parse_child_report(output).imported == ("torch", "pkg", "single", "nspkg")
