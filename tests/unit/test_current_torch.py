"""`torch: current`: planning against the running torch from injected host facts."""

from __future__ import annotations

import io
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from fixtures.fakes import Call, FakeRunner
from fixtures.probe import imported_report, is_probe, probe_output, static_report

from buildtools.context import RunContext
from buildtools.errors import ConfigError, PlanError, ToolchainError
from buildtools.knowledge import load_knowledge
from buildtools.matrix.config import MatrixFile, parse_matrix
from buildtools.matrix.yamlsource import SourceMap
from buildtools.model import Accelerator, BuildJob, Cell
from buildtools.planner import Selection, arch_list_from_torch, current_local_version, plan
from buildtools.process import CommandResult
from buildtools.toolchain.prepare import prepare_toolchain
from buildtools.torchinstall import TorchInstall

KB = load_knowledge()
CPU_213 = TorchInstall(
    python=Path("/envs/t213/bin/python"),
    python_version="3.11.7",
    platform="linux_x86_64",
    version="2.13.0+cpu",
    cxx11_abi=True,
    git_version="0123456789abcdef0123456789abcdef01234567",
    package_dir=Path("/envs/t213/lib/python3.11/site-packages/torch"),
)
SOURCE_213 = TorchInstall(
    python=Path("/opt/src-torch/bin/python"),
    python_version="3.12.4",
    platform="linux_x86_64",
    version="2.13.0a0+git1a2b3c4",
    cuda="13.0",
    cxx11_abi=True,
    git_version="1a2b3c4d5e6f1a2b3c4d5e6f1a2b3c4d5e6f1a2b",
    package_dir=Path("/opt/src-torch/lib/python3.12/site-packages/torch"),
    arch_list=("sm_80", "sm_90", "sm_90a", "compute_90"),
)
NIGHTLY_216 = TorchInstall(
    python=Path("/n/bin/python"),
    python_version="3.13.1",
    platform="linux_x86_64",
    version="2.16.0.dev20270101+cu130",
    cuda="13.0",
    git_version="abcdef0abcdef0abcdef0abcdef0abcdef0abcd",
    package_dir=Path("/n/lib/python3.13/site-packages/torch"),
)


def matrix(data: dict[str, Any]) -> MatrixFile:
    return parse_matrix(data, SourceMap(path=Path("matrix.yaml"), lines={(): 1}), knowledge=KB)


def base(torch: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "project": {"path": "."},
        "axes": {"torch": torch, "accelerator": ["cpu", "cu130"], "python": ["3.11", "3.12"]},
        **extra,
    }


def test_current_is_one_cell_fixed_by_the_environment() -> None:
    result = plan(matrix(base(["2.13.0", "current"])), KB, host_python="3.11", current=CPU_213)
    ids = [c.id for c in result.cells]
    assert "torch2.13.0+cpu-current-cpu-cp311" in ids
    assert len(ids) == 2 * 2 + 1  # the index torch's 4 cells and the one current cell
    job = result.job_for("torch2.13.0+cpu-current-cpu-cp311")
    assert job.id == "torch2.13.0+cpu-current-cpu-cp311"
    assert job.torch_source == "current"
    assert job.current_python == "/envs/t213/bin/python"
    assert job.torch_requirement == "torch==2.13.0+cpu"
    assert job.requires_dist == "torch==2.13.*"
    assert job.local_version == "pt213cpu.local"
    assert job.platform_tag == "manylinux_2_28_x86_64"
    assert job.torch_index is None
    assert job.toolkit is None
    index_job = result.job_for("torch2.13.0-cpu-cp311")
    assert index_job.torch_source == "index" and index_job.local_version == "pt213cpu"


def test_cell_id_says_current() -> None:
    cell = Cell(torch="2.13.0+cpu", accelerator="cpu", python="3.11", current=True)
    assert cell.id == "torch2.13.0+cpu-current-cpu-cp311"


def test_source_build_label_pin_and_archs_come_from_the_environment() -> None:
    result = plan(matrix(base(["current"])), KB, host_python="3.11", current=SOURCE_213)
    (job,) = result.jobs
    assert job.id == "torch2.13.0a0+git1a2b3c4-current-cu130-cp312"
    assert job.local_version == "pt213cu130.git1a2b3c4"
    # 2.13.0a0 satisfies no `==2.13.*`: pin the exact public version
    assert job.requires_dist == "torch==2.13.0a0"
    assert job.platform_tag == "manylinux_2_28_x86_64"  # what the 2.13 release promises
    assert job.toolkit is not None
    # torch 2.13 is in the knowledge base: its arch list for CUDA 13.0 wins
    assert job.toolkit.arch_list == KB.default_arch_list(
        "2.13.0", Accelerator.parse("cu130"), "linux_x86_64"
    )
    assert job.env_dict["FORCE_CUDA"] == "1"


