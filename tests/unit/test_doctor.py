"""`buildtools doctor` on crafted environments: verdicts, findings and fix commands."""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from fixtures.crafted import (
    C10_ERROR_CXX11,
    C10_ERROR_OLD,
    FATBIN_ELF,
    FATBIN_PTX,
    Undef,
    fatbin,
    make_site_packages,
    make_so,
)
from fixtures.factories import built_record, make_job
from fixtures.fakes import Call, FakeRunner

from buildtools.cli.doctor import cmd_doctor
from buildtools.context import RunContext
from buildtools.doctor.devices import device_code_runs
from buildtools.doctor.diagnose import diagnose
from buildtools.doctor.doctor_report import DOCTOR_SCHEMA
from buildtools.doctor.matching import (
    IndexSettings,
    ProjectRef,
    built_for,
    page_url,
    parse_local_label,
)
from buildtools.errors import ExitCode
from buildtools.model import AbiMode
from buildtools.probe.hostenv import DistInfo, EnvSnapshot, parse_snapshot, probe_environment
from buildtools.process import CommandResult
from buildtools.torchinstall import GpuInfo, TorchInstall, accelerator_of, torch_build_kind
from buildtools.wheel.elf import DeviceCode

AT_ADD = "_ZN2at4_ops10add_Tensor4callERKNS_6TensorES4_RKN3c106ScalarE"
DRIFTED = "_ZN3c1013getDtypeNamesB5cxx11ENS_10ScalarTypeE"  # in torch 2.11's libc10, not 2.13's
INDEX = IndexSettings(base_url="https://example.test/whl")


@dataclass
class Env:
    """A crafted site-packages with torch, and the snapshot a probe would report for it."""

    site: Path
    torch: TorchInstall | None
    dists: list[DistInfo] = field(default_factory=list)
    python: Path = Path("/env/bin/python")

    def snapshot(self) -> EnvSnapshot:
        return EnvSnapshot(
            python=self.python,
            python_version="3.11.7",
            machine="x86_64",
            site_dirs=(self.site,),
            dists=tuple(self.dists),
            torch=self.torch,
        )

    def install(
        self,
        name: str,
        version: str = "0.1.0",
        *,
        files: Mapping[str, bytes],
        record: Mapping[str, object] | None = None,
        requires: Sequence[str] = (),
        direct_url: Mapping[str, Any] | None = None,
    ) -> DistInfo:
        for rel, data in files.items():
            path = self.site / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        dist = DistInfo(
            name=name,
            version=version,
            location=self.site,
            shared_objects=tuple(self.site / r for r in files if ".so" in r),
            build_record=json.dumps(record) if record is not None else None,
            requires=tuple(requires),
            direct_url=direct_url,
        )
        self.dists.append(dist)
        return dist


def torch_env(
    tmp: Path,
    *,
    version: str = "2.13.0+cpu",
    cuda: str | None = None,
    cxx11_abi: bool = True,
    gpus: Sequence[GpuInfo] = (),
    direct_url: Mapping[str, Any] | None = None,
    git_version: str | None = "cf30153c4c13" + "0" * 28,
) -> Env:
    site = make_site_packages(
        tmp / "site", version=version, cuda=cuda, cxx11_abi=cxx11_abi, torch_exports=[AT_ADD]
    )
    torch = TorchInstall(
        version=version,
        package_dir=site / "torch",
        cuda=cuda,
        git_version=git_version,
        direct_url=direct_url,
        imported=True,
        cxx11_abi=cxx11_abi,
        gpus=tuple(gpus),
    )
    return Env(site=site, torch=torch)


def ext_so(
    *,
    undefined: Sequence[str | Undef] = (AT_ADD,),
    needed: Sequence[str] = ("libc10.so", "libtorch_cpu.so", "libc.so.6"),
    sections: Mapping[str, bytes] | None = None,
) -> bytes:
    return make_so(
        needed=list(needed), exports=["PyInit_ext"], undefined=list(undefined), sections=sections
    )


