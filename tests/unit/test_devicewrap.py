"""The nvcc wrapper's pure parts: arch flags found and replaced, dependency files, its log."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Literal

import pytest
from fixtures.factories import make_job, make_toolchain

from buildtools.toolchain.archopts import (
    cuda_arch_flags,
    enforce_arch_flags,
    rocm_arch_flags,
    strip_arch_flags,
)
from buildtools.toolchain.devicewrap import DOWNSTREAM_VAR, WrapConfig, parse_depfile, unit_key
from buildtools.toolchain.envs import Toolchain
from buildtools.wheelbuild.deviceunits import container_wrap_env, read_wrap_log, rewrap, wrap_env
from buildtools.wheelbuild.environment import job_environment
from buildtools.wheelbuild.options import BuildOptions


def test_cuda_arch_flags_are_torchs_own_form() -> None:
    assert cuda_arch_flags("8.0;9.0a;12.0+PTX") == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90a,code=sm_90a",
        "-gencode=arch=compute_120,code=sm_120",
        "-gencode=arch=compute_120,code=compute_120",
    ]
    assert rocm_arch_flags("gfx90a;gfx942") == ["--offload-arch=gfx90a", "--offload-arch=gfx942"]
    with pytest.raises(ValueError, match="not a CUDA arch"):
        cuda_arch_flags("sm_90")


@pytest.mark.parametrize(
    ("words", "removed"),
    [
        (
            ["-gencode", "arch=compute_75,code=sm_75", "-O3"],
            ["-gencode arch=compute_75,code=sm_75"],
        ),
        (
            ["-gencode=arch=compute_90,code=[sm_90,compute_90]"],
            ["-gencode=arch=compute_90,code=[sm_90,compute_90]"],
        ),
        (
            ["--generate-code=arch=compute_80,code=sm_80"],
            ["--generate-code=arch=compute_80,code=sm_80"],
        ),
        (["-arch=sm_90", "-code", "sm_90"], ["-arch=sm_90", "-code sm_90"]),
        (["-arch", "native"], ["-arch native"]),
        (["-archsm_80"], ["-archsm_80"]),
        (["--gpu-architecture=compute_89"], ["--gpu-architecture=compute_89"]),
    ],
)
def test_every_spelling_of_an_nvcc_arch_option_is_found(
    words: list[str], removed: list[str]
) -> None:
    kept, gone = strip_arch_flags(words)
    assert gone == removed
    assert not any("arch" in w or w.startswith("sm_") for w in kept)


def test_flags_that_only_look_like_arch_options_stay() -> None:
    words = ["-DARCH=1", "-Xcompiler", "-march=native", "--use_fast_math", "-o", "x.o"]
    assert strip_arch_flags(words) == (words, [])


def test_enforce_replaces_arguments_and_nvccs_environment_flags() -> None:
    flags = cuda_arch_flags("9.0")
    args, env, replaced = enforce_arch_flags(
        ["-c", "k.cu", "-gencode", "arch=compute_80,code=sm_80"],
        {"NVCC_APPEND_FLAGS": "--threads 2 -arch=sm_75"},
        flags,
    )
    assert args == ["-c", "k.cu", *flags]
    assert env["NVCC_APPEND_FLAGS"] == "--threads 2"
    assert replaced == ["-gencode arch=compute_80,code=sm_80", "NVCC_APPEND_FLAGS: -arch=sm_75"]


def test_a_project_flag_the_cells_list_holds_too_is_not_called_replaced() -> None:
    flags = cuda_arch_flags("9.0")
    own = [
        "-c",
        "k.cu",
        "-gencode",
        "arch=compute_90,code=sm_90",
        "-gencode=arch=compute_80,code=sm_80",
    ]
    _, _, replaced = enforce_arch_flags(own, {}, flags)
    assert replaced == ["-gencode=arch=compute_80,code=sm_80"]


def test_enforce_adds_the_cells_archs_to_a_device_compile_that_named_none() -> None:
    flags = cuda_arch_flags("9.0")
    args, _, replaced = enforce_arch_flags(["-c", "k.cu", "-o", "k.o"], {}, flags)
    assert args[-1] == flags[0]
    assert replaced == []
    # a call that compiles no device code and names no arch is left alone
    assert enforce_arch_flags(["--version"], {}, flags) == (["--version"], {}, [])


def test_enforce_for_hipcc() -> None:
    args, _, replaced = enforce_arch_flags(
        ["-c", "k.hip", "--offload-arch=gfx906", "--offload-arch", "gfx908"],
        {},
        rocm_arch_flags("gfx942"),
        kind="hipcc",
    )
    assert args == ["-c", "k.hip", "--offload-arch=gfx942"]
    assert replaced == ["--offload-arch=gfx906", "--offload-arch gfx908"]


def test_a_dependency_file_in_make_syntax() -> None:
    text = "build/x.o: /p/x.cu /sp/torch/a.h \\\n /sp/with\\ space.h /usr/include/b.h\n"
    assert parse_depfile(text) == [
        "/p/x.cu",
        "/sp/torch/a.h",
        "/sp/with space.h",
        "/usr/include/b.h",
    ]


def test_the_wrappers_log_read_back(tmp_path: Path) -> None:
    log = tmp_path / "devicewrap.jsonl"
    lines = [
        {"job": "j2", "unit": "@PROJ@/a.cu", "reuse": "reused", "source_job": "j1", "seconds": 0.1},
        {"job": "j2", "unit": "@PROJ@/b.cu", "reuse": "python-dependent", "seconds": 40.0},
        {"job": "j2", "unit": "@PROJ@/c.cu", "reuse": "stored", "seconds": 90.0,
         "replaced": ["-gencode arch=compute_75,code=sm_75"]},
        {"job": "j2", "replaced": ["-arch=sm_80"]},  # a device link: no unit
    ]  # fmt: skip
    log.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n[1]\n")
    summary = read_wrap_log(log)
    assert summary is not None
    assert summary.units == {"reused": 1, "python-dependent": 1, "stored": 1}
    assert summary.sources == {"j1": 1}
    assert summary.replaced == ("-arch=sm_80", "-gencode arch=compute_75,code=sm_75")
    assert summary.slowest[0] == ("@PROJ@/c.cu", 90.0)
    assert "reused from j1 (1)" in summary.describe()
    assert read_wrap_log(tmp_path / "missing.jsonl") is None


def test_a_backend_launcher_goes_behind_the_wrapper() -> None:
    outer = {"PYTORCH_NVCC": "py -I devicewrap.py cfg", DOWNSTREAM_VAR: "/cuda/bin/nvcc"}
    inner = {"PYTORCH_NVCC": "py -I launcher.py nvcc sccache", "X": "1"}
    out = rewrap(inner, outer)
    assert out["PYTORCH_NVCC"] == outer["PYTORCH_NVCC"]
    assert out[DOWNSTREAM_VAR] == inner["PYTORCH_NVCC"]
    assert rewrap(inner, {"PYTORCH_NVCC": "x"}) == inner  # no wrapper: nothing changes


def _wrapped(
    tmp_path: Path,
    *,
    arch_flags: Literal["keep", "enforce"] = "keep",
    env: dict[str, str] | None = None,
) -> tuple[dict[str, str], WrapConfig | None, Toolchain]:
    """wrap_env of a cu130 job in its real build environment; (env, the config it wrote, the
    toolchain)."""
    job = make_job(accelerator="cu130", python="3.12", arch_list="8.0;9.0+PTX")
    assert job.toolkit is not None
    job = replace(job, toolkit=replace(job.toolkit, arch_flags=arch_flags))
    toolchain = make_toolchain(tmp_path / "venv", cuda_home=tmp_path / "cuda")
    opts = BuildOptions(
        project_dir=tmp_path / "project", wheelhouse=tmp_path / "wh", cache_dir=tmp_path / "cache",
        env=env or {"PATH": "/usr/bin"},
    )  # fmt: skip
    build_env = job_environment(job, toolchain, opts)
    tree = tmp_path / "tree"
    out = wrap_env(job, toolchain, build_env, staging=tmp_path / "staging", opts=opts, tree=tree)
    written = tree / "devicewrap.json"
    config = WrapConfig.from_json(json.loads(written.read_text())) if written.exists() else None
    return out, config, toolchain


def test_a_cuda_job_compiles_through_the_wrapper(tmp_path: Path) -> None:
    out, config, toolchain = _wrapped(tmp_path)
    assert config is not None
    assert toolchain.cuda_home is not None
    assert out["PYTORCH_NVCC"].split()[1:3] == ["-I", str(Path(devicewrap_file()))]
    assert out[DOWNSTREAM_VAR] == str(toolchain.cuda_home / "bin" / "nvcc")
    assert config.arch_flags is None  # keep: the project's own flags stand
    assert config.store == str(tmp_path / "cache" / "units")
    # both paths are mapped out of the objects by the build, so both are placeholders
    assert config.site_packages == str(toolchain.site_packages.resolve())
    assert config.project == str((tmp_path / "project").resolve())


def test_enforce_puts_the_cells_flags_in_the_config(tmp_path: Path) -> None:
    _, config, _ = _wrapped(tmp_path, arch_flags="enforce")
    assert config is not None
    assert config.arch_flags == tuple(cuda_arch_flags("8.0;9.0+PTX"))


def test_no_reuse_and_no_enforce_leave_nvcc_alone(tmp_path: Path) -> None:
    out, config, _ = _wrapped(tmp_path, env={"PATH": "/usr/bin", "BUILDTOOLS_UNIT_REUSE": "0"})
    assert out == {}
    assert config is None


def test_a_path_the_build_cannot_map_is_no_placeholder(tmp_path: Path) -> None:
    # a project path with a space: the prefix map is left out (CFLAGS would split it), so the
    # objects keep the path and the keys must too
    spaced = tmp_path / "with space"
    spaced.mkdir()
    _, config, _ = _wrapped(spaced)
    assert config is not None
    assert config.project is None
    assert config.site_packages is None


def devicewrap_file() -> str:
    from buildtools.toolchain import devicewrap

    return str(Path(devicewrap.__file__).resolve())


def test_the_command_ninja_sees_is_the_same_from_one_build_to_the_next(tmp_path: Path) -> None:
    """ninja compiles a unit again when its command changes: the wrapper's config path must
    not follow the build's staging directory."""
    job = make_job(accelerator="cu130", python="3.12", arch_list="9.0")
    toolchain = make_toolchain(tmp_path / "venv", cuda_home=tmp_path / "cuda")
    opts = BuildOptions(
        project_dir=tmp_path / "p", wheelhouse=tmp_path / "w", cache_dir=tmp_path / "c", env={}
    )
    env = job_environment(job, toolchain, opts)
    first = wrap_env(job, toolchain, env, staging=tmp_path / "s1", opts=opts, tree=tmp_path / "t")
    again = wrap_env(job, toolchain, env, staging=tmp_path / "s2", opts=opts, tree=tmp_path / "t")
    assert first["PYTORCH_NVCC"] == again["PYTORCH_NVCC"]