def test_unknown_torch_takes_its_own_arch_list() -> None:
    nightly = replace(NIGHTLY_216, arch_list=("sm_90", "sm_100", "sm_120", "compute_120"))
    (job,) = plan(matrix(base(["current"])), KB, host_python="3.11", current=nightly).jobs
    assert job.local_version == "pt216cu130.gitabcdef0"
    assert job.requires_dist == "torch==2.16.0.dev20270101"
    assert job.toolkit is not None
    assert job.toolkit.arch_list == "9.0;10.0;12.0+PTX"
    assert job.toolkit.pip_packages == ()  # derived from torch's own requirements later


def test_unknown_torch_without_arch_list_says_what_to_set() -> None:
    with pytest.raises(ConfigError, match=r"set accelerators\.cu130\.arch_list"):
        plan(matrix(base(["current"])), KB, host_python="3.11", current=NIGHTLY_216)


def test_unknown_torch_with_arch_list_in_matrix() -> None:
    data = base(["current"], accelerators={"cu130": {"arch_list": "9.0;12.0+PTX"}})
    (job,) = plan(matrix(data), KB, host_python="3.11", current=NIGHTLY_216).jobs
    assert job.toolkit is not None and job.toolkit.arch_list == "9.0;12.0+PTX"


def test_arch_list_from_torch() -> None:
    assert arch_list_from_torch(["sm_80", "sm_90a", "sm_120", "compute_120"], "cuda") == (
        "8.0;9.0a;12.0+PTX"
    )
    assert arch_list_from_torch(["gfx90a:xnack-", "gfx942"], "rocm") == "gfx90a;gfx942"
    assert arch_list_from_torch([], "cuda") is None


def test_current_local_version() -> None:
    kw: dict[str, Any] = {"torch": "2.13.0+cpu", "accelerator": "cpu", "abi": "per-python"}
    template = "pt{torch_major}{torch_minor}{accelerator}"
    assert current_local_version(template, release=True, git_short="1a2b3c4", **kw) == (
        "pt213cpu.local"
    )
    assert current_local_version(template, release=False, git_short="1a2b3c4", **kw) == (
        "pt213cpu.git1a2b3c4"
    )
    assert current_local_version(template, release=False, git_short=None, **kw) == "pt213cpu.local"


def test_current_without_host_facts_is_a_plan_error() -> None:
    with pytest.raises(PlanError, match="--torch-python PATH"):
        plan(matrix(base(["current"])), KB, host_python="3.11")


def test_torch_option_replaces_the_axis_and_skips_the_default_profile() -> None:
    data = base(
        ["2.11.0", "2.13.0"],
        profiles={"local": {"select": [{"torch": "2.11.0"}]}},
        default_profile="local",
        include=[{"torch": "2.11.0", "accelerator": "cu130", "python": "3.10"}],
    )
    result = plan(
        matrix(data),
        KB,
        host_python="3.11",
        current=CPU_213,
        selection=Selection(torch_axis=["current"]),
    )
    assert [c.id for c in result.cells] == ["torch2.13.0+cpu-current-cpu-cp311"]
    # an explicit profile still applies (here it selects torch 2.11.0 only)
    with pytest.raises(PlanError, match="selects no buildable cell"):
        plan(
            matrix(data),
            KB,
            host_python="3.11",
            current=CPU_213,
            selection=Selection(torch_axis=["current"], profile="local"),
        )


def test_torch_option_rejects_unknown_releases() -> None:
    with pytest.raises(PlanError, match=r"did you mean 2\.13\.0"):
        plan(
            matrix(base(["2.11.0"])),
            KB,
            host_python="3.11",
            selection=Selection(torch_axis=["2.13.9"]),
        )


def test_rules_match_current_by_name_and_by_version() -> None:
    data = base(["2.13.0", "current"], exclude=[{"torch": "current"}])
    ids = [c.id for c in plan(matrix(data), KB, host_python="3.11", current=CPU_213).cells]
    assert not [i for i in ids if "current" in i]
    data = base(["2.11.0", "current"], exclude=[{"torch": "2.13.*"}])
    ids = [c.id for c in plan(matrix(data), KB, host_python="3.11", current=CPU_213).cells]
    assert not [i for i in ids if "current" in i]
    assert "torch2.11.0-cpu-cp311" in ids