def record(
    torch: str = "2.13.0+cpu", accelerator: str = "cpu", abi: AbiMode = "per-python"
) -> dict[str, object]:
    """The record `buildtools build` writes for a job of `torch`'s minor × `accelerator`."""
    minor = ".".join(torch.split("+", maxsplit=1)[0].split(".")[:2])
    job = make_job(torch=f"{minor}.0", accelerator=accelerator, abi=abi)
    return built_record(job, torch=torch)


SO = "ext_x/_C.cpython-311-x86_64-linux-gnu.so"


# --- verdicts ------------------------------------------------------------------------------


def test_healthy_package_built_for_this_torch(tmp_path: Path) -> None:
    env = torch_env(tmp_path)
    env.install("ext_x", "0.1.0+pt213cpu", files={SO: ext_so()}, record=record())
    report = diagnose(env.snapshot(), index=INDEX)
    (pkg,) = report.packages
    assert pkg.verdict == "healthy", pkg.findings
    assert pkg.ours and pkg.fix is None and not pkg.findings
    assert pkg.built_for.source == "build-record" and pkg.built_for.torch == "2.13.0+cpu"
    assert pkg.shared_objects == (SO,)
    assert report.exit_code == 0
    out = io.StringIO()
    report.render(out)
    assert "ext_x 0.1.0+pt213cpu: healthy" in out.getvalue()
    assert "1 extension package(s): 1 healthy, 0 broken, 0 unknown" in out.getvalue()


def test_drifted_symbol_is_broken_with_the_index_wheel_as_fix(tmp_path: Path) -> None:
    env = torch_env(tmp_path)
    env.install(
        "ext_x",
        "0.1.0+pt211cu130",
        files={SO: ext_so(undefined=[AT_ADD, DRIFTED])},
        record=record("2.11.0+cu130", "cu130"),
    )
    report = diagnose(env.snapshot(), index=INDEX)
    (pkg,) = report.packages
    assert pkg.verdict == "broken"
    codes = [f.code for f in pkg.findings]
    assert codes.count("undefined-symbol") == 1
    assert {"torch-mismatch", "accelerator-mismatch"} <= set(codes)
    undefined = next(f for f in pkg.findings if f.code == "undefined-symbol")
    assert "c10::getDtypeNames[abi:cxx11](c10::ScalarType)" in undefined.message
    assert pkg.reason == (
        "undefined symbol: c10::getDtypeNames[abi:cxx11](c10::ScalarType) (+2 more)"
    )
    assert pkg.fix is not None
    assert pkg.fix.commands == (
        "pip install 'ext_x==0.1.0+pt213cpu' -f https://example.test/whl/torch-2.13.0+cpu.html",
    )
    assert report.exit_code == int(ExitCode.DOCTOR_BROKEN) == 13


def test_label_template_and_abi_come_from_the_settings(tmp_path: Path) -> None:
    env = torch_env(tmp_path, version="2.11.0+cu130", cuda="13.0")
    env.install(
        "ext_x",
        "0.1.0+pt213cpu",
        files={SO: ext_so(undefined=[DRIFTED])},
        record=record(abi="abi3"),
    )
    index = IndexSettings(
        base_url="https://h/w/", local_version="torch{torch_major}{torch_minor}{accelerator}{abi}"
    )
    (pkg,) = diagnose(env.snapshot(), index=index).packages
    assert pkg.fix is not None
    assert pkg.fix.commands == (
        "pip install 'ext_x==0.1.0+torch211cu130abi3' -f https://h/w/torch-2.11.0+cu130.html",
    )


def test_same_version_reinstall_is_forced(tmp_path: Path) -> None:
    env = torch_env(tmp_path)
    env.install("ext_x", "0.1.0+pt213cpu", files={SO: ext_so(undefined=[DRIFTED])}, record=record())
    (pkg,) = diagnose(env.snapshot(), index=INDEX).packages
    assert pkg.fix is not None
    assert pkg.fix.commands[0].startswith("pip install --force-reinstall --no-deps 'ext_x==")


