"""Issue 22 without processes: a GPU smoke needs its GPU, every compiled module is loaded.

The device check (`smoke.device`), the coverage of a wheel's device code, the compiled
modules of a wheel and the messages of their loader (`smoke.modules`), the smoke command's
case report (`smoke.cases`), and `run_smoke` on a fake runner: what it refuses before
installing anything.
"""

from __future__ import annotations

import argparse
import io
import json
import textwrap
import zipfile
from pathlib import Path

import pytest
from fixtures.fakes import ANY, Call, FakeRunner

from buildtools.cli.smoke import _runner_accelerator
from buildtools.errors import ConfigError, ExitCode, NoDeviceError
from buildtools.index.gate import SmokeGate
from buildtools.matrix.config import load_matrix
from buildtools.process import CommandResult
from buildtools.smoke.cases import CASES_ENV, CASES_SCHEMA, DEVICE_ENV, read_cases
from buildtools.smoke.child import CHILD_TAG, ChildReport, parse_child_report
from buildtools.smoke.gpu import (
    DriverFacts,
    check_device,
    device_coverage,
    read_driver_facts,
)
from buildtools.smoke.modules import (
    CompiledModule,
    child_spec,
    compiled_modules,
    describe_load_error,
    install_path,
    load_outcomes,
)
from buildtools.smoke.run import SmokeOptions, run_smoke
from buildtools.smoke.smoke_report import SmokeStatus
from buildtools.smoke.wheelsources import WheelSource
from buildtools.torchinstall import GpuInfo, TorchInstall
from buildtools.wheel.checks.elves import WheelElf
from buildtools.wheel.elf import DeviceCode, ElfInfo, inspect_elf

CUDA_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cuda"
H100 = GpuInfo(index=0, name="NVIDIA H100 80GB HBM3", capability=(9, 0))
A100 = GpuInfo(index=0, name="NVIDIA A100-SXM4-80GB", capability=(8, 0))
DRIVER = DriverFacts(
    kind="cuda",
    driver="580.159.04",
    source="nvidia-smi",
    device_nodes=("/dev/nvidia0", "/dev/nvidiactl"),
)
NO_DRIVER = DriverFacts(kind="cuda")


def _torch(**kw: object) -> TorchInstall:
    base: dict[str, object] = {
        "version": "2.11.0+cu130",
        "package_dir": Path("/runner/lib/python3.12/site-packages/torch"),
        "cuda": "13.0",
        "imported": True,
        "device_available": True,
        "device_count": 1,
        "driver_cuda": "13.0",
        "gpus": (H100,),
    }
    return TorchInstall(**(base | kw))  # type: ignore[arg-type]


CPU_TORCH = _torch(
    version="2.13.0+cpu", cuda=None, device_available=False, device_count=0, driver_cuda=None
)


# --------------------------------------------------------------------------- the device check


def test_a_cuda_torch_that_sees_its_gpu_passes() -> None:
    check = check_device("cuda", torch=_torch(), driver=DRIVER, env={}, torch_required=True)
    assert check.ok and not check.deferred
    assert check.line().startswith("device check: driver 580.159.04 (nvidia-smi, /dev/nvidia0")


@pytest.mark.parametrize(
    ("torch", "driver", "env", "cause"),
    [
        # a container started without --gpus: no driver anywhere
        (
            _torch(device_available=False, device_count=0, driver_cuda=None, gpus=()),
            NO_DRIVER,
            {},
            "the container did not get the GPU (docker run --gpus all",
        ),
        # the driver supports CUDA 12.4; torch and the wheel need 13.0
        (
            _torch(device_available=False, device_count=0, driver_cuda="12.4", gpus=()),
            DRIVER,
            {},
            "supports CUDA 12.4, older than the CUDA 13.0 of torch and the wheel",
        ),
        # CUDA_VISIBLE_DEVICES="" hides every GPU
        (
            _torch(device_available=False, device_count=0, gpus=()),
            DRIVER,
            {"CUDA_VISIBLE_DEVICES": ""},
            "CUDA_VISIBLE_DEVICES='' hides every GPU",
        ),
        # the driver is installed, but /dev/nvidia0 was not passed into the container
        (
            _torch(device_available=False, device_count=0, gpus=()),
            DriverFacts(kind="cuda", driver="580.159.04", source="/proc/driver/nvidia/version"),
            {},
            "no /dev/nvidia<N> device node is present",
        ),
        # a CPU torch cannot see a GPU: with --system-torch that is the end
        (CPU_TORCH, DRIVER, {}, "the runner's torch is a CPU build (2.13.0+cpu)"),
        (None, DRIVER, {}, "has no torch that imports"),
    ],
)
def test_a_runner_whose_torch_sees_no_gpu_is_refused_with_the_likely_cause(
    torch: TorchInstall | None, driver: DriverFacts, env: dict[str, str], cause: str
) -> None:
    check = check_device("cuda", torch=torch, driver=driver, env=env, torch_required=True)
    assert not check.ok
    assert check.cause is not None and cause in check.cause
    line = check.line()
    assert line.startswith("no GPU visible: ") and "\n" not in line
    assert "; likely cause: " in line