def test_include_current_must_fit_the_environment() -> None:
    data = base(["2.11.0"], include=[{"torch": "current", "accelerator": "cpu"}])
    ids = [c.id for c in plan(matrix(data), KB, host_python="3.11", current=CPU_213).cells]
    assert "torch2.13.0+cpu-current-cpu-cp311" in ids
    bad = base(["2.11.0"], include=[{"torch": "current", "accelerator": "cu130"}])
    with pytest.raises(ConfigError, match="impossible include: torch: current is"):
        plan(matrix(bad), KB, host_python="3.11", current=CPU_213)


def test_current_never_shares_a_job_in_abi3_and_stable() -> None:
    for abi, job_id in (
        ("abi3", "torch2.13.0+cpu-current-cpu-cp311-abi3"),
        ("stable", "torch2.13.0+cpu-current-cpu-stable"),
    ):
        data = base(["2.13.0", "current"])
        data["project"]["abi"] = abi
        result = plan(matrix(data), KB, host_python="3.11", current=CPU_213)
        job = result.job_for("torch2.13.0+cpu-current-cpu-cp311")
        assert job.id == job_id
        assert job.cells == (result.cells[[c.id for c in result.cells].index(job.cell_ids[0])],)
        assert job.torch_source == "current"
    stable = plan(
        matrix({**base(["current"]), "project": {"path": ".", "abi": "stable"}}),
        KB,
        host_python="3.11",
        current=CPU_213,
    ).jobs[0]
    assert stable.requires_dist == "torch>=2.13,<2.14"


def test_axes_accept_current_in_the_file() -> None:
    mf = matrix(base(["current", "2.11.0"]))
    assert mf.matrix.axes.torch == ["current", "2.11.0"]


# --- the toolchain: a venv that sees the running torch -------------------------------------


@dataclass
class FakeEnvWorld(FakeRunner):
    """The fake ProcessRunner playing the running interpreter, `python -m venv` and pip on a tree."""

    tmp: Path
    running_in_venv: bool = True
    torch_version: str = "2.13.0+cpu"
    pip_installs_torch: bool = False
    venv_sees: Path | None = None  # where the new venv imports torch from (default: the real one)

    @property
    def base(self) -> Path:
        return self.tmp / "running"

    @property
    def base_site(self) -> Path:
        return self.base / "lib" / "python3.11" / "site-packages"

    def torch_dir(self) -> Path:
        return self.base_site / "torch"

    def respond(self, call: Call) -> CommandResult:
        args = list(call.argv)
        out = ""
        if args[1:3] == ["-m", "venv"]:
            root = Path(args[-1])
            (root / "bin").mkdir(parents=True)
            (root / "bin" / "python").write_text("")
        elif args[1:4] == ["-m", "pip", "install"]:
            if self.pip_installs_torch:
                site = Path(args[0]).parents[1] / "lib" / "python3.11" / "site-packages"
                (site / "torch").mkdir(parents=True, exist_ok=True)
        elif is_probe(args) and Path(args[0]) == self.base / "bin" / "python":
            out = self._env_probe(static="--import-torch" not in args or "--static" in args)
        elif is_probe(args):
            out = self._venv_probe(Path(args[0]), imported="--import-torch" in args)
        return CommandResult(argv=tuple(args), returncode=0, output=out)

    def _env_probe(self, *, static: bool) -> str:
        """The running interpreter: its static report, or (alone) what `import torch` says."""
        if not static:
            return probe_output(
                imported_report(self.torch_dir(), version=self.torch_version, git_version="0" * 40)
            )
        report = static_report(
            self.base / "bin" / "python",
            python_version="3.11.7",
            prefix=self.base if self.running_in_venv else Path("/usr"),
            purelib=self.base_site,
            dists={"pip": "25.0"},
            torch_version=self.torch_version,
        )
        return probe_output(report, noise="noise\n")

    def _venv_probe(self, python: Path, *, imported: bool) -> str:
        """The new venv: it sees the running torch (or `venv_sees`)."""
        seen = self.venv_sees or self.torch_dir()
        own = python.parents[1] / "lib" / "python3.11" / "site-packages"
        reports = [
            static_report(
                python,
                python_version="3.11.7",
                purelib=own,
                torch_dir=seen,
                torch_version=self.torch_version,
            )
        ]
        if imported:
            reports.append(imported_report(seen, version=self.torch_version))
        return probe_output(*reports)


def current_job(world: FakeEnvWorld) -> BuildJob:
    facts = replace(CPU_213, python=world.base / "bin" / "python", version=world.torch_version)
    (job,) = plan(matrix(base(["current"])), KB, host_python="3.11", current=facts).jobs
    return job