def test_no_index_and_a_known_project_builds_from_source(tmp_path: Path) -> None:
    env = torch_env(tmp_path)
    env.install(
        "ext-x", "0.1.0+pt211cpu", files={SO: ext_so(undefined=[DRIFTED])}, record=record("2.11.0")
    )
    project = ProjectRef(name="ext_x", path=Path("/src/ext x"))
    (pkg,) = diagnose(env.snapshot(), project=project).packages
    assert pkg.fix is not None
    assert "no index with a matching wheel is configured" in pkg.fix.summary
    assert pkg.fix.commands == (
        "nox -s build -- --torch current --torch-python /env/bin/python --project '/src/ext x'",
        "pip install --no-deps --no-index -f wheelhouse 'ext-x==0.1.0+pt213cpu.local'",
    )


def test_source_built_torch_gets_a_source_build_even_with_an_index(tmp_path: Path) -> None:
    env = torch_env(
        tmp_path,
        version="2.13.0a0+git1a2b3c4",
        git_version="1a2b3c4d" * 5,
        direct_url={"url": "file:///src/pytorch", "dir_info": {}},
    )
    env.install("ext_x", "0.1.0+pt213cpu", files={SO: ext_so()}, record=record())
    report = diagnose(env.snapshot(), index=INDEX, project=ProjectRef(path=Path("/src/ext")))
    (pkg,) = report.packages
    # built for the 2.13.0 release, not this build: the symbols resolve, nothing more is known
    assert pkg.verdict == "unknown"
    assert [(f.code, f.severity.value) for f in pkg.findings] == [("torch-mismatch", "warning")]
    assert pkg.reason.endswith("built for another build of torch 2.13.0+cpu than this one")
    assert pkg.fix is not None
    assert "source build, which no index serves" in pkg.fix.summary
    assert pkg.fix.commands[0].endswith("--project /src/ext")
    assert pkg.fix.commands[1] == (
        "pip install --no-deps --no-index -f wheelhouse 'ext_x==0.1.0+pt213cpu.git1a2b3c4'"
    )
    out = io.StringIO()
    report.render(out)
    assert "torch 2.13.0a0+git1a2b3c4: CPU only, C++ ABI cxx11, source build" in out.getvalue()


def test_a_build_against_that_source_torch_is_healthy(tmp_path: Path) -> None:
    env = torch_env(tmp_path, version="2.13.0a0+git1a2b3c4", git_version="1a2b3c4d" * 5)
    env.install(
        "ext_x",
        "0.1.0+pt213cpu.git1a2b3c4",
        files={SO: ext_so()},
        record=record("2.13.0a0+git1a2b3c4"),
    )
    (pkg,) = diagnose(env.snapshot()).packages
    assert pkg.verdict == "healthy", pkg.findings


def test_grafted_torch_library(tmp_path: Path) -> None:
    env = torch_env(tmp_path)
    env.install(
        "ext_ok",
        "0.1.0",
        files={
            "ext_ok.cpython-311-x86_64-linux-gnu.so": ext_so(
                needed=["libc10-0123abcd.so", "libc.so.6"], undefined=[]
            ),
            "ext_ok.libs/libc10-0123abcd.so": make_so(
                soname="libc10-0123abcd.so", exports=[C10_ERROR_CXX11]
            ),
        },
    )
    (pkg,) = diagnose(env.snapshot()).packages
    assert pkg.verdict == "broken"
    (bundled,) = [f for f in pkg.findings if f.code == "bundled-torch-lib"]
    assert "ext_ok.libs/libc10-0123abcd.so" in bundled.message
    assert pkg.reason.startswith("carries its own copy of a torch library")
    assert pkg.built_for.source == "unknown"
    assert pkg.fix is not None
    assert pkg.fix.commands == (
        "pip install --force-reinstall --no-deps --no-build-isolation --no-binary ext_ok "
        "'ext_ok==0.1.0'",
    )


