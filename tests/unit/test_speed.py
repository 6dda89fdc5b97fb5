"""The scheduler's split of the machine, the ccache wiring at the executor boundary, the ETA,
and uv's translation of pip's configuration. No process is started."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest
from fixtures.factories import make_job, make_toolchain
from fixtures.fakes import FakeRunner
from hypothesis import given
from hypothesis import strategies as st

from buildtools.backends.base import nvcc_flags_env, nvcc_seed_env
from buildtools.backends.local import LocalBackend
from buildtools.context import RunContext
from buildtools.model import BuildJob, Toolkit
from buildtools.toolchain.ccachekeys import nvcc_flags_namespace
from buildtools.toolchain.envs import Toolchain
from buildtools.toolchain.installer import select_installer, uv_install_argv, uv_options
from buildtools.wheelbuild.compilercache import (
    CompilerCache,
    bypassing_compilers,
    cache_holds_entries,
    compiler_cache_env,
    job_tool,
    make_masquerade,
    parse_sccache_stats,
    sccache_server,
)
from buildtools.wheelbuild.environment import job_environment
from buildtools.wheelbuild.options import BuildOptions
from buildtools.wheelbuild.progress import Progress, estimate_remaining, format_seconds
from buildtools.wheelbuild.scheduler import (
    HostResources,
    device_sources,
    device_targets,
    nvcc_threads,
    plan_slots,
)


def jobs(n: int, accelerator: str = "cpu") -> list[BuildJob]:
    return [make_job(accelerator=accelerator, id=f"j{i}") for i in range(n)]


# ------------------------------------------------------------------------------ scheduler


@pytest.mark.parametrize("cores", [1, 2, 3, 8, 16, 64])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 40])
@pytest.mark.parametrize("memory", [1.0, 6.0, 24.0, 512.0])
@pytest.mark.parametrize("max_jobs", [None, 1, 4, 100])
def test_never_oversubscribed(cores: int, n: int, memory: float, max_jobs: int | None) -> None:
    slots = plan_slots(jobs(n), HostResources(cores=cores, memory_gb=memory), max_jobs=max_jobs)
    assert slots.concurrent * slots.max_jobs <= max(1, min(cores, int(memory // 2)))
    assert slots.concurrent <= n
    assert slots.concurrent >= 1 and slots.max_jobs >= 1
    assert slots.workers <= n and slots.workers >= slots.concurrent


def test_one_job_gets_every_core() -> None:
    slots = plan_slots(jobs(1), HostResources(cores=16, memory_gb=64))
    assert (slots.concurrent, slots.max_jobs, slots.workers) == (1, 16, 1)


def test_many_jobs_split_the_cores() -> None:
    slots = plan_slots(jobs(40), HostResources(cores=2, memory_gb=24))
    assert (slots.concurrent, slots.max_jobs) == (2, 1)
    assert slots.workers == 3  # one more: an environment is created while two compile
    assert "2 job(s) at once × MAX_JOBS=1 ≤ budget 2" in slots.reason


def test_memory_caps_the_budget_and_cuda_compiles_cost_more() -> None:
    host = HostResources(cores=32, memory_gb=16)
    assert plan_slots(jobs(40), host).budget == 8  # 2 GB per c++ process
    assert plan_slots(jobs(40, "cu130"), host).budget == 4  # 4 GB per nvcc


def test_a_cluster_adds_its_slots_to_this_machines_cores() -> None:
    # a 2-CPU client beside a 1-core cluster (2 slots): its cores keep compiling what the
    # cluster refuses, so the build is never slower than without the cluster
    slots = plan_slots(jobs(1, "cu130"), HostResources(cores=2, memory_gb=24, remote_slots=2))
    assert (slots.budget, slots.max_jobs) == (4, 4)
    assert "2 here" in slots.reason and "2 on the cluster (its 2 slot(s)" in slots.reason
    slots = plan_slots(jobs(1, "cu130"), HostResources(cores=16, memory_gb=128, remote_slots=4))
    assert slots.budget == 20


def test_a_small_runners_memory_caps_its_own_compiles_before_the_clusters_units() -> None:
    # a 4-core, 16 GB runner beside a 32-core cluster: a unit the cluster compiles holds only
    # its preprocessing here (1.5 GB for a .cu: cudafe++), so the cluster gets 10 at once,
    # not the 4 that 4 GB local nvcc processes would allow
    runner = HostResources(cores=4, memory_gb=16, remote_slots=64)
    assert plan_slots(jobs(1, "cu130"), runner).budget == 10
    assert plan_slots(jobs(1, "cu130"), HostResources(cores=4, memory_gb=16)).budget == 4
    assert plan_slots(jobs(1), runner).budget == 32  # CPU units: 0.5 GB each here


@given(
    cores=st.integers(1, 64),
    memory=st.floats(0.5, 512),
    remote=st.integers(0, 256),
    kind=st.sampled_from(["cpu", "cu130"]),
)
def test_a_budget_with_a_cluster_fits_the_memory(
    cores: int, memory: float, remote: int, kind: str
) -> None:
    host = HostResources(cores=cores, memory_gb=memory, remote_slots=remote)
    slots = plan_slots(jobs(1, kind), host)
    local_gb, remote_gb = (4.0, 1.5) if kind == "cu130" else (2.0, 0.5)
    here = slots.budget - min(remote, int(memory // remote_gb))
    assert slots.budget == 1 or here * local_gb + (slots.budget - here) * remote_gb <= memory
    assert slots.budget <= max(1, cores + remote)
    without = plan_slots(jobs(1, kind), HostResources(cores=cores, memory_gb=memory))
    assert slots.budget >= without.budget  # a cluster never shrinks the budget


def test_max_jobs_and_concurrency_requests() -> None:
    host = HostResources(cores=16, memory_gb=128)
    slots = plan_slots(jobs(10), host, max_jobs=4)
    assert (slots.concurrent, slots.max_jobs) == (4, 4)
    slots = plan_slots(jobs(10), host, concurrent=2)
    assert (slots.concurrent, slots.max_jobs) == (2, 8)
    slots = plan_slots(jobs(10), host, max_jobs=64)  # never above the machine
    assert (slots.concurrent, slots.max_jobs) == (1, 16)


# ------------------------------------------------------------------ ccache at the boundary


def build_env_of(
    tmp_path: Path, the_job: BuildJob, tc: Toolchain, cache: CompilerCache | None
) -> dict[str, str]:
    """The environment LocalBackend hands to the runner for `python -m build`."""
    opts = BuildOptions(
        project_dir=tmp_path / "src",
        wheelhouse=tmp_path / "wh",
        cache_dir=tmp_path / "cache",
        env={"PATH": "/usr/bin", "HOME": "/root", "MAX_JOBS": "9"},
        max_jobs=1,
    )
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    (out / "x-1-py3-none-any.whl").write_bytes(b"")
    runner = FakeRunner()
    LocalBackend().build_raw(
        the_job,
        tc,
        project_dir=opts.project_dir,
        out_dir=out,
        build_dir=tmp_path / "tree",
        ctx=RunContext(
            processes=runner,
            env=job_environment(the_job, tc, opts, compiler_cache=cache),
            log=io.StringIO(),
        ),
    )
    (call,) = runner.calls
    assert call.argv[1:4] == ("-m", "build", "--wheel")
    return call.env or {}


def test_ccache_env_of_a_cpu_build(tmp_path: Path) -> None:
    cache = CompilerCache(tool="ccache", program=Path("/usr/bin/ccache"), root=tmp_path / "ccache")
    the_job = make_job()
    env = build_env_of(tmp_path, the_job, make_toolchain(tmp_path / "venv"), cache)
    assert env["CCACHE_DIR"] == str(tmp_path / "ccache" / the_job.id)
    assert env["CCACHE_BASEDIR"] == str(tmp_path / "src")
    assert env["CCACHE_NOHASHDIR"] == "1"
    assert env["TORCH_NO_COMPILER_WRAPPER"] == "1"  # one mechanism for every torch version
    assert env["PATH"] == os.pathsep.join(
        [str(tmp_path / "ccache" / "bin"), str(tmp_path / "venv" / "bin"), "/usr/bin"]
    )
    assert "PYTORCH_NVCC" not in env and "CCACHE_DISABLE" not in env
    assert env["MAX_JOBS"] == "1"  # the scheduler's share wins over the host's MAX_JOBS=9


def test_ccache_env_of_a_cuda_build_wraps_nvcc(tmp_path: Path) -> None:
    cache = CompilerCache(tool="ccache", program=Path("/usr/bin/ccache"), root=tmp_path / "ccache")
    cuda = tmp_path / "cu13"
    env = build_env_of(
        tmp_path,
        make_job(accelerator="cu130"),
        make_toolchain(tmp_path / "venv", cuda_home=cuda),
        cache,
    )
    # nvcc's units in ccache's depend mode (no second preprocessing on a miss)
    assert env["PYTORCH_NVCC"] == f"env CCACHE_DEPEND=1 /usr/bin/ccache {cuda / 'bin' / 'nvcc'}"
    assert "CCACHE_DEPEND" not in env  # C++ units: -MMD leaves system headers out
    assert env["PATH"].split(os.pathsep)[:3] == [
        str(tmp_path / "ccache" / "bin"),
        str(cuda / "bin"),
        str(tmp_path / "venv" / "bin"),
    ]


def test_no_ccache_means_no_cache_at_all(tmp_path: Path) -> None:
    env = build_env_of(
        tmp_path,
        make_job(accelerator="cu130"),
        make_toolchain(tmp_path / "venv", cuda_home=tmp_path / "cu13"),
        None,
    )
    assert env["TORCH_NO_COMPILER_WRAPPER"] == "1"  # torch >= 2.13 would wrap by itself
    assert env["CCACHE_DISABLE"] == "1"  # a ccache masquerading on the host's PATH too
    assert not any(k in env for k in ("CCACHE_DIR", "PYTORCH_NVCC"))


def test_masquerade_links_and_per_job_dirs(tmp_path: Path) -> None:
    from buildtools.toolchain.ccachekeys import masquerade_names

    cache = CompilerCache(tool="ccache", program=Path("/usr/bin/ccache"), root=tmp_path)
    directory = make_masquerade(cache)
    make_masquerade(cache)  # idempotent
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        ["cc", "c++", "gcc", "g++", "clang", "clang++"]
    )
    assert all(p.readlink() == Path("/usr/bin/ccache") for p in directory.iterdir())
    assert cache.dir_for(make_job()) != cache.dir_for(make_job(accelerator="cu130"))
    make_masquerade(cache, masquerade_names({"CXX": "g++-12", "CC": "gcc"}))  # each once
    assert (directory / "g++-12").readlink() == Path("/usr/bin/ccache")
    assert len(list(directory.iterdir())) == 7


def test_the_compiler_names_cc_and_cxx_give_get_links_of_their_own() -> None:
    from buildtools.toolchain.ccachekeys import COMPILER_NAMES, env_compiler_names, masquerade_names

    assert env_compiler_names({}) == ()
    assert masquerade_names({}) == COMPILER_NAMES
    env = {"CC": "gcc-12", "CXX": "g++-12 -std=c++17"}
    assert env_compiler_names(env) == ("g++-12", "gcc-12")
    assert env_compiler_names({"CXX": "x86_64-linux-gnu-g++-13"}) == ("x86_64-linux-gnu-g++-13",)
    assert env_compiler_names({"CXX": "clang++-17", "CC": "clang-17"}) == ("clang++-17", "clang-17")
    # not a compiler's name: a path (bypassing_compilers says so), another launcher, a bad quote
    for value in ("/opt/gcc/bin/g++", "ccache g++", "sccache", "'g++", "g++; rm -rf /", "../g++"):
        assert env_compiler_names({"CXX": value}) == (), value


# ---------------------------------------------------------------------------- nvcc threads

SIX_ARCHS = "7.5;8.0;8.6;9.0;10.0;12.0+PTX"


def cuda_job(arch_list: str = SIX_ARCHS, version: str = "13.0", **kw: Any) -> BuildJob:
    return make_job(
        accelerator="cu130",
        toolkit=Toolkit(kind="cuda", version=version, arch_list=arch_list),
        **kw,
    )


def test_device_targets_count_archs_and_ptx() -> None:
    assert device_targets(SIX_ARCHS) == 7
    assert device_targets("8.0 9.0") == 2 and device_targets("9.0+PTX") == 2
    assert device_sources([Path("a.cu"), Path("b.cpp"), Path("c.cuh"), Path("d/e.cu")]) == 2


@pytest.mark.parametrize(
    ("cores", "cu_files", "arch_list", "expected"),
    [
        (2, 1, SIX_ARCHS, 2),  # the example on this machine: both cores on the one .cu
        (16, 1, SIX_ARCHS, 7),  # never more threads than targets
        (16, 3, SIX_ARCHS, 5),  # 3 nvcc at once x 5 threads <= 16
        (2, 10, SIX_ARCHS, 1),  # ninja already fills the share with .cu files
        (8, 1, "9.0", 1),  # one target: nothing to run in parallel
        (1, 1, SIX_ARCHS, 1),
    ],
)
def test_nvcc_threads_fill_the_jobs_share_and_no_more(
    cores: int, cu_files: int, arch_list: str, expected: int
) -> None:
    the_job = cuda_job(arch_list)
    slots = plan_slots([the_job], HostResources(cores=cores, memory_gb=256))
    threads = nvcc_threads(the_job, slots, device_sources=cu_files)
    assert threads == expected
    assert min(slots.max_jobs, cu_files) * threads <= max(slots.max_jobs, 1) or threads == 1


def test_nvcc_threads_share_the_machine_between_concurrent_jobs() -> None:
    many = [cuda_job(id=f"j{i}") for i in range(4)]
    slots = plan_slots(many, HostResources(cores=8, memory_gb=256))
    assert slots.concurrent == 4 and slots.max_jobs == 2
    assert nvcc_threads(many[0], slots, device_sources=1) == 2  # 4 jobs x 2 threads = 8 cores


def test_nvcc_threads_fit_in_memory() -> None:
    the_job = cuda_job()
    slots = plan_slots([the_job], HostResources(cores=16, memory_gb=6.5))
    assert slots.max_jobs == 1  # 6.5 GB / 4 GB per nvcc
    assert nvcc_threads(the_job, slots, device_sources=1) == 1
    slots = plan_slots([the_job], HostResources(cores=4, memory_gb=9.0))
    assert nvcc_threads(the_job, slots, device_sources=1) == 2  # 2 by memory, room for both


def test_no_nvcc_threads_without_cuda_device_code_or_before_cuda_11_2() -> None:
    slots = plan_slots([make_job()], HostResources(cores=16, memory_gb=256))
    assert nvcc_threads(make_job(), slots, device_sources=1) == 1  # a CPU job
    assert nvcc_threads(cuda_job(), slots, device_sources=0) == 1  # no .cu file
    assert nvcc_threads(cuda_job(version="11.1"), slots, device_sources=1) == 1
    rocm = make_job(
        accelerator="rocm7.2",
        toolkit=Toolkit(kind="rocm", version="7.2", arch_list="gfx90a;gfx942"),
    )
    assert nvcc_threads(rocm, slots, device_sources=1) == 1


def test_nvcc_threads_reach_nvcc_through_its_append_variable() -> None:
    assert nvcc_flags_env(3, {}) == {"NVCC_APPEND_FLAGS": "--threads 3"}
    assert nvcc_flags_env(3, {"NVCC_APPEND_FLAGS": "-lineinfo"}) == {
        "NVCC_APPEND_FLAGS": "-lineinfo --threads 3"
    }
    assert nvcc_flags_env(3, {"NVCC_APPEND_FLAGS": "--threads 8"}) == {}  # the user's wins
    assert nvcc_flags_env(3, {"NVCC_APPEND_FLAGS": "-t 8"}) == {}
    assert nvcc_flags_env(1, {}) == {}


def test_a_cuda_jobs_build_environment_carries_its_threads(tmp_path: Path) -> None:
    from dataclasses import replace

    the_job = cuda_job()
    tc = make_toolchain(tmp_path / "venv", cuda_home=tmp_path / "cu13")
    opts = BuildOptions(
        project_dir=tmp_path / "src",
        wheelhouse=tmp_path / "wh",
        cache_dir=tmp_path / "cache",
        env={"PATH": "/usr/bin"},
        max_jobs=2,
        nvcc_threads=2,
    )
    env = job_environment(the_job, tc, opts)
    # nvcc's host compiler gets the path maps (reproducible wheels), then the threads
    assert env["NVCC_APPEND_FLAGS"].startswith("-Xcompiler -ffile-prefix-map=")
    assert env["NVCC_APPEND_FLAGS"].endswith(" --threads 2") and env["MAX_JOBS"] == "2"
    assert "NVCC_APPEND_FLAGS" not in job_environment(
        make_job(), make_toolchain(tmp_path / "venv"), opts
    )
    one = job_environment(the_job, tc, replace(opts, nvcc_threads=1))
    assert "--threads" not in one["NVCC_APPEND_FLAGS"]


def test_nvcc_threads_leave_the_fingerprint_alone() -> None:
    from buildtools.wheelbuild.fingerprint import build_vars, job_config

    # the threads live in the job's build environment and the build record, not in the
    # job or the host variables the fingerprint reads
    assert "nvcc_threads" not in job_config(cuda_job())
    assert build_vars({"PATH": "/usr/bin"}) == {}


# -------------------------------------------------------------------------------- progress


def test_eta_from_known_durations_and_the_run_so_far() -> None:
    assert estimate_remaining({"a": 100.0, "b": 100.0}, {"a": 40.0}, {}, concurrent=2) == 80.0
    assert estimate_remaining({"a": None}, {}, {}, concurrent=1) is None
    assert estimate_remaining({"a": None}, {}, {"z": 30.0}, concurrent=1) == 30.0
    assert estimate_remaining({"a": None}, {"a": 31.0}, {"z": 30.0}, concurrent=1) is None
    assert format_seconds(None) == "?" and format_seconds(200) == "3 min 20 s"


def test_plain_progress_lines_carry_the_eta() -> None:
    now = [0.0]
    out = io.StringIO()
    progress = Progress(
        ["a", "b", "c"],
        out=out,
        live=False,
        expected={"b": 60.0},
        concurrent=1,
        clock=lambda: now[0],
    )
    with progress:
        progress.stage("a", "build")
        now[0] = 30.0
        progress.finish("a", "built")
        progress.stage("b", "build")
        now[0] = 40.0
    text = out.getvalue()
    assert "a: built (1/3 done, ETA 1 min 30 s)" in text  # b: 60 s known, c: 30 s like a
    assert progress.eta() == pytest.approx(50.0 + 30.0)


# ------------------------------------------------------------------------------- installer


def test_uv_gets_pips_indexes_links_cert_and_timeout() -> None:
    config = (
        ":env:.cert='/etc/ssl/certs/ca.crt'\n"
        ":env:.default-timeout='180'\n"
        "global.extra-index-url='file:///opt/pypi/simple file:///opt/more/simple'\n"
        "global.find-links='/opt/wheels'\n"
        "global.index-url='https://mirror/simple'\n"
    )
    args, extra = uv_options(config, {"PIP_FIND_LINKS": "/override"})
    assert args == (
        "--index-strategy",
        "unsafe-best-match",
        "--index-url",
        "https://mirror/simple",
        "--extra-index-url",
        "file:///opt/pypi/simple",
        "--extra-index-url",
        "file:///opt/more/simple",
        "--find-links",
        "/override",
    )
    assert extra == (("SSL_CERT_FILE", "/etc/ssl/certs/ca.crt"), ("UV_HTTP_TIMEOUT", "180"))
    argv = uv_install_argv(
        Path("/bin/uv"), Path("/v/bin/python"), ["torch==2.13.0"], options=args, extra_index=None
    )
    assert argv[:7] == [
        "/bin/uv",
        "pip",
        "install",
        "--python",
        "/v/bin/python",
        "--link-mode",
        "hardlink",
    ]
    assert argv[-1] == "torch==2.13.0"


def test_pip_config_read_from_its_files_in_pips_order(tmp_path: Path) -> None:
    from buildtools.toolchain.installer import read_pip_config

    home = tmp_path / "home"
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text(
        "[global]\nfind-links = /user/wheels\nextra-index-url =\n  file:///a\n  file:///b\n"
    )
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / "pip.conf").write_text("[install]\nfind-links = /site/wheels\n")
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "pip.conf").write_text("[global]\nindex-url = https://mirror/simple\n")
    env = {"HOME": str(home)}
    text = read_pip_config(env, prefix=tmp_path / "venv", etc=tmp_path / "etc")
    args, _ = uv_options(text, {})
    assert args[2:] == (
        "--index-url",
        "https://mirror/simple",
        "--extra-index-url",
        "file:///a",
        "--extra-index-url",
        "file:///b",
        "--find-links",
        "/site/wheels",  # [install] of the site file wins over the user's [global]
    )
    assert read_pip_config({**env, "PIP_CONFIG_FILE": os.devnull}, prefix=tmp_path) == ""


def test_installer_choice(tmp_path: Path) -> None:
    uv = tmp_path / "uv"
    uv.write_text("#!/bin/sh\n")
    uv.chmod(0o755)
    assert select_installer({"PATH": str(tmp_path)}).name == "uv"
    assert select_installer({"PATH": str(tmp_path), "BUILDTOOLS_INSTALLER": "pip"}).name == "pip"
    assert select_installer({"PATH": "/nonexistent"}).name == "pip"


def test_docker_mounts_the_jobs_compiler_cache_read_write(tmp_path: Path) -> None:
    from buildtools.backends.docker.cibw import CibwInputs, compose_cibuildwheel
    from buildtools.backends.docker.containercache import CONTAINER_CCACHE_DIR

    def run(ccache: Path | None) -> Any:
        return compose_cibuildwheel(
            make_job(),
            CibwInputs(
                image="quay.io/pypa/manylinux_2_28_x86_64:latest",
                project_dir=tmp_path,
                output_dir=tmp_path / "out",
                buildtools_dir=tmp_path / "bt",
                job_dir=tmp_path / "job",
                max_jobs=1,
                offline=False,
                ccache_dir=ccache,
            ),
        )

    with_cache = run(tmp_path / "ccache" / "j")
    assert f"--volume={tmp_path / 'ccache' / 'j'}:{CONTAINER_CCACHE_DIR}" in with_cache.create_args
    env = dict(with_cache.container_env)
    assert env["CCACHE_DIR"] == CONTAINER_CCACHE_DIR and env["CCACHE_BASEDIR"] == "/project"
    without = run(None)
    assert not any("ccache" in a for a in without.create_args)
    assert "CCACHE_DIR" not in dict(without.container_env)


# ------------------------------------------------------------------ sccache at the boundary


def _sccache(root: Path) -> CompilerCache:
    return CompilerCache(tool="sccache", program=Path("/opt/bin/sccache"), root=root)


def test_sccache_env_of_a_cuda_build(tmp_path: Path) -> None:
    """The same masquerade as ccache, nvcc through sccache, the job's own server and
    directory, the project and torch's site-packages as base directories, ccache off."""
    cache = _sccache(tmp_path / "sccache")
    cuda = tmp_path / "cu13"
    the_job = make_job(accelerator="cu130")
    toolchain = make_toolchain(tmp_path / "venv", cuda_home=cuda)
    env = build_env_of(tmp_path, the_job, toolchain, cache)
    assert env["SCCACHE_DIR"] == str(tmp_path / "sccache" / the_job.id)
    assert env["SCCACHE_SERVER_UDS"] == str(tmp_path / "sccache" / f"{the_job.id}.sock")
    assert env["SCCACHE_BASEDIRS"].split(os.pathsep) == [
        str(tmp_path / "src"),
        str(toolchain.site_packages.resolve()),
    ]
    assert env["PYTORCH_NVCC"] == f"/opt/bin/sccache {cuda / 'bin' / 'nvcc'}"
    assert env["PATH"].split(os.pathsep)[0] == str(tmp_path / "sccache" / "bin")
    assert env["TORCH_NO_COMPILER_WRAPPER"] == "1" and env["CCACHE_DISABLE"] == "1"
    assert "CCACHE_DIR" not in env and "SCCACHE_DISABLE" not in env