def test_toolchain_for_current_installs_no_torch_and_sees_the_running_one(tmp_path: Path) -> None:
    world = FakeEnvWorld(tmp_path)
    log = io.StringIO()
    job = current_job(world)
    tc = prepare_toolchain(
        job,
        "3.11",
        cache_dir=tmp_path / "cache",
        ctx=RunContext(processes=world, env={"HOME": "/h"}, log=log),
    )
    assert tc.torch.version == "2.13.0+cpu"
    assert tc.site_packages == world.base_site  # repair and checks read this torch
    assert "-current-" in tc.root.name
    venv = next(c for c in world.argvs if c[1:3] == ["-m", "venv"])
    # a venv interpreter cannot hand its site-packages on with --system-site-packages; the
    # running environment's pip and setuptools serve, no seeded copies shadow them
    assert venv == [str(world.base / "bin" / "python"), "-m", "venv", "--without-pip", str(tc.root)]
    pth = tc.root / "lib" / "python3.11" / "site-packages" / "buildtools-current-torch.pth"
    assert pth.read_text().splitlines() == [
        f"import site; site.addsitedir({str(world.base_site)!r})"
    ]
    pips = [c for c in world.argvs if c[1:4] == ["-m", "pip", "install"]]
    assert pips and not [a for c in pips for a in c if a.startswith("torch")]
    assert "nothing is installed into that environment" in log.getvalue()

    again = prepare_toolchain(
        job,
        "3.11",
        cache_dir=tmp_path / "cache",
        ctx=RunContext(processes=world, env={"HOME": "/h"}, log=log),
    )
    assert again.reused and again.root == tc.root and again.site_packages == world.base_site


def test_toolchain_for_current_from_a_base_interpreter_uses_system_site_packages(
    tmp_path: Path,
) -> None:
    world = FakeEnvWorld(tmp_path, running_in_venv=False)
    tc = prepare_toolchain(
        current_job(world),
        "3.11",
        cache_dir=tmp_path / "cache",
        ctx=RunContext(processes=world, env={}, log=io.StringIO()),
    )
    venv = next(c for c in world.argvs if c[1:3] == ["-m", "venv"])
    assert venv[3:] == ["--system-site-packages", "--without-pip", str(tc.root)]


def test_toolchain_for_current_refuses_another_torch(tmp_path: Path) -> None:
    world = FakeEnvWorld(tmp_path, venv_sees=tmp_path / "elsewhere" / "torch")
    with pytest.raises(ToolchainError, match=r"imports torch from .*elsewhere"):
        prepare_toolchain(
            current_job(world),
            "3.11",
            cache_dir=tmp_path / "c",
            ctx=RunContext(processes=world, env={}, log=io.StringIO()),
        )
    world = FakeEnvWorld(tmp_path / "b", pip_installs_torch=True)
    with pytest.raises(ToolchainError, match="must never do"):
        prepare_toolchain(
            current_job(world),
            "3.11",
            cache_dir=tmp_path / "c2",
            ctx=RunContext(processes=world, env={}, log=io.StringIO()),
        )


def test_toolchain_for_current_notices_a_changed_torch(tmp_path: Path) -> None:
    world = FakeEnvWorld(tmp_path)
    job = current_job(world)
    world.torch_version = "2.13.1+cpu"
    with pytest.raises(ToolchainError, match=r"now has torch 2\.13\.1\+cpu.*plan again"):
        prepare_toolchain(
            job,
            "3.11",
            cache_dir=tmp_path / "c",
            ctx=RunContext(processes=world, env={}, log=io.StringIO()),
        )


def test_current_torch_from_a_snapshot() -> None:
    from buildtools.probe.hostenv import EnvSnapshot
    from buildtools.probe.runningtorch import current_torch

    torch = TorchInstall(
        version="2.13.0a0+git1a2b3c4",
        package_dir=Path("/src/env/site/torch"),
        git_version="1a2b3c4d5e",
        imported=True,
        cxx11_abi=None,
        direct_url={"url": "file:///src/pytorch", "dir_info": {"editable": True}},
    )
    snap = EnvSnapshot(python=Path("/src/env/bin/python"), python_version="3.12.4", torch=torch)
    facts = current_torch(snap, cxx11_abi=False)  # from libc10 when torch did not say
    assert (facts.version, facts.build, facts.accelerator) == (
        "2.13.0a0+git1a2b3c4",
        "source",
        "cpu",
    )
    assert facts.cxx11_abi is False and facts.git_short == "1a2b3c4"
    assert facts.site_packages == Path("/src/env/site") and facts.python_xy == "3.12"
    assert facts.python == Path("/src/env/bin/python")
    with pytest.raises(ToolchainError, match="`buildtools doctor` explains why"):
        current_torch(replace(snap, torch=replace(torch, imported=False, import_error="boom")))
    with pytest.raises(ToolchainError, match="has no torch"):
        current_torch(replace(snap, torch=None))