def test_cuda_build_beside_a_cpu_torch_misses_torch_libraries(tmp_path: Path) -> None:
    env = torch_env(tmp_path)
    env.install(
        "ext_x",
        "0.1.0+pt213cu130",
        files={SO: ext_so(needed=["libc10.so", "libc10_cuda.so", "libcudart.so.13"])},
    )
    (pkg,) = diagnose(env.snapshot()).packages
    missing = {f.details[0]: f.severity.value for f in pkg.findings if f.code == "missing-library"}
    assert missing == {"library: libc10_cuda.so": "error", "library: libcudart.so.13": "warning"}
    assert pkg.built_for.source == "local-version"
    assert pkg.built_for.accelerator == "cu130" and pkg.built_for.torch == "2.13"
    assert pkg.verdict == "broken"


def test_cpu_build_beside_a_cuda_torch_is_a_warning_with_a_fix(tmp_path: Path) -> None:
    env = torch_env(tmp_path, version="2.13.0+cu130", cuda="13.0")
    env.install("ext_x", "0.1.0+pt213cpu", files={SO: ext_so()}, record=record())
    (pkg,) = diagnose(env.snapshot(), index=INDEX).packages
    assert pkg.verdict == "healthy"
    assert [(f.code, f.severity.value) for f in pkg.findings] == [
        ("accelerator-mismatch", "warning")
    ]
    assert pkg.fix is not None
    assert pkg.fix.commands == (
        "pip install 'ext_x==0.1.0+pt213cu130' -f https://example.test/whl/torch-2.13.0+cu130.html",
    )


def test_abi_mismatch(tmp_path: Path) -> None:
    env = torch_env(tmp_path)
    env.install(
        "ext_x", "0.1.0+pt213cpu", files={SO: ext_so(undefined=[C10_ERROR_OLD])}, record=record()
    )
    (pkg,) = diagnose(env.snapshot()).packages
    assert {f.code for f in pkg.findings} >= {"abi-mismatch", "undefined-symbol"}
    assert pkg.verdict == "broken"


def test_foreign_packages_by_pin_label_or_nothing(tmp_path: Path) -> None:
    env = torch_env(tmp_path)
    env.install(
        "vision", "0.28.0+cpu", files={"vision/_C.so": ext_so()}, requires=["torch==2.13.0"]
    )
    env.install("scatter", "2.1.2+pt211cpu", files={"scatter/_s.so": ext_so()})
    env.install("mystery", "1.0", files={"mystery/_m.so": ext_so()})
    env.install("pure", "1.0", files={"pure/__init__.py": b""})
    env.install("unrelated", "1.0", files={"unrelated/_u.so": make_so(needed=["libc.so.6"])})
    report = diagnose(env.snapshot())
    by = {p.name: p for p in report.packages}
    assert sorted(by) == ["mystery", "scatter", "vision"]
    assert by["vision"].verdict == "healthy"
    assert by["vision"].built_for.source == "requires-dist"
    assert by["vision"].built_for.accelerator == "cpu"
    assert by["scatter"].verdict == "broken"
    assert [f.code for f in by["scatter"].findings] == ["torch-mismatch"]
    assert by["scatter"].built_for.describe() == "torch 2.11 (cpu) (local version label +pt211cpu)"
    assert by["mystery"].verdict == "unknown"
    assert by["mystery"].fix is not None
    assert report.exit_code == 13


def test_stable_abi_record_accepts_newer_torch(tmp_path: Path) -> None:
    env = torch_env(tmp_path)
    env.install(
        "ext_x",
        "0.1.0+pt210cpu",
        files={SO: ext_so()},
        record=record("2.10.0+cpu", abi="stable"),
    )
    (pkg,) = diagnose(env.snapshot()).packages
    assert pkg.verdict == "healthy", pkg.findings
    assert pkg.built_for.describe() == "torch 2.10.0+cpu or newer (stable ABI) (build record)"