def test_the_line_names_what_was_checked() -> None:
    torch = _torch(device_available=False, device_count=0, driver_cuda="12.4", gpus=())
    line = check_device(
        "cuda", torch=torch, driver=DRIVER, env={}, torch_required=True, python=Path("/py")
    ).line()
    assert "driver 580.159.04 (nvidia-smi, /dev/nvidia0 /dev/nvidiactl)" in line
    assert (
        "torch 2.11.0+cu130 (CUDA 13.0) in /py: torch.cuda.is_available() False, "
        "device_count 0, the driver supports CUDA 12.4" in line
    )


def test_a_cpu_torch_defers_to_the_index_torch_when_the_driver_shows_a_gpu() -> None:
    """--torch-source auto/index: each wheel's torch is asked later; no driver is refused now."""
    deferred = check_device("cuda", torch=CPU_TORCH, driver=DRIVER, env={}, torch_required=False)
    assert deferred.ok and deferred.deferred
    refused = check_device("cuda", torch=None, driver=NO_DRIVER, env={}, torch_required=False)
    assert not refused.ok and "no NVIDIA driver (no nvidia-smi" in refused.checked


def test_rocm_needs_a_hip_torch_and_kfd() -> None:
    rocm_torch = _torch(
        version="2.13.0+rocm7.2", cuda=None, hip="7.2.1", driver_cuda=None,
        gpus=(GpuInfo(index=0, name="AMD Instinct MI300X", gcn_arch="gfx942:sramecc+:xnack-"),),
    )  # fmt: skip
    kfd = DriverFacts(kind="rocm", device_nodes=("/dev/kfd",))
    assert check_device("rocm", torch=rocm_torch, driver=kfd, env={}, torch_required=True).ok
    hidden = check_device(
        "rocm",
        torch=_torch(version="2.13.0+rocm7.2", cuda=None, hip="7.2.1", device_available=False),
        driver=kfd,
        env={"HIP_VISIBLE_DEVICES": "-1"},
        torch_required=True,
    )
    assert not hidden.ok and hidden.cause is not None and "HIP_VISIBLE_DEVICES" in hidden.cause


def _world(smi: str | None, proc: str | None, dev: list[str], runner: FakeRunner) -> DriverFacts:
    files = {"/proc/driver/nvidia/version": proc}
    return read_driver_facts(
        "cuda",
        runner=runner,
        env={},
        which=lambda name: smi if name == "nvidia-smi" else None,
        read_text=files.get,
        list_dev=lambda: dev,
    )


def test_a_cuda_device_name_is_not_a_gfx_arch() -> None:
    """torch 2.11+cu130 answers gcnArchName with 'NVIDIA H200' (seen on the H200)."""
    h200 = GpuInfo(index=0, name="NVIDIA H200", capability=(9, 0), gcn_arch="NVIDIA H200")
    assert h200.arch == "sm_90"


