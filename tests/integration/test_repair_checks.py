"""Real builds of the fixture extensions against torch 2.13.0 (CPU), real auditwheel, real checks.

The torch venv and the fixture wheels are cached under
${BUILDTOOLS_CACHE_DIR:-~/.cache/torch-buildtools} (see tests/fixtures/envs.py), so only
the first run pays for `pip install torch` and the compiles.
"""

from __future__ import annotations

import os
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest
from fixtures.envs import TorchEnv, build_env, cache_dir, grafted_wheel
from fixtures.factories import built_record, make_job

from buildtools.context import RunContext
from buildtools.errors import BuildFailedError
from buildtools.process import SubprocessRunner
from buildtools.wheel.checks import (
    Expectation,
    TorchTarget,
    check_wheel,
    has_errors,
    load_torch_target,
)
from buildtools.wheel.meta import platform_tag_satisfies, relabel_wheel
from buildtools.wheel.repair import (
    Grafting,
    best_platform_tag,
    derive_excludes,
    plan_repair,
    run_repair,
    scan_torch_libs,
)

TORCH = "2.13.0"
PROMISED = "manylinux_2_28_x86_64"  # what torch >= 2.7 promises
NEVER_BUNDLE = ("libcuda.so.1", "libnvidia-ml.so.1")
RUNNER = SubprocessRunner()

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="ELF wheels need Linux")


@pytest.fixture(scope="session")
def target(torch213: TorchEnv) -> TorchTarget:
    return load_torch_target(torch213.site_packages)


@pytest.fixture(scope="session")
def wheels(fixture_wheel: Callable[[str], Path]) -> dict[str, Path]:
    return {name: fixture_wheel(name) for name in ("ext_ok", "ext_undefined", "ext_cuda_gate")}


@pytest.fixture(scope="session")
def best_tag(wheels: dict[str, Path], integration_log: IO[str]) -> str:
    return best_platform_tag(
        wheels["ext_ok"],
        ctx=RunContext.of(processes=RUNNER, log=integration_log),
        promised=PROMISED,
    ).best


def _import(torch213: TorchEnv, wheel: Path, module: str, tmp: Path) -> tuple[bool, str]:
    """Import `module` from the unpacked `wheel` in the torch env, in a child process."""
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp)
    run_env = build_env(torch213)
    run_env["PYTHONPATH"] = str(tmp)
    code = f"import torch, {module}; print('imported', {module}.__name__)"
    result = RUNNER.run([str(torch213.python), "-c", code], env=run_env, capture=True)
    return result.ok, result.output


def test_target_is_read_without_importing_torch(target: TorchTarget, torch213: TorchEnv) -> None:
    assert target.version == f"{TORCH}+cpu"
    assert target.cuda is None and target.hip is None
    assert target.cxx11_abi is True
    assert target.site_packages == torch213.site_packages.resolve()


def test_best_platform_tag_on_this_host(wheels: dict[str, Path]) -> None:
    report = best_platform_tag(
        wheels["ext_ok"], ctx=RunContext.of(processes=RUNNER), promised=PROMISED
    )
    assert report.best.startswith("manylinux_")
    assert report.weaker is (not platform_tag_satisfies(report.best, PROMISED))
    if os.confstr("CS_GNU_LIBC_VERSION") == "glibc 2.36":  # Debian bookworm
        assert report.best == "manylinux_2_34_x86_64"
        assert report.weaker
        assert "weaker than the promised manylinux_2_28_x86_64" in report.message