def test_editable_install_is_rebuilt_in_place(tmp_path: Path) -> None:
    env = torch_env(tmp_path)
    src = tmp_path / "src"
    (src / "build" / "lib").mkdir(parents=True)
    (src / "ext_e").mkdir()
    (src / "ext_e" / "_C.so").write_bytes(ext_so(undefined=[DRIFTED]))
    (src / "build" / "lib" / "_C.so").write_bytes(ext_so(undefined=[DRIFTED]))  # skipped
    env.install(
        "ext_e",
        "0.1.0",
        files={"__editable__.ext_e-0.1.0.pth": str(src).encode()},
        direct_url={"url": src.as_uri(), "dir_info": {"editable": True}},
    )
    (pkg,) = diagnose(env.snapshot(), index=INDEX).packages
    assert pkg.shared_objects == ("ext_e/_C.so",)
    assert pkg.verdict == "broken"
    assert pkg.fix is not None
    assert pkg.fix.commands == (f"pip install --no-build-isolation -e {src}",)


def test_no_torch_installed(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = Env(site=site, torch=None)
    env.install(
        "ext_x", "0.1.0+pt211cu130", files={SO: ext_so()}, record=record("2.11.0+cu130", "cu130")
    )
    report = diagnose(env.snapshot())
    (pkg,) = report.packages
    assert [f.code for f in pkg.findings] == ["no-torch"]
    assert pkg.fix is not None
    assert pkg.fix.commands == (
        "pip install 'torch==2.11.0+cu130' --index-url https://download.pytorch.org/whl/cu130",
    )
    out = io.StringIO()
    report.render(out)
    assert "torch: not installed in this environment" in out.getvalue()


def test_torch_that_does_not_import_is_broken(tmp_path: Path) -> None:
    env = torch_env(tmp_path)
    assert env.torch is not None
    env.torch = replace(
        env.torch,
        imported=False,
        import_error="`import torch` exited -6 (killed by signal 6): Aborted",
    )
    report = diagnose(env.snapshot())
    assert [f.code for f in report.torch_findings] == ["torch-import"]
    assert report.broken and report.exit_code == 13
    assert report.to_json()["torch"]["import_error"].endswith("Aborted")


# --- device code ---------------------------------------------------------------------------


def gpu(cap: tuple[int, int]) -> GpuInfo:
    return GpuInfo(index=0, name="Fake GPU", capability=cap)


@pytest.mark.parametrize(
    ("archs", "cap", "runs"),
    [
        ({"sm_80"}, (8, 0), "native"),
        ({"sm_80"}, (8, 6), "native"),  # same major, newer minor: binary compatible
        ({"sm_80"}, (9, 0), "no"),
        ({"sm_80", "compute_80"}, (9, 0), "ptx"),
        ({"compute_120"}, (10, 0), "no"),  # PTX never runs on an older GPU
        ({"sm_90a"}, (9, 0), "native"),
        ({"sm_90a"}, (10, 0), "no"),
        ({"sm_100f"}, (10, 3), "native"),
        ({"sm_100f"}, (12, 0), "no"),
        ({"lto_80"}, (8, 0), "no"),
        ({"sm_75", "sm_120", "compute_120"}, (12, 1), "native"),
    ],
)
def test_device_code_runs(archs: set[str], cap: tuple[int, int], runs: str) -> None:
    code = DeviceCode(kind="cuda", archs=frozenset(archs))
    assert device_code_runs(code, gpu(cap)) == runs


def test_hip_code_matches_the_gfx_target() -> None:
    code = DeviceCode(kind="hip", archs=frozenset({"gfx90a", "gfx942"}))
    mi300 = GpuInfo(index=0, name="MI300X", gcn_arch="gfx942:sramecc+:xnack-")
    mi100 = GpuInfo(index=1, name="MI100", gcn_arch="gfx908:sramecc+:xnack-")
    assert device_code_runs(code, mi300) == "native"
    assert device_code_runs(code, mi100) == "no"
    assert mi300.arch == "gfx942"


def test_missing_arch_for_the_visible_gpu(tmp_path: Path) -> None:
    h100 = GpuInfo(index=0, name="NVIDIA H100", capability=(9, 0))
    env = torch_env(tmp_path, version="2.13.0+cu130", cuda="13.0", gpus=[h100])
    sm80 = {".nv_fatbin": fatbin([(FATBIN_ELF, 80, 0)])}
    sm80_ptx = {".nv_fatbin": fatbin([(FATBIN_ELF, 80, 0), (FATBIN_PTX, 80, 0)])}
    rec = record("2.13.0+cu130", "cu130")
    env.install("old_arch", "1.0+pt213cu130", files={"a/_a.so": ext_so(sections=sm80)}, record=rec)
    env.install("ptx", "1.0+pt213cu130", files={"p/_p.so": ext_so(sections=sm80_ptx)}, record=rec)
    by = {p.name: p for p in diagnose(env.snapshot()).packages}
    assert by["old_arch"].verdict == "broken"
    (finding,) = by["old_arch"].findings
    assert finding.code == "no-device-code"
    assert "GPU 0 (NVIDIA H100, sm_90)" in finding.message
    assert "no kernel image is available" in finding.message
    assert by["ptx"].verdict == "healthy"
    assert [(f.code, f.severity.value) for f in by["ptx"].findings] == [("no-device-code", "info")]


# --- what a package was built for ----------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "torch", "accel"),
    [
        ("pt211cu130", "2.11", "cu130"),
        ("pt24cu121", "2.4", "cu121"),
        ("pt213cpu.local", "2.13", "cpu"),
        ("pt213cpu.git1a2b3c4", "2.13", "cpu"),
        ("cu12torch2.6cxx11abifalse", "2.6", None),
        ("cu130", None, "cu130"),
        ("rocm6.4", None, "rocm6.4"),
        ("torch28cu128", "2.8", "cu128"),
        ("deadbeef", None, None),
    ],
)
def test_parse_local_label(label: str, torch: str | None, accel: str | None) -> None:
    assert parse_local_label(label) == (torch, accel)