@pytest.mark.parametrize(
    "flags",
    [["-lineinfo"], ["-G"], ["-Xcompiler=-g"], ["--compiler-options", "'-fPIC,-g'"],
     ["--ptxas-options=-lineinfo"], ["-Xptxas", "-g"]],
)  # fmt: skip
def test_a_unit_whose_objects_keep_real_paths_is_not_reusable(
    tmp_path: Path, flags: list[str]
) -> None:
    (tmp_path / "k.cu").write_text("__global__ void k() {}\n")
    config = WrapConfig(downstream=("nvcc",), store=str(tmp_path / "store"), job="j")
    base = ["-c", str(tmp_path / "k.cu"), "-o", "k.o", "-MD", "-MF", "k.o.d"]
    assert unit_key(base, {}, config, []) is not None
    assert unit_key([*base, *flags], {}, config, []) is None
    assert unit_key(base, {"NVCC_APPEND_FLAGS": " ".join(flags)}, config, []) is None


def test_a_path_reached_through_a_link_is_mapped_as_spelt_too(tmp_path: Path) -> None:
    from buildtools.wheelbuild.environment import reproducible_env

    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    site = tmp_path / "link" / "sp"
    (tmp_path / "real" / "sp").mkdir()
    flags = reproducible_env({}, project_dir=tmp_path / "link", site_packages=site, device=True)
    nvcc = flags["NVCC_APPEND_FLAGS"]
    for spelt in (site, site.resolve()):
        assert f"-ffile-prefix-map={spelt}=/site-packages" in nvcc
    for spelt in (tmp_path / "link", (tmp_path / "link").resolve()):
        assert f"-ffile-prefix-map={spelt}=." in nvcc