def test_driver_facts_from_nvidia_smi_then_proc() -> None:
    runner = FakeRunner().on("/usr/bin/nvidia-smi", output="NVIDIA H100 80GB HBM3, 580.159.04\n")
    facts = _world("/usr/bin/nvidia-smi", None, ["nvidia0", "nvidiactl", "null"], runner)
    assert (facts.driver, facts.source, facts.gpu_names) == (
        "580.159.04",
        "nvidia-smi",
        ("NVIDIA H100 80GB HBM3",),
    )
    assert facts.device_nodes == ("/dev/nvidia0", "/dev/nvidiactl")
    assert runner.argvs == [
        ["/usr/bin/nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
    ]
    failing = FakeRunner().on(
        "/usr/bin/nvidia-smi",
        returncode=9,
        output="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
    )
    proc = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n"
    facts = _world("/usr/bin/nvidia-smi", proc, [], failing)
    assert (facts.driver, facts.source) == ("580.159.04", "/proc/driver/nvidia/version")
    assert facts.problem is not None and facts.problem.startswith("NVIDIA-SMI has failed")
    assert not _world(None, None, ["null"], FakeRunner()).present


# --------------------------------------------------------------------------- coverage


def _elf(arcname: str, fixture: str, *, grafted: bool = False) -> WheelElf:
    return WheelElf(arcname=arcname, info=inspect_elf(CUDA_FIXTURES / fixture), grafted=grafted)


SM75_80_PTX90 = "kernel_sm75_sm80_compute90.o"
SM90A = "kernel_sm90a_sm100f_sm120_compute120.o"


def test_a_cubin_of_the_gpus_arch_covers_it() -> None:
    cov = device_coverage(
        [_elf("pkg/_C.so", SM90A)], [H100], kind="cuda", wheel_cuda="13.0", driver_cuda="13.0"
    )
    assert cov.covered and "cubin for GPU 0 (NVIDIA H100 80GB HBM3, sm_90)" in cov.detail


def test_ptx_covers_only_where_the_driver_can_jit_it() -> None:
    elves = [_elf("pkg/_C.so", SM75_80_PTX90)]  # sm_75, sm_80 cubins; compute_90 PTX
    jit = device_coverage(elves, [H100], kind="cuda", wheel_cuda="13.0", driver_cuda="13.0")
    assert jit.covered and "PTX JIT-compiled for GPU 0" in jit.detail
    old = device_coverage(elves, [H100], kind="cuda", wheel_cuda="13.0", driver_cuda="12.8")
    assert not old.covered
    assert "PTX of CUDA 13.0, which a driver supporting CUDA 12.8 cannot JIT" in old.detail


def test_a_wheel_without_code_for_the_gpu_is_not_covered() -> None:
    elves = [_elf("pkg/_C.so", SM90A)]  # sm_90a runs on 9.0 only; the A100 is 8.0
    cov = device_coverage(elves, [A100], kind="cuda", wheel_cuda="13.0", driver_cuda="13.0")
    assert not cov.covered
    assert "pkg/_C.so has no device code for GPU 0 (NVIDIA A100-SXM4-80GB, sm_80)" in cov.detail
    assert "carries compute_120, sm_100f, sm_120, sm_90a" in cov.detail
    assert "no kernel image is available" in cov.detail
    # an optional module's binary (torchao's Blackwell-only _C_mxfp8 on Hopper) is noted
    opt = device_coverage(
        elves,
        [A100],
        kind="cuda",
        wheel_cuda="13.0",
        driver_cuda="13.0",
        optional=frozenset({"pkg/_C.so"}),
    )
    assert opt.covered and "(an optional module)" in opt.detail
    none = device_coverage([], [H100], kind="cuda", wheel_cuda="13.0", driver_cuda="13.0")
    assert not none.covered and "no binary in the wheel carries CUDA device code" in none.detail


# --------------------------------------------------------------------------- compiled modules


def _info(*exported: str, cuda: DeviceCode | None = None) -> ElfInfo:
    return ElfInfo(
        path=Path("/x.so"),
        machine="x86_64",
        soname=None,
        needed=(),
        rpath=(),
        runpath=(),
        exported=frozenset(exported),
        undefined=(),
        cuda=cuda,
        hip=None,
        cxx_abi=None,
    )


def test_compiled_modules_imports_extension_modules_only() -> None:
    elves = [
        WheelElf(arcname="pkg/_C.cpython-312-x86_64-linux-gnu.so", info=_info("PyInit__C"),
                 grafted=False),
        WheelElf(arcname="pkg/sub/_fast.abi3.so", info=_info("PyInit__fast"), grafted=False),
        WheelElf(arcname="pkg-1.0.data/platlib/pkg/_plat.so", info=_info("PyInit__plat"),
                 grafted=False),
        WheelElf(arcname="pkg/_ops.so", info=_info("ops_entry"), grafted=False),
        WheelElf(arcname="pkg.libs/libfoo-1a2b3c4d.so.1", info=_info(), grafted=True),
        WheelElf(arcname="pkg/lib/libbar.so.2", info=_info(), grafted=False),
        WheelElf(arcname="pkg/_old.cpython-311-x86_64-linux-gnu.so", info=_info("PyInit__old"),
                 grafted=False),
        WheelElf(arcname="pkg-1.0.data/scripts/tool.so", info=_info("PyInit_tool"),
                 grafted=False),
    ]  # fmt: skip
    got = {m.arcname: (m.name, m.importable) for m in compiled_modules(elves, python="3.12")}
    assert got == {
        "pkg/_C.cpython-312-x86_64-linux-gnu.so": ("pkg._C", True),
        "pkg/sub/_fast.abi3.so": ("pkg.sub._fast", True),
        "pkg-1.0.data/platlib/pkg/_plat.so": ("pkg._plat", True),
        "pkg/_ops.so": ("pkg._ops", False),  # torch.ops.load_library's kind: no PyInit
        "pkg.libs/libfoo-1a2b3c4d.so.1": (None, False),
        "pkg/lib/libbar.so.2": (None, False),
        "pkg/_old.cpython-311-x86_64-linux-gnu.so": ("pkg._old", False),
    }
    reasons = {m.arcname: m.reason for m in compiled_modules(elves, python="3.12")}
    assert str(reasons["pkg/_ops.so"]).startswith("no PyInit__ops: not a Python extension module")
    assert reasons["pkg/_old.cpython-311-x86_64-linux-gnu.so"] == (
        "built for CPython 3.11; this env runs 3.12"
    )
    assert str(reasons["pkg.libs/libfoo-1a2b3c4d.so.1"]).startswith("a library auditwheel grafted")
    assert install_path("pkg-1.0.data/platlib/pkg/_plat.so") == "pkg/_plat.so"


def test_a_non_ascii_module_is_found_by_its_pep489_init_function() -> None:
    elves = [
        WheelElf(arcname="pkg/café.cpython-312-x86_64-linux-gnu.so",
                 info=_info("PyInitU_caf_dma"), grafted=False),
    ]  # fmt: skip
    (got,) = compiled_modules(elves, python="3.12")
    assert (got.name, got.importable, got.error) == ("pkg.café", True, None)


def test_a_module_file_whose_init_function_is_another_names_is_an_error() -> None:
    elves = [
        WheelElf(arcname="pkg/_renamed.cpython-312-x86_64-linux-gnu.so",
                 info=_info("PyInit__original"), grafted=False),
        WheelElf(arcname="pkg/_ops.abi3.so", info=_info("PyInit__kernels"), grafted=False),
        # a library that embeds a module is no module file: skipped as before
        WheelElf(arcname="pkg/libembed.so", info=_info("PyInit_embed"), grafted=False),
    ]  # fmt: skip
    listed = compiled_modules(elves, python="3.12")
    renamed, ops, lib = listed
    assert renamed.error is not None and renamed.error.startswith(
        "exports PyInit__original, not PyInit__renamed: Python cannot import it as pkg._renamed"
    )
    assert ops.error is not None and lib.error is None and not lib.importable
    # it fails the wheel without being loaded (the child is never asked to import it)
    outcomes, failures, _ = load_outcomes(listed, ChildReport(), frozenset())
    assert [o.outcome for o in outcomes] == ["failed", "failed", "skipped"]
    assert failures[0].startswith("pkg._renamed (pkg/_renamed.cpython-312-x86_64-linux-gnu.so)")
    spec = child_spec(listed, packages=["pkg"], site=Path("/site"), members=[])
    assert spec["compiled"] == []
    _, failures, notes = load_outcomes(listed, ChildReport(), frozenset({"pkg._renamed"}))
    assert len(failures) == 1 and notes[0].startswith("optional module pkg._renamed did not")


def test_the_child_is_told_which_file_each_import_must_come_from() -> None:
    elves = [
        WheelElf(arcname="os.cpython-312-x86_64-linux-gnu.so", info=_info("PyInit_os"),
                 grafted=False),
        WheelElf(arcname="pkg-1.0.data/platlib/pkg/_C.abi3.so", info=_info("PyInit__C"),
                 grafted=False),
        WheelElf(arcname="pkg.libs/libx.so", info=_info(), grafted=True),
    ]  # fmt: skip
    members = [
        "os.cpython-312-x86_64-linux-gnu.so",
        "pkg/__init__.py",
        "pkg-1.0.data/platlib/pkg/_C.abi3.so",
        "pkg.libs/libx.so",
        "single.py",
        "pkg-1.0.dist-info/METADATA",
    ]
    listed = compiled_modules(elves, python="3.12")
    site = Path("/venv/lib/python3.12/site-packages")
    spec = child_spec(listed, packages=["pkg", "os", "single", "json"], site=site, members=members)
    assert spec["compiled"] == [
        {"name": "os", "file": f"{site}/os.cpython-312-x86_64-linux-gnu.so"},
        {"name": "pkg._C", "file": f"{site}/pkg/_C.abi3.so"},
    ]
    paths = {p["name"]: p["paths"] for p in spec["packages"]}
    assert paths["pkg"] == {"dirs": [f"{site}/pkg"], "files": []}
    assert paths["os"] == {"dirs": [], "files": [f"{site}/os.cpython-312-x86_64-linux-gnu.so"]}
    assert paths["single"] == {"dirs": [], "files": [f"{site}/single.py"]}
    assert paths["json"] == {"dirs": [], "files": []}  # top_level.txt naming what it lacks
    assert spec["watch"] == ["pkg.libs/libx.so"]
    unknown = child_spec(listed, packages=["pkg"], site=site, members=[])
    assert unknown["packages"] == [{"name": "pkg", "paths": None}]


def test_load_errors_are_demangled_and_name_the_missing_library() -> None:
    undefined = describe_load_error(
        "ImportError: /env/site-packages/pkg/_accel.so: undefined symbol: _ZN7guarded14missing_kernelEi"
    )
    assert undefined.endswith("(undefined symbol guarded::missing_kernel(int))")
    missing = describe_load_error(
        "ImportError: libcudart.so.13: cannot open shared object file: No such file or directory"
    )
    assert missing.endswith("(missing library libcudart.so.13)")
    plain = "ImportError: undefined symbol: cblas_sgemm"
    assert describe_load_error(plain) == plain  # a C symbol needs no demangling


def _say(*events: dict[str, object]) -> str:
    return "".join(CHILD_TAG + json.dumps(e) + "\n" for e in events)


def test_the_child_report_says_which_module_failed_to_load() -> None:
    out = _say(
        {"event": "imported", "module": "torch"},
        {"event": "imported", "module": "pkg"},
        {"event": "load", "module": "pkg._core"},
        {"event": "loaded", "module": "pkg._core"},
        {"event": "load", "module": "pkg._accel"},
        {"event": "load-failed", "module": "pkg._accel", "error": "ImportError: x"},
        {"event": "maps", "libs": {}, "watched": ["pkg/_helper.so"]},
    )
    child = parse_child_report(out)
    assert child.loaded == ("pkg._core",) and child.load_failed == {"pkg._accel": "ImportError: x"}
    assert child.importing is None and child.watched == ("pkg/_helper.so",)
    # an abort while loading: the module being loaded is named
    died = parse_child_report(_say({"event": "load", "module": "pkg._accel"}))
    assert died.importing == "pkg._accel"
    planned = [
        CompiledModule(arcname="pkg/_core.so", name="pkg._core", importable=True),
        CompiledModule(arcname="pkg/_accel.so", name="pkg._accel", importable=True),
        CompiledModule(
            arcname="pkg/_helper.so", name="pkg._helper", importable=False,
            reason="no PyInit__helper",
        ),
        CompiledModule(
            arcname="pkg/_lazy.so", name="pkg._lazy", importable=False, reason="no PyInit__lazy"
        ),
    ]  # fmt: skip
    outcomes, failures, notes = load_outcomes(planned, child, frozenset())
    assert [(o.outcome, o.mapped) for o in outcomes] == [
        ("loaded", None),
        ("failed", None),
        ("skipped", True),
        ("skipped", False),
    ]
    assert failures == ["pkg._accel (pkg/_accel.so): ImportError: x"] and not notes
    outcomes, failures, notes = load_outcomes(planned, child, frozenset({"pkg._accel"}))
    assert outcomes[1].outcome == "optional-failed" and not failures
    assert notes == ["optional module pkg._accel did not load: ImportError: x"]
    # a child that died before reaching a module: that module did not load either
    _, failures, _ = load_outcomes(planned[:1], ChildReport(), frozenset())
    assert failures == ["pkg._core (pkg/_core.so): not reached"]


# --------------------------------------------------------------------------- the cases file


def test_read_cases_counts_device_cases_and_refuses_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "cases.json"
    assert read_cases(path) is None
    path.write_text(
        json.dumps(
            {
                "schema": CASES_SCHEMA,
                "device": {"type": "cuda", "name": "NVIDIA H100", "capability": "9.0"},
                "cases": [
                    {"device": "cpu", "name": "float32 a", "ok": True},
                    {"device": "cuda", "name": "float32 a", "ok": True},
                    {"device": "cuda", "name": "float16 a", "ok": False},
                ],
            }
        )
    )
    cases = read_cases(path)
    assert not isinstance(cases, str) and cases is not None
    assert cases.counts == {"cpu": 1, "cuda": 2} and cases.ran_on_device == 2
    assert cases.device_cases == ("cuda float32 a", "cuda float16 a") and cases.failed == 1
    assert cases.device == "cuda: NVIDIA H100 (capability 9.0)"
    path.write_text(json.dumps({"schema": "other", "cases": []}))
    assert read_cases(path) == "cases.json: schema is not 'torch-buildtools/smoke-cases/v1'"
    path.write_text(json.dumps({"schema": CASES_SCHEMA, "cases": [{"device": 3}]}))
    assert read_cases(path) == "cases.json: cases[0] needs a string device and a boolean ok"
    path.write_bytes(b"[" * (1 << 20) + b"x")
    assert str(read_cases(path)).endswith("is larger than 1048576 bytes")


# --------------------------------------------------------------------------- run_smoke


def _cuda_wheel(tmp_path: Path, device_code: str | None, accelerator: str = "cu130") -> Path:
    name = f"bt_scatter-0.1.0+pt211{accelerator}-cp312-cp312-manylinux_2_28_x86_64.whl"
    path = tmp_path / name
    record = {
        "schema": 1,
        "torch": "2.11.0+cu130",
        "accelerator": accelerator,
        "cuda": "13.0" if accelerator != "cpu" else None,
        "cxx11_abi": True,
        "python": "3.12.3",
        "cells": [f"torch2.11.0-{accelerator}-cp312"],
    }
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("bt_scatter/__init__.py", "")
        if device_code is not None:
            zf.writestr(
                "bt_scatter/_C.cpython-312-x86_64-linux-gnu.so",
                (CUDA_FIXTURES / device_code).read_bytes(),
            )
        dist = f"bt_scatter-0.1.0+pt211{accelerator}.dist-info"
        zf.writestr(
            f"{dist}/METADATA",
            f"Metadata-Version: 2.1\nName: bt-scatter\nVersion: 0.1.0+pt211{accelerator}\n",
        )
        zf.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\n")
        zf.writestr(f"{dist}/buildtools.json", json.dumps(record))
        zf.writestr(f"{dist}/RECORD", "")
    return path


def _make_venv(call: Call) -> None:
    (Path(call.argv[-1]) / "bin").mkdir(parents=True, exist_ok=True)
    (Path(call.argv[-1]) / "bin" / "python").write_text("")


def _runner() -> FakeRunner:
    return (
        FakeRunner()
        .on(ANY, "-m", "pip", "--version", output="pip 24.0 from /x (python 3.12)\n")
        .on(ANY, "-m", "venv", effect=_make_venv)
    )


def _opts(tmp_path: Path, **kw: object) -> SmokeOptions:
    base: dict[str, object] = {
        "out_dir": tmp_path / "out",
        "cache_dir": tmp_path / "cache",
        "env": {"PATH": "", "HOME": str(tmp_path)},
        "torch_source": "system",
        "torch_python": Path("/runner/bin/python3.12"),
        "driver": DRIVER,
    }
    return SmokeOptions(**(base | kw))  # type: ignore[arg-type]


def _run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    torch: TorchInstall,
    wheel: Path,
    runner: FakeRunner,
    **kw: object,
) -> tuple[SmokeStatus, str | None, object]:
    monkeypatch.setattr("buildtools.smoke.run.probe_torch", lambda *a, **k: ("3.12.3", torch))
    report = run_smoke(
        [WheelSource(path=wheel, origin=str(wheel))],
        opts=_opts(tmp_path, **kw),
        runner=runner,
        accelerator="cuda",
        out=io.StringIO(),
    )
    (res,) = report.results
    return res.status, res.diagnosis, report