def test_built_for_prefers_the_record_then_the_pin() -> None:
    rec = json.dumps(record("2.11.0+cu130", "cu130"))
    dist = DistInfo(name="x", version="1+pt213cpu", location=Path("/s"), build_record=rec)
    assert built_for(dist).torch == "2.11.0+cu130"
    pinned = DistInfo(
        name="x",
        version="1+cu126",
        location=Path("/s"),
        requires=("numpy", "torch==2.8.0", "torch; extra == 'x'"),
    )
    bf = built_for(pinned)
    assert (bf.torch, bf.accelerator, bf.source) == ("2.8.0", "cu126", "requires-dist")
    loose = DistInfo(name="x", version="1.0", location=Path("/s"), requires=("torch>=2.4",))
    assert built_for(loose).source == "unknown"


@pytest.mark.parametrize(
    ("version", "direct_url", "has_record", "kind"),
    [
        ("2.13.0+cpu", None, True, "release"),
        ("2.11.0", None, True, "release"),
        ("2.14.0.dev20260101+cu130", None, True, "nightly"),
        ("2.13.0rc2", None, True, "prerelease"),
        ("2.13.0a0+git1a2b3c4", None, True, "source"),
        ("2.13.0+cpu", {"url": "file:///src/pytorch", "dir_info": {}}, True, "source"),
        ("2.13.0", None, False, "source"),
        ("2.8.0a0+5228986c39.nv25.06", None, True, "vendor"),
    ],
)
def test_torch_build_kind(
    version: str, direct_url: dict[str, Any] | None, has_record: bool, kind: str
) -> None:
    assert torch_build_kind(version, direct_url=direct_url, has_record=has_record) == kind


def test_accelerator_and_page_names() -> None:
    assert accelerator_of("13.0", None) == "cu130"
    assert accelerator_of("12.6", None) == "cu126"
    assert accelerator_of(None, "7.2.53211-e2d2b3") == "rocm7.2"
    assert accelerator_of(None, None) == "cpu"
    assert page_url("https://x/whl/", "2.11.0+cu130", "cu130") == (
        "https://x/whl/torch-2.11.0+cu130.html"
    )


