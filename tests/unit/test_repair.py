"""repair: derived excludes, the exact auditwheel argv per policy, execution via the fake ProcessRunner."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from fixtures.crafted import make_site_packages, make_so, make_wheel
from fixtures.fakes import Call, FakeRunner

from buildtools.context import RunContext
from buildtools.errors import BuildFailedError, ToolchainError
from buildtools.wheel.repair import (
    Grafting,
    PlatformTagReport,
    RepairTools,
    best_platform_tag,
    derive_excludes,
    plan_repair,
    run_repair,
    scan_torch_libs,
)

NEVER = ("libcuda.so.1", "libnvidia-ml.so.1")
PY = "/venv/bin/python"
PATCHELF = Path("/venv/bin")
BASE_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/home/u"}


AUDITWHEEL = (PY, "-m", "auditwheel")


@pytest.fixture
def cuda_site(tmp_path: Path) -> Path:
    return make_site_packages(
        tmp_path / "site", version="2.11.0+cu130", cuda="13.0", with_nvidia=True
    )


def test_derive_excludes_follows_torch_requirements(cuda_site: Path) -> None:
    excludes = derive_excludes(cuda_site, NEVER)
    assert excludes == (
        "libc10.so",
        "libc10_cuda.so",
        "libcublas.so.13",
        "libcublasLt.so.13",
        "libcuda.so.1",
        "libcudart.so.13",
        "libgomp.so.1",
        "libnccl.so.2",
        "libnvidia-ml.so.1",
        "libtorch.so",
        "libtorch_cpu.so",
        "libtorch_cuda.so",
    )
    # cufft is installed but torch asked cuda-toolkit only for [cublas,cudart]
    assert "libcufft.so.12" not in excludes


def test_scan_torch_libs(cuda_site: Path) -> None:
    libs = scan_torch_libs(cuda_site)
    assert libs.distributions == (
        "cuda-toolkit",
        "filelock",
        "nvidia-cublas",
        "nvidia-cuda-runtime",
        "nvidia-nccl-cu13",
        "torch",
    )
    assert libs.library_dirs == (
        cuda_site.resolve() / "nvidia" / "cu13" / "lib",
        cuda_site.resolve() / "nvidia" / "nccl" / "lib",
        cuda_site.resolve() / "torch" / "lib",
    )
    # torch/_C*.so is not a lib*.so: the extension never links it
    assert all(p.name.startswith("lib") for p in libs.files)


def test_scan_torch_libs_without_torch(tmp_path: Path) -> None:
    with pytest.raises(ToolchainError, match="no torch installation"):
        scan_torch_libs(tmp_path)


def test_derive_excludes_uses_sonames_not_file_names(tmp_path: Path) -> None:
    site = make_site_packages(tmp_path / "site")
    lib = site / "torch" / "lib" / "libtorch_cpu.so"
    lib.write_bytes(make_so(soname="libtorch_cpu-1a2b3c4d.so"))
    assert "libtorch_cpu-1a2b3c4d.so" in derive_excludes(site, ())


def test_plan_auto_exact_argv(tmp_path: Path) -> None:
    plan = plan_repair(
        Path("/w/ext_ok-0.1.0-cp311-cp311-linux_x86_64.whl"),
        dest_dir=Path("/out"),
        plat="manylinux_2_28_x86_64",
        tools=RepairTools(python=PY, env=BASE_ENV, patchelf_dir=PATCHELF),
        grafting=Grafting(
            excludes=("libc10.so", "libtorch.so"),
            user_excludes=("libfoo.so.*", "libc10.so"),
            library_dirs=(Path("/site/torch/lib"), Path("/site/nvidia/cu13/lib")),
        ),
    )
    assert plan.policy == "auto"
    assert plan.argv == (
        PY,
        "-m",
        "auditwheel",
        "repair",
        "--plat",
        "manylinux_2_28_x86_64",
        "-w",
        "/out",
        "--exclude",
        "libc10.so",
        "--exclude",
        "libtorch.so",
        "--exclude",
        "libfoo.so.*",
        "/w/ext_ok-0.1.0-cp311-cp311-linux_x86_64.whl",
    )
    env = plan.env_dict
    assert env["PATH"] == "/venv/bin:/usr/bin:/bin"
    assert env["AUDITWHEEL_LD_LIBRARY_PATH"] == "/site/torch/lib:/site/nvidia/cu13/lib"
    assert env["LD_LIBRARY_PATH"] == "/site/torch/lib:/site/nvidia/cu13/lib"
    assert env["HOME"] == "/home/u"


def test_plan_keeps_existing_library_path() -> None:
    plan = plan_repair(
        Path("/w/a-1-cp311-cp311-linux_x86_64.whl"),
        dest_dir=Path("/out"),
        plat="manylinux_2_34_x86_64",
        tools=RepairTools(
            python=PY, env={**BASE_ENV, "LD_LIBRARY_PATH": "/opt/x"}, patchelf_dir=PATCHELF
        ),
        grafting=Grafting(library_dirs=(Path("/t/lib"),)),
    )
    assert plan.env_dict["LD_LIBRARY_PATH"] == "/t/lib:/opt/x"
    assert "--exclude" not in plan.argv


def test_plan_skip_has_no_command() -> None:
    plan = plan_repair(
        Path("/w/a-1-cp311-cp311-linux_x86_64.whl"),
        dest_dir=Path("/out"),
        plat="manylinux_2_28_x86_64",
        policy="skip",
        tools=RepairTools(python=PY, env=BASE_ENV, patchelf_dir=PATCHELF),
    )
    assert plan.policy == "skip"
    assert plan.argv == ()


@pytest.mark.parametrize(
    "template",
    [
        ["auditwheel", "repair", "-w", "{dest_dir}", "--plat", "{plat}", "{wheel}"],
        "auditwheel repair -w {dest_dir} --plat {plat} {wheel}",
    ],
)
def test_plan_custom_template(template: str | list[str]) -> None:
    plan = plan_repair(
        Path("/w/my wheel-1-cp311-cp311-linux_x86_64.whl"),
        dest_dir=Path("/out dir"),
        plat="manylinux_2_28_x86_64",
        policy=template,
        tools=RepairTools(python=PY, env=BASE_ENV, patchelf_dir=PATCHELF),
    )
    assert plan.policy == "custom"
    # substituted per argument: spaces in paths stay inside one argument, no shell
    assert plan.argv == (
        "auditwheel",
        "repair",
        "-w",
        "/out dir",
        "--plat",
        "manylinux_2_28_x86_64",
        "/w/my wheel-1-cp311-cp311-linux_x86_64.whl",
    )


@pytest.mark.parametrize(
    ("policy", "match"),
    [
        (["delocate", "{wheel}", "{out}"], r"unknown placeholder \{out\}"),
        (["auditwheel", "repair"], "expected 'auto', 'skip' or a command containing"),
        ("", "expected 'auto', 'skip' or a command containing"),
    ],
)
def test_plan_custom_template_errors(policy: str | list[str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        plan_repair(
            Path("/w/a-1-cp311-cp311-linux_x86_64.whl"),
            dest_dir=Path("/out"),
            plat="manylinux_2_28_x86_64",
            policy=policy,
            tools=RepairTools(python=PY, env=BASE_ENV, patchelf_dir=PATCHELF),
        )


def test_run_repair_auto_returns_the_new_wheel(tmp_path: Path) -> None:
    raw = make_wheel(tmp_path / "raw", files={"m.py": b""})
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "other-1.0-py3-none-any.whl").write_bytes(b"old")

    def write_the_repaired_wheel(call: Call) -> None:
        (dest / "ext_ok-0.1.0-cp311-cp311-manylinux_2_34_x86_64.whl").write_bytes(b"new")

    runner = FakeRunner().on(*AUDITWHEEL, "repair", effect=write_the_repaired_wheel)
    plan = plan_repair(
        raw,
        dest_dir=dest,
        plat="manylinux_2_34_x86_64",
        tools=RepairTools(python=PY, env=BASE_ENV, patchelf_dir=PATCHELF),
        grafting=Grafting(excludes=("libc10.so",)),
    )
    out = run_repair(plan, runner=runner)
    assert out == dest / "ext_ok-0.1.0-cp311-cp311-manylinux_2_34_x86_64.whl"
    assert [(c.argv, c.env) for c in runner.calls] == [(plan.argv, plan.env_dict)]


def test_run_repair_failure_names_the_problem(tmp_path: Path) -> None:
    raw = make_wheel(tmp_path / "raw", files={"m.py": b""})
    out = (
        "INFO:auditwheel.main_repair:Repairing ext_ok-0.1.0-cp311-cp311-linux_x86_64.whl\n"
        "ValueError: Cannot repair wheel, because required library "
        '"libc10.so" could not be located\n'
    )
    runner = FakeRunner().on(*AUDITWHEEL, "repair", returncode=1, output=out)
    plan = plan_repair(
        raw,
        dest_dir=tmp_path / "o",
        plat="manylinux_2_34_x86_64",
        tools=RepairTools(python=PY, env=BASE_ENV, patchelf_dir=PATCHELF),
    )
    with (tmp_path / "repair.log").open("w") as log, pytest.raises(BuildFailedError) as err:
        run_repair(plan, runner=runner, log=log)
    text = str(err.value)
    assert "repair of ext_ok-0.1.0-cp311-cp311-linux_x86_64.whl failed (exit 1)" in text
    assert f"full log: {tmp_path / 'repair.log'}" in text
    assert "could not find a library the wheel needs" in text
    assert '"libc10.so" could not be located' in text


def test_run_repair_without_output_wheel(tmp_path: Path) -> None:
    raw = make_wheel(tmp_path / "raw", files={"m.py": b""})
    plan = plan_repair(
        raw,
        dest_dir=tmp_path / "o",
        plat="manylinux_2_34_x86_64",
        tools=RepairTools(python=PY, env=BASE_ENV, patchelf_dir=PATCHELF),
    )
    with pytest.raises(BuildFailedError, match="holds 0 new wheels"):
        run_repair(plan, runner=FakeRunner())


def test_run_repair_skip_retags_without_a_process(tmp_path: Path) -> None:
    raw = make_wheel(tmp_path / "raw", files={"m.py": b""})
    runner = FakeRunner()
    plan = plan_repair(
        raw,
        dest_dir=tmp_path / "o",
        plat="manylinux_2_28_x86_64",
        policy="skip",
        tools=RepairTools(python=PY, env=BASE_ENV, patchelf_dir=PATCHELF),
    )
    out = run_repair(plan, runner=runner)
    assert runner.calls == []
    assert out.name == "ext_ok-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(out) as zf:
        assert (
            "Tag: cp311-cp311-manylinux_2_28_x86_64"
            in zf.read("ext_ok-0.1.0.dist-info/WHEEL").decode()
        )


# What `auditwheel show --json` printed for ext_ok built on Debian bookworm (trimmed):
# stderr log lines arrive merged with the indented JSON.
SHOW_OUTPUT = """INFO:auditwheel.wheel_abi:setting libc to glibc
{
    "version": 1,
    "wheel": "ext_ok-0.1.0-cp311-cp311-linux_x86_64.whl",
    "pure": false,
    "overall_tag": "linux_x86_64",
    "sym_tag": "manylinux_2_34_x86_64",
    "pyfpe": false,
    "ucs2": false,
    "unsupported_isa": false,
    "versioned_symbols": {
        "libc.so.6": ["GLIBC_2.14", "GLIBC_2.2.5", "GLIBC_2.32"]
    },
    "external_libs": {"libc10.so": null, "libtorch_cpu.so": null},
    "policy_upgrades": {
        "manylinux_2_34_x86_64": {"libs_to_eliminate": ["libc10.so", "libtorch_cpu.so"]},
        "manylinux_2_28_x86_64": {"libs_to_eliminate": ["libc10.so", "libtorch_cpu.so"]}
    }
}
"""
WHEEL = Path("/w/ext_ok-0.1.0-cp311-cp311-linux_x86_64.whl")


def test_best_platform_tag_weaker_than_promised() -> None:
    runner = FakeRunner().on(*AUDITWHEEL, "show", output=SHOW_OUTPUT)
    report = best_platform_tag(
        WHEEL,
        ctx=RunContext(processes=runner, env=BASE_ENV),
        promised="manylinux_2_28_x86_64",
        python=PY,
    )
    assert [(c.argv, c.env) for c in runner.calls] == [
        ((*AUDITWHEEL, "show", "--json", str(WHEEL)), BASE_ENV)
    ]
    assert report.best == "manylinux_2_34_x86_64"
    assert report.weaker
    assert report.weaker_than("manylinux_2_28_x86_64")
    assert report.tag_to_use == "manylinux_2_34_x86_64"
    assert "at best manylinux_2_34_x86_64 on this host, weaker than the promised" in report.message
    assert "--backend docker" in report.message


def test_best_platform_tag_meets_promise() -> None:
    runner = FakeRunner().on(*AUDITWHEEL, "show", output=SHOW_OUTPUT)
    report = best_platform_tag(
        WHEEL, ctx=RunContext(processes=runner), promised="manylinux_2_35_x86_64", python=PY
    )
    assert report == PlatformTagReport(
        best="manylinux_2_34_x86_64",
        promised="manylinux_2_35_x86_64",
        weaker=False,
        message=(
            f"{WHEEL.name} can be tagged manylinux_2_35_x86_64 as promised "
            "(best here: manylinux_2_34_x86_64)."
        ),
    )
    assert report.tag_to_use == "manylinux_2_35_x86_64"


def test_best_platform_tag_isa_forces_linux() -> None:
    output = SHOW_OUTPUT.replace('"unsupported_isa": false', '"unsupported_isa": true')
    runner = FakeRunner().on(*AUDITWHEEL, "show", output=output)
    assert (
        best_platform_tag(WHEEL, ctx=RunContext(processes=runner), python=PY).best == "linux_x86_64"
    )


@pytest.mark.parametrize(
    ("output", "match"),
    [
        ('{"version": 1, "wheel": "x.whl", "error": "Invalid binary wheel"}', "Invalid binary"),
        ("usage: auditwheel [-h] ...\nauditwheel: error: unrecognized arguments: --json", "≥ 6.8"),
    ],
)
def test_best_platform_tag_errors(output: str, match: str) -> None:
    runner = FakeRunner().on(*AUDITWHEEL, "show", returncode=1, output=output)
    with pytest.raises(ToolchainError, match=match):
        best_platform_tag(WHEEL, ctx=RunContext(processes=runner), python=PY)