def test_a_long_cache_path_gets_a_short_socket(tmp_path: Path) -> None:
    cache = _sccache(tmp_path / ("d" * 120))
    sock = cache.socket_for(make_job())
    assert len(str(sock)) <= 100 and sock.name.startswith("bt-sccache-")
    assert sock == cache.socket_for(make_job())  # stable: start and stop find it


def test_the_command_line_picks_the_tool_unless_the_job_has_none() -> None:
    job = make_job()
    assert job.compiler_cache == "ccache"
    assert job_tool(job, None) == "ccache"
    assert job_tool(job, "sccache") == "sccache"
    assert job_tool(job, "none") is None
    off = make_job(compiler_cache=None)  # matrix build.compiler_cache: none
    assert job_tool(off, "sccache") is None and job_tool(off, None) is None


def test_the_job_server_is_started_with_its_env_and_stopped_after_a_failure(
    tmp_path: Path,
) -> None:
    cache = _sccache(tmp_path / "sccache")
    job = make_job()
    env = {"SCCACHE_SERVER_UDS": str(cache.socket_for(job)), "SCCACHE_DIR": "x"}
    stats = '{"stats": {"compile_requests": 7, "cache_hits": {"counts": {"C/C++": 2, "CUDA": 3}},'
    stats += ' "cache_misses": {"counts": {"C/C++": 1}}, "requests_not_cacheable": 0}}'
    runner = FakeRunner().on("/opt/bin/sccache", "--show-stats", output=stats)
    lines: list[str] = []
    ctx = RunContext(processes=runner, env={}, log=io.StringIO())
    with (
        pytest.raises(RuntimeError),
        sccache_server(cache, job, env=env, ctx=ctx, report=lines.append),
    ):
        raise RuntimeError("the compile failed")
    argvs = [c.argv[1:] for c in runner.calls]
    assert argvs == [
        ("--start-server",),
        ("--show-stats", "--stats-format", "json"),
        ("--stop-server",),
    ]
    assert all(c.env == env and c.timeout for c in runner.calls)
    assert lines == [f"sccache: 7 compile requests, 5 hits, 1 misses ({cache.dir_for(job)})"]