# --- the probe and the command line ---------------------------------------------------------


def static_probe(env: Env) -> dict[str, Any]:
    assert env.torch is not None
    return {
        "schema": 1,
        "python": {
            "version": "3.11.7",
            "implementation": "cpython",
            "executable": str(env.python),
            "prefix": "/env",
            "base_prefix": "/usr",
            "machine": "x86_64",
        },
        "site_dirs": [str(env.site)],
        "dists": [
            {
                "name": "torch",
                "version": env.torch.version,
                "location": str(env.site),
                "shared_objects": [],
                "has_record": True,
                "installer": "pip",
            },
            *[
                {
                    "name": d.name,
                    "version": d.version,
                    "location": str(d.location),
                    "shared_objects": [str(p) for p in d.shared_objects],
                    "has_record": True,
                    "build_record": d.build_record,
                    "direct_url": None,
                }
                for d in env.dists
            ],
        ],
        "torch": {
            "package_dir": str(env.torch.package_dir),
            "version_py": {
                "__version__": env.torch.version,
                "cuda": None,
                "git_version": "ab" * 20,
            },
        },
    }


@dataclass
class FakeProbe(FakeRunner):
    """The fake ProcessRunner answering the two probe commands with canned output."""

    static: dict[str, Any]
    imported: dict[str, Any] | None = None
    import_rc: int = 0

    def respond(self, call: Call) -> CommandResult:
        if "--import-torch" in call.argv:
            if self.import_rc:
                return CommandResult(argv=call.argv, returncode=self.import_rc, output="Aborted")
            data = {"imported": self.imported or {}}
        else:
            data = self.static
        return CommandResult(
            argv=call.argv, returncode=0, output="warning: x\nBUILDTOOLS_ENV " + json.dumps(data)
        )


def test_probe_is_parsed_and_import_crash_reported(tmp_path: Path) -> None:
    env = torch_env(tmp_path)
    env.install("ext_x", "0.1.0+pt213cpu", files={SO: ext_so()}, record=record())
    fake = FakeProbe(static_probe(env), import_rc=-6)
    snap = probe_environment(Path("/env/bin/python"), ctx=RunContext(processes=fake))
    assert [c[1] for c in fake.argvs] == ["-c", "-c"]
    assert fake.argvs[1][-1] == "--import-torch"
    assert snap.torch is not None
    assert snap.torch.version == "2.13.0+cpu" and snap.torch.build == "release"
    assert snap.torch.imported is False
    assert snap.torch.import_error == "`import torch` exited -6 (killed by signal 6): Aborted"
    assert snap.torch.git_short == "abababa"
    assert [d.name for d in snap.dists] == ["torch", "ext_x"]
    assert snap.in_venv and snap.python_xy == "3.11"


def test_parse_snapshot_reads_gpus() -> None:
    static = "BUILDTOOLS_ENV " + json.dumps(
        {
            "python": {"version": "3.12.1", "executable": "/p"},
            "dists": [],
            "torch": {"package_dir": "/s/torch", "version_py": {"__version__": "2.11.0+cu130"}},
        }
    )
    imported = "BUILDTOOLS_ENV " + json.dumps(
        {
            "imported": {
                "version": "2.11.0+cu130",
                "cuda": "13.0",
                "cxx11_abi": True,
                "arch_list": ["sm_90", "sm_100"],
                "gpus": [{"index": 0, "name": "H100", "capability": [9, 0]}],
            }
        }
    )
    snap = parse_snapshot(static, imported)
    assert snap.torch is not None
    assert snap.torch.gpus == (GpuInfo(index=0, name="H100", capability=(9, 0)),)
    assert snap.torch.accelerator == "cu130" and snap.torch.arch_list == ("sm_90", "sm_100")
    assert snap.torch.build == "source"  # no torch dist-info: a development install


