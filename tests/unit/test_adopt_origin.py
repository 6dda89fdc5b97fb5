"""Where `init`'s noxfile installs buildtools from: the running one's origin (PEP 610)."""

from __future__ import annotations

import io
import stat
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from buildtools.adopt import origin
from buildtools.adopt.origin import install_source
from buildtools.adopt.scaffold import INSTALL_ENV, render_noxfile
from buildtools.cli import main as cli

from .test_noxfile_lock import FakeSession, _load

SETUP_PROBING_NVCC = """\
from subprocess import DEVNULL, call
from setuptools import setup
from torch.utils import cpp_extension

def cuda_toolkit_available():
    try:
        call(["nvcc"], stdout=DEVNULL, stderr=DEVNULL)  # any exit code counts
        return True
    except FileNotFoundError:
        return False

exts = [cpp_extension.CppExtension("probe.cpu", ["probe/cpu.cpp"],
                                   extra_compile_args={"nvcc": ["-O3"]})]
if cuda_toolkit_available():
    exts.append(cpp_extension.CUDAExtension("probe.cuda", ["probe/cuda.cu"]))
setup(name="probe", ext_modules=exts, cmdclass={"build_ext": cpp_extension.BuildExtension})
"""


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (None, "1.2.0"),  # from an index: no direct_url.json
        (
            {"url": "file:///src/torch%20buildtools", "dir_info": {"editable": True}},
            "/src/torch buildtools",
        ),
        (
            {"url": "file:///w/torch_buildtools-1.2.0-py3-none-any.whl", "archive_info": {}},
            "/w/torch_buildtools-1.2.0-py3-none-any.whl",
        ),
        (
            {
                "url": "https://github.com/o/torch-buildtools",
                "vcs_info": {"vcs": "git", "commit_id": "0123abc", "requested_revision": "v1.2.0"},
            },
            "git+https://github.com/o/torch-buildtools@0123abc",
        ),
        (
            {"url": "https://example.org/tb.tar.gz", "archive_info": {}, "subdirectory": "py"},
            "https://example.org/tb.tar.gz#subdirectory=py",
        ),
        ({"no": "url"}, "1.2.0"),
        ([1, 2], "1.2.0"),
    ],
)
def test_the_origin_of_an_install(record: Any, expected: str) -> None:
    assert install_source(record, "1.2.0") == expected


def _requirement(source: str, env: str | None, monkeypatch: pytest.MonkeyPatch) -> Requirement:
    if env is None:
        monkeypatch.delenv(INSTALL_ENV, raising=False)
    else:
        monkeypatch.setenv(INSTALL_ENV, env)
    monkeypatch.delenv("BUILDTOOLS_REQUIREMENTS", raising=False)
    session = FakeSession()
    _load(render_noxfile(source), monkeypatch)["build"](session)
    ((only,),) = session.installs
    return Requirement(only)


def test_the_noxfile_installs_from_the_source_it_was_written_with(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    req = _requirement(str(tmp_path / "checkout"), None, monkeypatch)
    assert req.name == "torch-buildtools" and req.extras == {"docker"}
    assert req.url == (tmp_path / "checkout").as_uri()
    req = _requirement("git+https://example.org/tb@abc", None, monkeypatch)
    assert req.url == "git+https://example.org/tb@abc"
    assert str(_requirement("0.3.0", None, monkeypatch).specifier) == "==0.3.0"


def test_buildtools_install_overrides_the_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    wheel = tmp_path / "torch_buildtools-0.1.0-py3-none-any.whl"
    assert _requirement("/elsewhere", str(wheel), monkeypatch).url == wheel.as_uri()
    assert str(_requirement("/elsewhere", "0.2.0", monkeypatch).specifier) == "==0.2.0"


def test_init_names_a_setup_py_that_probes_nvcc_and_writes_readable_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "probe"
    (root / "probe").mkdir(parents=True)
    (root / "setup.py").write_text(SETUP_PROBING_NVCC)
    (root / "probe" / "cpu.cpp").write_text("#include <torch/extension.h>\n")
    (root / "probe" / "cuda.cu").write_text("__global__ void k() {}\n")
    monkeypatch.setattr(origin, "running_source", lambda: "/opt/checkout")
    out = io.StringIO()
    assert cli.main(["init", str(root)], out=out) == 0
    text = out.getvalue()
    assert "CUDA decided by: probing the build machine (runs nvcc)" in text
    assert "risk   host-toolchain-probe: setup.py decides" in text
    assert "remedy: none needed for buildtools builds: a CPU cell is built with no" in text
    assert "noxfile.py installs buildtools from /opt/checkout, where this buildtools" in text
    assert (
        'SOURCE = os.environ.get("BUILDTOOLS_INSTALL") or "/opt/checkout"'
        in (root / "noxfile.py").read_text()
    )
    matrix = (root / "matrix.yaml").read_text()
    assert "  cpu:\n    torch_index: https://download.pytorch.org/whl/cpu" in matrix
    assert "  cuda:\n    torch_index: https://download.pytorch.org/whl/{accelerator}" in matrix
    for name in ("matrix.yaml", "noxfile.py"):  # what open() would make, not mkstemp's 0600
        assert stat.S_IMODE((root / name).stat().st_mode) & 0o044 == 0o044


def test_a_guarded_probe_is_named_but_a_fixed_path_cannot_be_hidden(tmp_path: Path) -> None:
    from buildtools.adopt import find_risks, inspect_project

    root = tmp_path / "p"
    root.mkdir()
    (root / "x.cu").write_text("")
    (root / "setup.py").write_text(
        "import os\nWITH_CUDA = os.path.exists('/usr/local/cuda') or os.environ.get('CUDA_HOME')\n"
    )
    found = inspect_project(root)
    assert found.host_probes == ("reads CUDA_HOME", "looks for /usr/local/cuda")
    assert not found.probes_hidden
    (risk,) = [
        r
        for r in find_risks(found, oldest_torch="2.11.0", rocm=False, cpu=True)
        if r.code == "host-toolchain-probe"
    ]
    assert "cannot be hidden from a local CPU build" in risk.remedy
    # a comment naming nvcc is no probe
    (root / "setup.py").write_text("# we used to call(['nvcc'])\nfrom setuptools import setup\n")
    assert inspect_project(root).host_probes == ()