def test_no_server_for_ccache_or_no_cache(tmp_path: Path) -> None:
    runner = FakeRunner()
    ctx = RunContext(processes=runner, env={}, log=io.StringIO())
    ccache = CompilerCache(tool="ccache", program=Path("/usr/bin/ccache"), root=tmp_path)
    for cache in (ccache, None):
        with sccache_server(cache, make_job(), env={}, ctx=ctx, report=print):
            pass
    assert runner.calls == []


@pytest.mark.parametrize("text", ["", "not json", "[]", '{"stats": 3}'])
def test_unreadable_sccache_stats_are_none(text: str) -> None:
    assert parse_sccache_stats(text) is None


def test_a_cache_directory_is_warm_once_it_holds_an_entry(tmp_path: Path) -> None:
    directory = tmp_path / "job"
    assert not cache_holds_entries(directory)  # missing
    directory.mkdir()
    (directory / "stats").write_text("0")  # top-level bookkeeping is not an entry
    (directory / "a" / "b").mkdir(parents=True)
    assert not cache_holds_entries(directory)
    (directory / "a" / "b" / "0123abcd").write_bytes(b"object")
    assert cache_holds_entries(directory)
    assert not cache_holds_entries(directory, limit=1)  # bounded: gives up, says cold


def test_nvcc_under_sccache_gets_the_real_host_compiler(tmp_path: Path) -> None:
    """sccache runs nvcc's preprocessing passes itself: nvcc must not reach the masquerade
    link as its `gcc` (sccache refuses that call), so NVCC_CCBIN names the gcc on PATH."""
    tools = tmp_path / "tools"
    tools.mkdir()
    gcc = tools / "gcc"
    gcc.write_text("#!/bin/sh\n")
    gcc.chmod(0o755)
    cuda = make_job(accelerator="cu130")
    args: dict[str, Any] = {
        "project_dir": tmp_path / "src",
        "cuda_home": tmp_path / "cu13",
        "path": str(tools),
    }
    env = compiler_cache_env(cuda, _sccache(tmp_path / "c"), **args)
    assert env["NVCC_CCBIN"] == str(gcc)
    assert "NVCC_CCBIN" not in compiler_cache_env(
        cuda, _sccache(tmp_path / "c"), **args, own_ccbin=True
    )
    ccache = CompilerCache(tool="ccache", program=Path("/usr/bin/ccache"), root=tmp_path)
    assert "NVCC_CCBIN" not in compiler_cache_env(cuda, ccache, **args)  # ccache copes
    assert "NVCC_CCBIN" not in compiler_cache_env(make_job(), _sccache(tmp_path / "c"), **args)