def test_arch_flags_enforce_is_part_of_the_jobs_fingerprint() -> None:
    from buildtools.wheelbuild.fingerprint import job_config

    job = make_job(accelerator="cu130", python="3.12", arch_list="9.0")
    assert job.toolkit is not None
    enforced = replace(job, toolkit=replace(job.toolkit, arch_flags="enforce"))
    assert job_config(job) != job_config(enforced)
    assert "arch_flags" not in job.toolkit.to_json()  # the default's plans stay as they were


def test_a_container_build_is_told_where_its_wrappers_log_and_store_are(tmp_path: Path) -> None:
    job = make_job(accelerator="cu130", python="3.12", arch_list="9.0")
    assert job.toolkit is not None
    opts = BuildOptions(
        project_dir=tmp_path / "p", wheelhouse=tmp_path / "w", cache_dir=tmp_path / "c", env={}
    )
    staging = tmp_path / "s"
    assert container_wrap_env(job, {}, staging=staging, opts=opts) == {
        "BUILDTOOLS_JOB_WRAP_LOG": str(staging / "devicewrap.jsonl"),  # the file the build reads
        "BUILDTOOLS_JOB_UNITS_DIR": str(tmp_path / "c" / "units"),
    }
    off = {"BUILDTOOLS_UNIT_REUSE": "0"}
    assert container_wrap_env(job, off, staging=staging, opts=opts) == {}
    enforced = replace(job, toolkit=replace(job.toolkit, arch_flags="enforce"))
    assert container_wrap_env(enforced, off, staging=staging, opts=opts) == {
        "BUILDTOOLS_JOB_WRAP_LOG": str(staging / "devicewrap.jsonl")
    }
    cpu = make_job(accelerator="cpu", python="3.12")
    assert container_wrap_env(cpu, {}, staging=staging, opts=opts) == {}