def args(**kw: Any) -> argparse.Namespace:
    base = {
        "python": Path("/env/bin/python"),
        "index": None,
        "matrix": None,
        "json": False,
        "no_import": False,
        "runner": None,
    }
    base.update(kw)
    return argparse.Namespace(**base)


def test_cmd_doctor_json_and_exit_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no matrix.yaml here
    env = torch_env(tmp_path)
    env.install(
        "ext_x",
        "0.1.0+pt211cpu",
        files={SO: ext_so(undefined=[DRIFTED])},
        record=record("2.11.0+cpu"),
    )
    fake = FakeProbe(static_probe(env), imported={"version": "2.13.0+cpu", "cxx11_abi": True})
    out = io.StringIO()
    rc = cmd_doctor(args(json=True, index="https://example.test/whl", runner=fake), out)
    assert rc == 13
    data = json.loads(out.getvalue())
    assert data["schema"] == DOCTOR_SCHEMA
    assert data["broken"] is True and data["summary"] == {"healthy": 0, "broken": 1, "unknown": 0}
    assert data["torch"]["version"] == "2.13.0+cpu" and data["torch"]["build"] == "release"
    (pkg,) = data["packages"]
    assert pkg["verdict"] == "broken"
    assert pkg["built_for"]["source"] == "build-record"
    assert pkg["fix"]["commands"] == [
        "/env/bin/python -m pip install 'ext_x==0.1.0+pt213cpu' "
        "-f https://example.test/whl/torch-2.13.0+cpu.html"
    ]
    assert {f["code"] for f in pkg["findings"]} == {"undefined-symbol", "torch-mismatch"}


def test_cmd_doctor_reads_index_and_project_from_matrix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ext").mkdir()
    (tmp_path / "matrix.yaml").write_text(
        "project: {path: ext, name: ext-x}\n"
        "axes: {torch: ['2.13.0'], accelerator: [cpu], python: ['3.11']}\n"
        "index: {base_url: 'https://m.test/whl', local_version: 'pt{torch_major}{torch_minor}{accelerator}'}\n"
    )
    monkeypatch.chdir(tmp_path)
    env = torch_env(tmp_path)
    env.install("ext_x", "0.1.0", files={SO: ext_so(undefined=[DRIFTED])})  # no record: by name
    out = io.StringIO()
    rc = cmd_doctor(args(runner=FakeProbe(static_probe(env))), out)
    assert rc == 13
    text = out.getvalue()
    assert "install 'ext_x==0.1.0+pt213cpu' -f https://m.test/whl/torch-2.13.0+cpu.html" in text
    assert "fix: install the ext_x wheel built for torch 2.13.0 (cpu)" in text


def test_no_import_reads_files_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    env = torch_env(tmp_path)
    env.install("ext_x", "0.1.0+pt213cpu", files={SO: ext_so()}, record=record())
    fake = FakeProbe(static_probe(env))
    out = io.StringIO()
    assert cmd_doctor(args(json=True, no_import=True, runner=fake), out) == 0
    assert len(fake.calls) == 1  # torch was not imported
    data = json.loads(out.getvalue())
    assert data["torch"]["imported"] is None and data["torch"]["cxx11_abi"] is True  # libc10
    assert any("--no-import" in n for n in data["notes"])
    assert data["packages"][0]["verdict"] == "healthy"


def test_bare_doctor_without_torch_says_which_environment_it_inspected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from nox's venv (buildtools, no torch): the report says where to point it."""
    monkeypatch.chdir(tmp_path)
    env = Env(site=tmp_path / "site", torch=None)
    monkeypatch.setattr("buildtools.cli.doctor.probe_environment", lambda *a, **k: env.snapshot())
    out = io.StringIO()
    cmd_doctor(args(python=None, runner=object()), out)
    text = out.getvalue()
    assert "torch: not installed in this environment" in text
    assert "doctor inspects the environment it runs in" in text
    assert "buildtools doctor --python /path/to/env/bin/python" in text