def _installs(runner: FakeRunner) -> list[list[str]]:
    return [a for a in runner.argvs if "install" in a]


def test_no_device_refuses_before_creating_or_installing_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = _runner()
    torch = _torch(device_available=False, device_count=0, driver_cuda=None, gpus=())
    status, diagnosis, report = _run(
        tmp_path, monkeypatch, torch, _cuda_wheel(tmp_path, SM90A), runner, driver=NO_DRIVER
    )
    assert status is SmokeStatus.NO_DEVICE, diagnosis
    assert diagnosis is not None
    assert diagnosis.startswith("not installed: no GPU visible: no NVIDIA driver (no nvidia-smi")
    assert runner.calls == []  # not even a venv
    data = report.to_json()  # type: ignore[attr-defined]
    assert data["runner"]["device_check"].startswith("no GPU visible: no NVIDIA driver")
    assert NoDeviceError("x").exit_code is ExitCode.NO_DEVICE == 17
    gate = SmokeGate(statuses={"a" * 64: ("no-device",), "b" * 64: ("not-covered", "passed")})
    assert gate.verdict("a" * 64) == "smoke no-device"
    assert gate.verdict("b" * 64) == "smoke not-covered"


def test_a_wheel_without_code_for_the_gpu_is_not_covered_and_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = _runner()
    torch = _torch(gpus=(A100,))
    status, diagnosis, report = _run(
        tmp_path, monkeypatch, torch, _cuda_wheel(tmp_path, SM90A), runner
    )
    assert status is SmokeStatus.NOT_COVERED
    assert diagnosis is not None
    assert diagnosis.startswith("the wheel's device code does not run on this GPU: ")
    assert not _installs(runner)
    gpus = report.to_json()["runner"]["gpus"]  # type: ignore[attr-defined]
    assert gpus == [
        {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "capability": [8, 0], "gcn_arch": None,
         "arch": "sm_80"}
    ]  # fmt: skip