def test_selective_repair(
    torch213: TorchEnv,
    target: TorchTarget,
    wheels: dict[str, Path],
    best_tag: str,
    tmp_path: Path,
    integration_log: IO[str],
) -> None:
    raw = wheels["ext_ok"]
    excludes = derive_excludes(torch213.site_packages, NEVER_BUNDLE)
    assert {"libc10.so", "libtorch.so", "libtorch_cpu.so", "libtorch_python.so"} <= set(excludes)
    assert {"libcuda.so.1", "libgomp.so.1"} <= set(excludes)
    lib_dirs = scan_torch_libs(torch213.site_packages).library_dirs
    plan = plan_repair(
        raw,
        dest_dir=tmp_path / "repaired",
        plat=best_tag,
        grafting=Grafting(excludes=excludes, library_dirs=lib_dirs),
    )
    expected_argv = [sys.executable, "-m", "auditwheel", "repair", "--plat", best_tag]
    expected_argv += ["-w", str(tmp_path / "repaired")]
    for pattern in excludes:
        expected_argv += ["--exclude", pattern]
    expected_argv.append(str(raw))
    assert plan.argv == tuple(expected_argv)

    repaired = run_repair(plan, runner=RUNNER, log=integration_log)
    assert repaired.name == f"ext_ok-0.1.0-cp311-cp311-{best_tag}.whl"
    assert repaired.stat().st_size <= 1.01 * raw.stat().st_size
    with zipfile.ZipFile(repaired) as zf:
        names = zf.namelist()
    assert not [n for n in names if ".libs/" in n], names

    final = relabel_wheel(
        repaired,
        out_dir=tmp_path / "final",
        local_version="pt213cpu",
        requires_dist_torch="torch==2.13.*",
        build_record=built_record(make_job(python="3.11"), torch=target.version),
    )
    findings = check_wheel(
        final,
        targets=[target],
        expect=Expectation(
            accelerator="cpu",
            platform_tag=PROMISED,
            weaker_platform_tag="warning",  # this host cannot reach manylinux_2_28
            local_version="pt213cpu",
            requires_dist_torch="torch==2.13.*",
        ),
    )
    assert not has_errors(findings), findings
    assert {f.code for f in findings} <= {"platform-tag"}

    ok, output = _import(torch213, final, "ext_ok", tmp_path / "unpacked")
    assert ok, output


def test_grafted_wheel_is_flagged(
    torch213: TorchEnv,
    target: TorchTarget,
    wheels: dict[str, Path],
    best_tag: str,
    integration_log: IO[str],
) -> None:
    grafted = grafted_wheel(wheels["ext_ok"], torch213, RUNNER, plat=best_tag, log=integration_log)
    assert grafted.stat().st_size > 10 * wheels["ext_ok"].stat().st_size
    findings = check_wheel(grafted, targets=[target], expect=Expectation(build_record=False))
    bundled = {
        f.details[0].removeprefix("library: ") for f in findings if f.code == "bundled-torch-lib"
    }
    assert {"libc10.so", "libtorch.so", "libtorch_cpu.so"} <= bundled
    assert all(f.severity.value == "error" for f in findings if f.code == "bundled-torch-lib")
    c10 = next(f for f in findings if f.details[:1] == ("library: libc10.so",))
    assert c10.path is not None and c10.path.startswith("ext_ok.libs/libc10-")
    assert "a second libtorch in one process aborts at import" in c10.message


def test_undefined_symbol_fixture(
    torch213: TorchEnv, target: TorchTarget, wheels: dict[str, Path], tmp_path: Path
) -> None:
    findings = check_wheel(
        wheels["ext_undefined"], targets=[target], expect=Expectation(build_record=False)
    )
    undefined = [f for f in findings if f.code == "undefined-symbol"]
    assert len(undefined) == 1
    assert "needs c10::definitely_not_in_torch(int), which torch 2.13.0+cpu does not export" in (
        undefined[0].message
    )
    assert undefined[0].details[0] == "mangled: _ZN3c1023definitely_not_in_torchEi"
    # and the static verdict is the real one: the import fails with that symbol
    ok, output = _import(torch213, wheels["ext_undefined"], "ext_undefined", tmp_path / "unpacked")
    assert not ok
    assert "undefined symbol: _ZN3c1023definitely_not_in_torchEi" in output