def test_compilers_named_by_path_bypass_the_cache_and_say_so() -> None:
    assert bypassing_compilers({}) is None
    assert bypassing_compilers({"CC": "gcc", "CXX": "g++"}) is None  # on PATH: the links
    assert bypassing_compilers({"CXX": "ccache g++"}) is None  # wrapped by the user
    note = bypassing_compilers({"CC": "/opt/gcc/bin/gcc", "CXX": "/opt/gcc/bin/g++ -m64"})
    assert note is not None
    assert note.startswith("CC=/opt/gcc/bin/gcc, CXX=/opt/gcc/bin/g++: ")
    assert "C++ files with $CXX by path, past the compiler cache" in note
    assert "an ELF executable, not a wrapper script" in note  # CC: nvcc's -ccbin
    only_cc = bypassing_compilers({"CC": "/opt/gcc/bin/gcc"})
    assert only_cc is not None and "$CXX" not in only_cc
    assert bypassing_compilers({"CXX": "'/x/g++"}) is not None  # a broken quote: still one line


def test_the_ccache_namespace_hashes_the_nvcc_flags_that_reach_the_output() -> None:
    def ns(flags: str, **more: str) -> str | None:
        return nvcc_flags_namespace({"NVCC_APPEND_FLAGS": flags, **more}).get("CCACHE_NAMESPACE")

    # how fast and where intermediate files go: no namespace of their own
    assert ns("--threads 4 -t 2 --threads=3 -t8 --keep --keep-dir /tmp/a -keep-dir=/b") is None
    seed = ns("-frandom-seed=x -Xcompiler -ffile-prefix-map=/one/checkout=.")
    assert seed is not None and seed.startswith("nvcc-")
    # another checkout (the old path of a map) and another thread count: the same
    assert ns("--threads 2 -frandom-seed=x -Xcompiler -ffile-prefix-map=/other=.") == seed
    # a macro, another seed, another new path, the same flag prepended instead: not the same
    assert ns("-frandom-seed=x -Xcompiler -ffile-prefix-map=/one/checkout=. -DXYZ") != seed
    assert ns("-frandom-seed=y -Xcompiler -ffile-prefix-map=/one/checkout=.") != seed
    assert ns("-frandom-seed=x -Xcompiler -ffile-prefix-map=/one/checkout=/src") != seed
    prepended = nvcc_flags_namespace({"NVCC_PREPEND_FLAGS": "-DXYZ"})["CCACHE_NAMESPACE"]
    assert prepended != ns("-DXYZ")
    # a namespace the caller set stays, with ours after it; a bad quote is not a traceback
    assert ns("-DXYZ", CCACHE_NAMESPACE="team") == f"team-{ns('-DXYZ')}"
    assert ns("-DA='b") is not None


def test_nvcc_gets_a_fixed_random_seed_unless_the_project_names_one() -> None:
    seed = "-frandom-seed=torch-buildtools"
    assert nvcc_seed_env({}, "13.0") == {"NVCC_APPEND_FLAGS": seed}
    assert nvcc_seed_env({"NVCC_APPEND_FLAGS": "-O3"}, "13.2") == {
        "NVCC_APPEND_FLAGS": f"-O3 {seed}"
    }
    assert nvcc_seed_env({"NVCC_APPEND_FLAGS": "-frandom-seed=1"}, "13.0") == {}
    assert nvcc_seed_env({"NVCC_APPEND_FLAGS": "--frandom-seed 1"}, "13.0") == {}


@pytest.mark.parametrize("version", ["11.8", "12.4", "12.9", None, "not-a-version"])
def test_an_nvcc_without_the_seed_option_gets_none(version: str | None) -> None:
    """nvcc 11.8 and 12.4 stop with "Unknown option '-frandom-seed=…'" (measured): a CUDA 12
    cell must not get the flag, or every one of its builds fails."""
    assert nvcc_seed_env({"NVCC_APPEND_FLAGS": "-O3"}, version) == {}