def _smoke_writes(cases: list[dict[str, object]], device: object) -> FakeRunner:
    def write(call: Call) -> None:
        assert call.env is not None and call.env[DEVICE_ENV] == "cuda"
        Path(call.env[CASES_ENV]).write_text(
            json.dumps({"schema": CASES_SCHEMA, "device": device, "cases": cases})
        )

    return _runner().on("/smoke-cmd", effect=write)


def test_a_gpu_smoke_reports_its_device_cases_and_fails_without_any(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    device = {"type": "cuda", "name": "NVIDIA H100 80GB HBM3", "capability": "9.0"}
    ran = [{"device": "cuda", "name": "float32 n=10", "ok": True}]
    status, _, report = _run(
        tmp_path,
        monkeypatch,
        _torch(),
        _cuda_wheel(tmp_path, SM90A),
        _smoke_writes(ran, device),
        smoke_command="/smoke-cmd",
    )
    assert status is SmokeStatus.PASSED
    res = report.to_json()["results"][0]  # type: ignore[attr-defined]
    assert res["cases"]["device"] == "cuda: NVIDIA H100 80GB HBM3 (capability 9.0)"
    assert res["cases"]["device_cases"] == ["cuda float32 n=10"]
    assert "cubin for GPU 0 (NVIDIA H100 80GB HBM3, sm_90)" in res["device_code"]
    cpu_only = [{"device": "cpu", "name": "float32 n=10", "ok": True}]
    status, diagnosis, _ = _run(
        tmp_path / "2",
        monkeypatch,
        _torch(),
        _cuda_wheel(tmp_path, SM90A),
        _smoke_writes(cpu_only, None),
        smoke_command="/smoke-cmd",
    )
    assert status is SmokeStatus.FAILED
    assert diagnosis == "the smoke command ran no case on the cuda device (it reported: cpu 1)"


def test_a_cpu_wheel_on_a_gpu_runner_is_tested_as_a_cpu_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No coverage to judge, and its smoke command is told `cpu`, not the runner's device."""
    seen: list[str] = []

    def record(call: Call) -> None:
        assert call.env is not None
        seen.append(call.env[DEVICE_ENV])

    runner = _runner().on("/smoke-cmd", effect=record)
    monkeypatch.setattr("buildtools.smoke.run.probe_torch", lambda *a, **k: ("3.12.3", _torch()))
    # the runner's torch stands in for the CPU cell's (the env is not what this test is about)
    monkeypatch.setattr("buildtools.smoke.run.torch_matches", lambda *a: True)
    wheel = _cuda_wheel(tmp_path, None, "cpu")
    report = run_smoke(
        [WheelSource(path=wheel, origin=str(wheel))],
        opts=_opts(tmp_path, smoke_command="/smoke-cmd"),
        runner=runner,
        accelerator="cuda",
        out=io.StringIO(),
    )
    (res,) = report.results
    assert res.status is SmokeStatus.PASSED, res.diagnosis
    assert res.device_code is None and seen == ["cpu"]


def test_a_failed_compiled_module_fails_the_wheel_unless_optional(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel = tmp_path / "w" / "pkg-1.0+pt211cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(_cuda_wheel(tmp_path, SM90A)) as src, zipfile.ZipFile(wheel, "w") as zf:
        for item in src.infolist():  # the same files as project pkg 1.0 (pip checks the name)
            data = src.read(item).replace(b"Name: bt-scatter", b"Name: pkg")
            data = data.replace(b"Version: 0.1.0+", b"Version: 1.0+")
            name = item.filename.replace("bt_scatter-0.1.0+", "pkg-1.0+")
            zf.writestr(name, data)
    failed = _say(
        {"event": "imported", "module": "torch"},
        {"event": "imported", "module": "bt_scatter"},
        {"event": "load", "module": "bt_scatter._C"},
        {"event": "load-failed", "module": "bt_scatter._C",
         "error": "ImportError: libc10_cuda.so: cannot open shared object file: No such file"},
        {"event": "maps", "libs": {}, "watched": []},
    )  # fmt: skip

    class ImportCheck(FakeRunner):
        """The usual answers; the import check prints `failed`."""

        def respond(self, call: Call) -> CommandResult:
            if len(call.argv) > 1 and call.argv[1].endswith("buildtools_import_check.py"):
                return CommandResult(argv=call.argv, returncode=0, output=failed)
            return super().respond(call)

    def runner() -> FakeRunner:
        fake = ImportCheck()
        fake.on(ANY, "-m", "pip", "--version", output="pip 24.0 from /x (python 3.12)\n")
        fake.on(ANY, "-m", "venv", effect=_make_venv)
        return fake

    # the fixture object exports no PyInit: give the planner a module that does
    monkeypatch.setattr(
        "buildtools.smoke.run.compiled_modules",
        lambda elves, python: [
            CompiledModule(arcname=e.arcname, name="bt_scatter._C", importable=True) for e in elves
        ],
    )
    status, diagnosis, _ = _run(tmp_path / "a", monkeypatch, _torch(), wheel, runner())
    assert status is SmokeStatus.IMPORT_ERROR
    assert diagnosis is not None
    assert "import of bt_scatter succeeded, but compiled module bt_scatter._C" in diagnosis
    assert "(missing library libc10_cuda.so)" in diagnosis
    status, _, report = _run(
        tmp_path / "b",
        monkeypatch,
        _torch(),
        wheel,
        runner(),
        optional_modules=frozenset({"bt_scatter._C", "bt_scatter._gone"}),
    )
    assert status is SmokeStatus.PASSED
    res = report.to_json()["results"][0]  # type: ignore[attr-defined]
    assert res["modules"][0]["outcome"] == "optional-failed"
    assert "optional module bt_scatter._gone is not in the wheel" in res["findings"]


# --------------------------------------------------------------------------- declarations


def test_auto_on_a_declared_gpu_runner_is_that_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("buildtools.cli.smoke.detect_accelerator", lambda **kw: "cpu")
    out = io.StringIO()
    env = {"BUILDTOOLS_RUNNER_ACCELERATOR": "cuda"}
    assert _runner_accelerator(argparse.Namespace(accelerator="auto"), env, out) == "cuda"
    assert "accelerator auto → cuda ($BUILDTOOLS_RUNNER_ACCELERATOR)" in out.getvalue()
    with pytest.raises(ConfigError, match="--accelerator cpu on a runner declared cuda"):
        _runner_accelerator(argparse.Namespace(accelerator="cpu"), env, out)
    with pytest.raises(ConfigError, match="allowed: cpu, cuda, rocm"):
        _runner_accelerator(
            argparse.Namespace(accelerator="auto"), {"BUILDTOOLS_RUNNER_ACCELERATOR": "gpu"}, out
        )
    # undeclared: auto says what it found, so a CPU fallback is never silent
    assert _runner_accelerator(argparse.Namespace(accelerator="auto"), {}, out) == "cpu"
    assert "accelerator auto → cpu (no nvidia-smi" in out.getvalue()


def test_optional_modules_are_validated_with_file_and_line(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.yaml"
    head = "version: 1\nproject:\n  path: .\n  optional_modules:\n"
    axes = "axes:\n  torch: ['2.11.0']\n  accelerator: [cpu]\n  python: ['3.12']\n"
    matrix.write_text(head + "    - pkg._cuda\n" + axes)
    assert load_matrix(matrix).matrix.project.optional_modules == ["pkg._cuda"]
    for bad, message in (
        ("pkg/_cuda.so", "'pkg/_cuda.so' is not a module name"),
        ("pkg.class", "'pkg.class' is not a module name"),
    ):
        matrix.write_text(head + f"    - {bad}\n" + axes)
        with pytest.raises(ConfigError) as info:
            load_matrix(matrix)
        assert "matrix.yaml:4: project.optional_modules" in str(info.value)
        assert message in str(info.value)
    matrix.write_text(head + textwrap.indent("- a.b\n- a.b\n", "    ") + axes)
    with pytest.raises(ConfigError, match=r"'a\.b' is listed twice"):
        load_matrix(matrix)


def test_a_wheel_install_that_swaps_the_torch_under_test_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pip constraint (`torch<=2.14.1` on the machine this was found on) made the wheel's
    install put torch 2.14.1 over the 2.15.0 under test: the entry names the torch that ran,
    never the one it was meant to test, and fails."""
    swapped = _say(
        {"event": "imported", "module": "torch", "version": "2.10.0+cu128"},
        {"event": "imported", "module": "bt_scatter"},
        {"event": "maps", "libs": {}, "watched": []},
    )

    class ImportCheck(FakeRunner):
        def respond(self, call: Call) -> CommandResult:
            if len(call.argv) > 1 and call.argv[1].endswith("buildtools_import_check.py"):
                return CommandResult(argv=call.argv, returncode=0, output=swapped)
            return super().respond(call)

    runner = ImportCheck()
    runner.on(ANY, "-m", "pip", "--version", output="pip 24.0 from /x (python 3.12)\n")
    runner.on(ANY, "-m", "venv", effect=_make_venv)
    status, diagnosis, report = _run(
        tmp_path, monkeypatch, _torch(), _cuda_wheel(tmp_path, SM90A), runner
    )
    assert status is SmokeStatus.FAILED
    assert diagnosis == (
        "the wheel ran on torch 2.10.0+cu128, not the 2.11.0+cu130 under test: installing it "
        "put another torch first on the path"
    )
    assert report.to_json()["results"][0]["torch"] == "2.10.0+cu128"  # type: ignore[attr-defined]