def test_cuda_gate_built_on_a_cpu_node_has_no_device_code(
    target: TorchTarget, wheels: dict[str, Path]
) -> None:
    findings = check_wheel(
        wheels["ext_cuda_gate"],
        targets=[target],
        expect=Expectation(accelerator="cu130", arch_list="8.0;9.0;12.0+PTX", build_record=False),
    )
    device = [f for f in findings if f.code == "no-device-code"]
    assert len(device) == 1 and device[0].severity.value == "error"
    assert "contains CUDA device code: it was built CPU-only" in device[0].message


def test_skip_policy_only_retags_and_checks_tell(
    target: TorchTarget, wheels: dict[str, Path], best_tag: str, tmp_path: Path
) -> None:
    plan = plan_repair(wheels["ext_ok"], dest_dir=tmp_path, plat=PROMISED, policy="skip")
    retagged = run_repair(plan, runner=RUNNER)
    assert retagged.name == f"ext_ok-0.1.0-cp311-cp311-{PROMISED}.whl"
    findings = check_wheel(retagged, targets=[target], expect=Expectation(build_record=False))
    lies = [f for f in findings if f.code == "platform-tag"]
    if best_tag != PROMISED and not platform_tag_satisfies(best_tag, PROMISED):
        # built on a newer glibc: the retagged wheel claims more than its symbols allow
        assert lies and f"newer than {PROMISED} allows" in lies[0].message
    else:
        assert not lies


def test_broken_fixture_fails_to_build(fixture_wheel: Callable[[str], Path]) -> None:
    with pytest.raises(BuildFailedError) as err:
        fixture_wheel("ext_broken")
    assert "building fixture ext_broken failed" in str(err.value)
    assert "does not compile, on purpose" in str(err.value)


# --- a real CUDA wheel built elsewhere (optional) ------------------------------------------

ARTIFACTS = Path(os.environ.get("BUILDTOOLS_ARTIFACTS", "/tmp/artifacts"))


def _cu130_site() -> Path | None:
    """A torch 2.11.0+cu130 site-packages: $BUILDTOOLS_CU130_SITE_PACKAGES, else a cached toolchain."""
    given = os.environ.get("BUILDTOOLS_CU130_SITE_PACKAGES")
    if given:
        return Path(given)
    found = sorted(cache_dir().glob("toolchains/*torch2.11.0-cu130*/lib/python3.*/site-packages"))
    return found[0] if found else None


def _cuda_wheels() -> list[Path]:
    return sorted(ARTIFACTS.glob("*.whl")) if ARTIFACTS.is_dir() else []


@pytest.mark.skipif(not _cuda_wheels(), reason=f"no CUDA wheel in {ARTIFACTS}")
@pytest.mark.skipif(_cu130_site() is None, reason="no torch 2.11.0+cu130 installation found")
def test_real_cu130_wheel(tmp_path: Path, integration_log: IO[str]) -> None:
    site = _cu130_site()
    assert site is not None
    target = load_torch_target(site)
    assert target.cuda == "13.0"
    raw = next(w for w in _cuda_wheels() if "cp31" in w.name)
    excludes = derive_excludes(site, NEVER_BUNDLE)
    assert {"libcudart.so.13", "libc10_cuda.so", "libtorch_cuda.so", "libcublas.so.13"} <= set(
        excludes
    )
    tag = best_platform_tag(
        raw, ctx=RunContext.of(processes=RUNNER, log=integration_log), promised=PROMISED
    )
    plan = plan_repair(
        raw,
        dest_dir=tmp_path / "repaired",
        plat=tag.best,
        grafting=Grafting(excludes=excludes, library_dirs=scan_torch_libs(site).library_dirs),
    )
    repaired = run_repair(plan, runner=RUNNER, log=integration_log)
    assert repaired.stat().st_size <= 1.01 * raw.stat().st_size
    findings = check_wheel(
        repaired,
        targets=[target],
        expect=Expectation(accelerator="cu130", arch_list="8.0;9.0", build_record=False),
    )
    assert not has_errors(findings), findings
    # the same binary promised for a CPU cell is caught
    cpu = check_wheel(repaired, targets=[target], expect=Expectation(build_record=False))
    assert "cpu-links-cuda" in {f.code for f in cpu}
