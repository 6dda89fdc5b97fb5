"""sccache-dist: the configs and tokens `dist up` writes, the client environment of a
distributing job, sccache's counts, and the command line's refusals (no process started)."""

from __future__ import annotations

import dataclasses
import io
import json
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

from fixtures.factories import make_job

from buildtools.cli.build import _distribute
from buildtools.cli.main import main
from buildtools.distcompile.client import (
    ClientPaths,
    DistTarget,
    Fallbacks,
    client_env,
    fallbacks,
    make_launchers,
    parse_stats,
    resolve_target,
    strip_nvcc_flags,
)
from buildtools.distcompile.cluster import STATE_FILE, STATE_SCHEMA, read_state
from buildtools.distcompile.clusterconfig import (
    assign_cpus,
    check_token,
    client_config,
    parse_scheduler_url,
    plan_cluster,
    scheduler_config,
    server_config,
    server_token,
    toml_document,
)
from buildtools.distcompile.schedstatus import decode_status
from buildtools.errors import ConfigError, DistError
from buildtools.wheelbuild.build_report import CellResult, Status
from buildtools.wheelbuild.distribute import DistPlan
from buildtools.wheelbuild.scheduler import HostResources, plan_slots

# made by sccache-dist 0.16.0 itself: `auth generate-jwt-hs256-key`, then
# `auth generate-jwt-hs256-server-token --secret-key KEY --server 127.0.0.1:10611`
TOOL_KEY = "qZRIz4iS5xieHrn65RuxkxYyFGiuB7mp7n3Vp2ReavQ"
TOOL_TOKEN = (
    "eyJ0eXAiOiJKV1QiLCJhbGciOiJIUzI1NiJ9.eyJleHAiOjAsInNlcnZlcl9pZCI6IjEyNy4wLjAuMToxMDYxMSJ9"
    ".KwgHl4tF2CZ5c90QL_maoTGjuL9CsOh6aKnfuX00kxs"
)


def test_server_token_is_the_one_sccache_dist_makes() -> None:
    assert server_token(TOOL_KEY, "127.0.0.1:10611") == TOOL_TOKEN
    assert server_token(TOOL_KEY, "127.0.0.1:10612") != TOOL_TOKEN


def layout(tmp_path: Path, servers: int = 2, cores: int = 1):  # type: ignore[no-untyped-def]
    return plan_cluster(
        state_dir=tmp_path,
        servers=servers,
        cores=cores,
        allowed_cpus=[0, 1],
        ports=list(range(10600, 10601 + servers)),
        keys=("client-token", TOOL_KEY),
    )


def test_configs_are_sccache_0_16s_formats(tmp_path: Path) -> None:
    lay = layout(tmp_path)
    sched = tomllib.loads(scheduler_config(lay))
    assert sched == {
        "public_addr": "127.0.0.1:10600",
        "client_auth": {"type": "token", "token": "client-token"},
        "server_auth": {"type": "jwt_hs256", "secret_key": TOOL_KEY},
    }
    server = tomllib.loads(server_config(lay, lay.servers[1], bwrap=Path("/usr/bin/bwrap")))
    assert server == {
        "cache_dir": str(tmp_path / "server-1" / "toolchains"),
        "public_addr": "127.0.0.1:10602",
        "scheduler_url": "http://127.0.0.1:10600",
        "builder": {
            "type": "overlay",
            "build_dir": str(tmp_path / "server-1" / "build"),
            "bwrap_path": "/usr/bin/bwrap",
        },
        "scheduler_auth": {
            "type": "jwt_token",
            "token": server_token(TOOL_KEY, "127.0.0.1:10602"),
        },
    }
    client = tomllib.loads(client_config("http://h:1", "t", toolchain_cache=Path("/tc")))
    # no `rewrite_includes_only`: gcc 12's `-E -fdirectives-only -fopenmp` drops `#pragma omp`
    # lines, so a unit compiled remotely would lose its parallel regions (docs/distributed.md)
    assert client == {
        "dist": {
            "scheduler_url": "http://h:1",
            "cache_dir": "/tc",
            "auth": {"type": "token", "token": "t"},
        }
    }


def test_toml_strings_cannot_break_out(tmp_path: Path) -> None:
    hostile = 'a"\nb = 1\n[x]\\\x00\x7f'
    doc = toml_document({"k": hostile, "t": {"path": hostile}})
    assert tomllib.loads(doc) == {"k": hostile, "t": {"path": hostile}}


def test_servers_are_pinned_to_their_cpus(tmp_path: Path) -> None:
    assert [s.cpus for s in layout(tmp_path).servers] == [(0,), (1,)]
    assert assign_cpus(3, 1, [4, 2]) == [(2,), (4,), (2,)]  # wraps: servers share
    assert assign_cpus(2, 2, [0, 1, 2, 3]) == [(0, 1), (2, 3)]
    with pytest.raises(ConfigError, match="--cores 3: this machine lets buildtools use 2"):
        assign_cpus(1, 3, [0, 1])
    with pytest.raises(ConfigError, match="--servers 0"):
        layout(tmp_path, servers=0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://127.0.0.1:10600", "http://127.0.0.1:10600"),
        ("https://sccache.example.org/", "https://sccache.example.org"),
        ("http://[::1]:10600", "http://[::1]:10600"),
    ],
)
def test_scheduler_urls(text: str, expected: str) -> None:
    assert parse_scheduler_url(text) == expected


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("ftp://h:1", "is not an http:// or https:// URL"),
        ("127.0.0.1:10600", "is not an http:// or https:// URL"),
        ("http://u:p@h:1", "carries credentials"),
        ("http://h:1/api?x=1", "has a path or query"),
        ("http://h:99999", "is not a URL"),
        ("http://h:1\n", "whitespace or a control character"),
    ],
)
def test_bad_scheduler_urls_say_what_is_allowed(text: str, said: str) -> None:
    with pytest.raises(ConfigError, match="--distribute: .*" + said.replace("?", r"\?")):
        parse_scheduler_url(text)


def test_token_comes_from_the_environment_or_the_local_cluster() -> None:
    url = "http://127.0.0.1:10600"
    assert resolve_target(url, {"BUILDTOOLS_DIST_TOKEN": "abc"}) == DistTarget(url=url, token="abc")
    assert resolve_target(url + "/", {}, local=(url, "mine")).token == "mine"
    with pytest.raises(ConfigError, match="no client token; set \\$BUILDTOOLS_DIST_TOKEN"):
        resolve_target(url, {}, local=("http://127.0.0.1:1", "other"))
    with pytest.raises(ConfigError, match="visible ASCII"):
        resolve_target(url, {"BUILDTOOLS_DIST_TOKEN": "a b"})
    with pytest.raises(ConfigError):
        check_token("x\r\nInjected: 1", what="t")


def test_nvcc_flags_move_to_the_command_line_sccache_reads() -> None:
    flags = "-Xcompiler -ffile-prefix-map=/a=. --threads 3 --keep --keep-dir '/t/n v' --compress-mode=size"
    remaining, threads = strip_nvcc_flags(flags)
    assert threads == 3
    assert remaining == "-Xcompiler -ffile-prefix-map=/a=. --compress-mode=size"
    assert strip_nvcc_flags("-t=2 -keep-dir=/x")[1] == 2


def test_client_env_puts_sccache_in_front_of_every_compiler(tmp_path: Path) -> None:
    import shlex

    cxx = tmp_path / "usr" / "c++"
    cxx.parent.mkdir()
    cxx.write_text("#!/bin/sh\n")
    cxx.chmod(0o755)
    launchers = make_launchers(tmp_path / "w", Path("/b/sccache"), path=str(cxx.parent))
    assert make_launchers(tmp_path / "w", Path("/b/sccache"), path=str(cxx.parent)) == launchers
    assert dict(launchers.compilers) == {"c++": cxx}
    assert launchers.no_dist == (tmp_path / "w" / "here" / "c++",)
    assert (launchers.here / "c++").readlink() == cxx
    assert (launchers.bin / "gcc").readlink() == Path("/b/sccache")  # none on PATH: sccache says so
    # a compiler CC/CXX name without a path (g++-12) gets an entry of its own
    gxx12 = cxx.with_name("g++-12")
    gxx12.write_text("#!/bin/sh\n")
    gxx12.chmod(0o755)
    more = make_launchers(
        tmp_path / "w2", Path("/b/sccache"), path=str(cxx.parent), names=["c++", "g++-12"]
    )
    assert more.no_dist == (more.here / "c++", more.here / "g++-12")
    assert shlex.split((more.bin / "g++-12").read_text().splitlines()[-1])[6:8] == [
        str(gxx12),
        str(more.here / "g++-12"),
    ]
    entry = (launchers.bin / "c++").read_text().splitlines()[-1]
    assert entry.startswith("exec ") and entry.endswith(' "$@"')
    assert shlex.split(entry)[4:-1] == ["cc", "/b/sccache", str(cxx), str(launchers.here / "c++")]
    paths = ClientPaths(
        launchers=launchers,
        conf=tmp_path / "client.toml",
        socket=tmp_path / "s.sock",
        cache=tmp_path / "cache",
        log=tmp_path / "log",
        toolchains=tmp_path / "tc",
    )
    env = {
        "PATH": str(cxx.parent),
        "NVCC_APPEND_FLAGS": "--threads 2 --keep --keep-dir /k -lineinfo",
    }
    out = client_env(env, paths, sccache=Path("/b/sccache"), cuda_home=Path("/cuda"))
    assert out["PATH"].split(":")[0] == str(launchers.bin)
    assert out["SCCACHE_SERVER_UDS"] == str(paths.socket)
    assert out["NVCC_APPEND_FLAGS"] == "-lineinfo"
    assert out["PYTORCH_NVCC"] == str(launchers.nvcc)
    nvcc = shlex.split(launchers.nvcc.read_text().splitlines()[-1])[4:-1]
    assert nvcc == [
        "nvcc",
        "/b/sccache",
        str(cxx),
        str(launchers.here / "c++"),
        "/cuda/bin/nvcc",
        "2",
    ]
    cpu = client_env({"PATH": str(cxx.parent)}, paths, sccache=Path("/b/sccache"), cuda_home=None)
    assert "PYTORCH_NVCC" not in cpu and "NVCC_APPEND_FLAGS" not in cpu


STATS = {
    "stats": {
        "compilations": 12,
        "dist_compiles": {"127.0.0.1:1": 6, "127.0.0.1:2": 4},
        "dist_errors": 1,
        "compile_fails": 0,
        "cache_hits": {"counts": {"C/C++": 2, "PTX": 1}, "adv_counts": {}},
    }
}


def test_counts_come_from_sccaches_stats() -> None:
    counts = parse_stats(json.dumps(STATS))
    assert counts.remote == {"127.0.0.1:1": 6, "127.0.0.1:2": 4}
    assert (counts.local, counts.fell_back, counts.cache_hits) == (2, 1, 3)
    assert counts.describe() == (
        "10 unit(s) remote (6 on 127.0.0.1:1, 4 on 127.0.0.1:2), 2 local "
        "(1 fell back to local after the cluster failed them), 3 from the cache"
    )
    for bad in ("", "[]", '{"stats": []}', '{"stats": {"dist_compiles": []}}'):
        with pytest.raises(ValueError):
            parse_stats(bad)


def test_the_note_says_why_units_fell_back(tmp_path: Path) -> None:
    log = tmp_path / "sccache.log"
    earlier = "[a.o]: Could not perform distributed compile, falling back to local: old build\n"
    warn = "[2026-11-26T11:41:05Z WARN  sccache::compiler::compiler] [{}]: Could not perform "
    package = "Could not package toolchain: Failed to analyse /opt/gcc/bin/gcc with ldd: Elf"
    lines = [warn.format(f"x{i}.o") + "distributed compile, falling back to local: " + package
             for i in range(2)]  # fmt: skip
    lines.append(warn.format("y.o") + "distributed compile, falling back to local: \x1b[2Jgone")
    log.write_text(earlier + "\n".join(lines) + "\nDEBUG other\n")
    seen = fallbacks(log, start=len(earlier))  # this build's part of the log only
    reasons = seen.reasons
    assert (seen.kept, seen.refused) == (0, 0)
    assert reasons == (f"{package} (2×)", "?[2Jgone (1×)")  # no terminal control reaches a note
    counts = dataclasses.replace(parse_stats(json.dumps(STATS)), fallback_reasons=reasons)
    assert counts.describe().endswith(
        f"(1 fell back to local after the cluster failed them: {package} (2×); ?[2Jgone (1×)), "
        "3 from the cache"
    )
    assert counts.to_json()["fallback_reasons"] == list(reasons)
    assert fallbacks(tmp_path / "missing.log") == Fallbacks()
    assert fallbacks(log, start=log.stat().st_size) == Fallbacks()


def test_units_a_full_cluster_refused_are_counted_apart_from_failures(tmp_path: Path) -> None:
    # the budget counts this machine's cores too: beyond the cluster's slots the scheduler
    # refuses, and sccache compiles the unit here; that is the plan, not a failure
    log = tmp_path / "sccache.log"
    warn = "WARN sccache] [u{}.o]: Could not perform distributed compile, falling back to local: "
    full = "Insufficient capacity across 1 available servers: Failed to allocate job"
    log.write_text(
        "".join(warn.format(i) + full + "\n" for i in range(15))
        + warn.format(99)
        + "Connection reset by peer (os error 104)\n"
    )
    seen = fallbacks(log)
    assert seen == Fallbacks(("Connection reset by peer (os error 104) (1×)",), 0, 15)
    counts = dataclasses.replace(parse_stats(json.dumps(STATS)), refused=15, fell_back=1)
    assert "(15 while the cluster was full)" in counts.describe()
    assert counts.to_json()["refused"] == 15


def test_report_carries_each_cells_counts() -> None:
    status = decode_status((2).to_bytes(8, "little") + (2).to_bytes(8, "little") + bytes(8))
    plan = DistPlan(
        url="http://h:1",
        target=DistTarget(url="http://h:1", token="t"),
        sccache=Path("s"),
        status=status,
    )
    plan.record("job", parse_stats(json.dumps(STATS)), None)
    cell = CellResult(cell="c", job="job", status=Status.BUILT)
    notes: list[str] = []
    plan.report([cell], notes.append)
    assert cell.to_json()["compiles"]["remote"] == {"127.0.0.1:1": 6, "127.0.0.1:2": 4}
    assert cell.to_json()["compiles"]["scheduler"] == "http://h:1"
    assert notes == [f"distribute: job: {parse_stats(json.dumps(STATS)).describe()}"]
    with pytest.raises(ValueError):
        decode_status(b"\x00" * 23)


def test_distribute_flag_and_setting() -> None:
    assert _distribute(None, None) is None
    assert _distribute(None, "http://h:1/") == "http://h:1"
    assert _distribute("none", "http://h:1") is None
    assert _distribute("http://x:2", "http://h:1") == "http://x:2"
    with pytest.raises(ConfigError, match=r"matrix\.yaml build\.distribute"):
        _distribute(None, "http://h:1/path")


def test_a_record_that_is_not_ours_is_refused(tmp_path: Path) -> None:
    assert read_state(tmp_path) is None
    (tmp_path / STATE_FILE).write_text('{"schema": "x"}')
    with pytest.raises(DistError, match=r"remove .*cluster\.json"):
        read_state(tmp_path)
    (tmp_path / STATE_FILE).write_text(
        json.dumps(
            {
                "schema": STATE_SCHEMA,
                "scheduler_url": "http://h:1",
                "client_token": "t",
                "processes": [
                    {
                        "role": "server",
                        "pid": 1,
                        "config": "c",
                        "log": "l",
                        "addr": "a",
                        "cpus": [],
                        "started": 5,
                        "exe": "/x",
                    }
                ],
            }
        )
    )
    with pytest.raises(DistError, match="pid: not a process id"):
        read_state(tmp_path)


def test_cli_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dist", "down", "--state-dir", str(tmp_path)], out=io.StringIO()) == 21
    assert "no cluster is recorded" in capsys.readouterr().err
    assert main(["dist", "status", "--state-dir", str(tmp_path)], out=io.StringIO()) == 21
    with pytest.raises(SystemExit):
        main(["dist", "up", "--servers", "0"], out=io.StringIO())


def test_without_a_usable_cluster_units_still_compile_through_sccache(tmp_path: Path) -> None:
    """No token for matrix.yaml's setting: the run compiles here, through sccache (the same
    wheel as through the cluster); --distribute without one is an error. A wrong sccache
    is refused with the pinned install."""
    from fixtures.fakes import FakeRunner

    from buildtools.errors import ToolMissingError
    from buildtools.wheelbuild.distribute import plan_distribution
    from buildtools.wheelbuild.options import BuildOptions

    sccache = tmp_path / "bin" / "sccache"
    sccache.parent.mkdir()
    sccache.write_text("#!/bin/sh\n")
    sccache.chmod(0o755)
    env = {"BUILDTOOLS_CACHE_DIR": str(tmp_path), "PATH": str(sccache.parent)}
    opts = BuildOptions(
        project_dir=tmp_path,
        wheelhouse=tmp_path,
        cache_dir=tmp_path,
        env=env,
        distribute="http://127.0.0.1:10600",
        distribute_by_default=True,
    )
    runner = FakeRunner().on(str(sccache), "--version", output="sccache 0.16.0\n")
    notes: list[str] = []
    plan = plan_distribution(opts, runner=runner, note=notes.append)
    assert plan is not None and plan.target is None and plan.sccache == sccache
    assert "no client token" in notes[0] and "through sccache" in notes[0]
    explicit = BuildOptions(**{**opts.__dict__, "distribute_by_default": False})
    with pytest.raises(ConfigError, match="no client token"):
        plan_distribution(explicit, runner=runner, note=notes.append)
    old = FakeRunner().on(str(sccache), "--version", output="sccache 0.8.2\n")
    with pytest.raises(ToolMissingError, match=r"sccache 0\.16\.0 is needed .*found 0\.8\.2"):
        plan_distribution(opts, runner=old, note=notes.append)


def test_distribute_needs_the_host_compilers(tmp_path: Path) -> None:
    from buildtools.wheelbuild.distribute import DistributingBackend
    from buildtools.wheelbuild.options import BuildOptions

    class InContainer:
        name = "docker"
        needs_host_toolkit = False
        repairs_inside = True

    plan = DistPlan(url="http://h:1", sccache=Path("s"))
    opts = BuildOptions(project_dir=tmp_path, wheelhouse=tmp_path, cache_dir=tmp_path, env={})
    with pytest.raises(ConfigError, match="distribute with --backend local"):
        DistributingBackend(InContainer(), plan, opts=opts)  # type: ignore[arg-type]


def test_the_budget_keeps_two_units_in_flight_per_server_core() -> None:
    # a scheduler status of 1 server with 2 CPUs (sccache-dist's bincode: servers, cpus, jobs)
    status = decode_status((1).to_bytes(8, "little") + (2).to_bytes(8, "little") + bytes(8))
    target = DistTarget(url="http://h:1", token="t")
    plan = DistPlan(url="http://h:1", target=target, sccache=Path("s"), status=status)
    two_cores = HostResources(cores=2, memory_gb=24.0)
    # the servers' 2 cores, two units each, beside this machine's own 2
    assert plan.sized(two_cores) == HostResources(cores=2, memory_gb=24.0, remote_slots=4)
    assert plan_slots([make_job(accelerator="cu130")], plan.sized(two_cores)).max_jobs == 6
    down = DistPlan(url="http://h:1", sccache=Path("s"))  # no cluster: this machine only
    assert down.sized(two_cores) == two_cores


@pytest.mark.parametrize(
    ("args", "nvcc", "optimized"),
    [
        (["-c", "a.cpp", "-o", "a.o"], False, False),  # no -O: gcc's -O0
        (["-O3", "-c", "a.cpp"], False, True),
        (["-O2", "-O0", "-c", "a.cpp"], False, False),  # the last one counts
        (["-O0", "-O", "-c", "a.cpp"], False, True),  # bare -O is -O1
        (["-Os"], False, True),
        (["-Wl,-O1", "-c", "a.cpp"], False, False),  # a linker option
        (["-c", "k.cu", "--compiler-options", "'-fPIC'"], True, False),  # torch's own flags
        (["-O3", "-c", "k.cu"], True, True),  # nvcc's -O is the host compiler's
        (["-Xcompiler", "-fPIC,-O2", "-c", "k.cu"], True, True),
        (["-Xcompiler=-O1", "-c", "k.cu"], True, True),
        (["--compiler-options", "'-O2'", "-c", "k.cu"], True, True),
        (["-O3", "-Xcompiler", "-O0"], True, False),
        (["--optimize", "2"], True, True),
        (["--optimize=0"], True, False),
        (["--dopt", "on", "-G"], True, False),  # device options only
    ],
)
def test_the_launcher_reads_the_host_compiles_optimization(
    args: list[str], nvcc: bool, optimized: bool
) -> None:
    from buildtools.distcompile.launcher import command, device_line_info, host_optimized

    assert host_optimized(args, nvcc=nvcc) is optimized
    cc = command(["cc", "/s/sccache", "/usr/bin/c++", "/w/here/c++", *args])
    assert cc[:2] == [
        "/s/sccache",
        "/usr/bin/c++" if host_optimized(args, nvcc=False) else "/w/here/c++",
    ]
    assert cc[2:] == args
    nvcc_argv = ["nvcc", "/s/sccache", "/usr/bin/c++", "/w/here/c++", "/cuda/nvcc", "2", *args]
    run = command(nvcc_argv, {})
    remote = host_optimized(args, nvcc=True) or device_line_info(args, {})
    host = "/usr/bin/c++" if remote else "/w/here/c++"
    assert run == ["/s/sccache", "/cuda/nvcc", "--threads", "2", "-ccbin", host, *args]


@pytest.mark.parametrize(
    ("args", "env", "line_info"),
    [
        (["-c", "k.cu"], {}, False),
        (["-c", "k.cu", "--generate-line-info"], {}, True),  # xformers' default build type
        (["-lineinfo", "-c", "k.cu"], {}, True),
        (["-G", "-c", "k.cu"], {}, True),
        (["-Xptxas", "-v,-lineinfo", "-c", "k.cu"], {}, True),
        (["--ptxas-options=-O3,-g"], {}, True),
        (["--ptxas-options=-v"], {}, False),
        (["-Xcompiler", "-G", "-c", "k.cu"], {}, False),  # the host compiler's value
        (["-c", "k.cu"], {"NVCC_APPEND_FLAGS": "-lineinfo -frandom-seed=x"}, True),
        (["-c", "k.cu"], {"NVCC_PREPEND_FLAGS": "-O3"}, False),
    ],
)
def test_device_code_with_line_info_sends_its_unoptimized_host_code_to_the_cluster(
    args: list[str], env: dict[str, str], line_info: bool
) -> None:
    # its line tables differ by where ptxas ran anyway: keeping the -O0 host compile here
    # could not make the unit the same bytes as a local build, only slower
    from buildtools.distcompile.launcher import command, device_line_info

    assert device_line_info(args, env) is line_info
    run = command(["nvcc", "/s/sccache", "/usr/bin/c++", "/w/here/c++", "/n/nvcc", "1", *args], env)
    assert run == [
        "/s/sccache",
        "/n/nvcc",
        "-ccbin",
        "/usr/bin/c++" if line_info else "/w/here/c++",
        *args,
    ]


def test_unoptimized_units_are_no_dist_and_counted_apart(tmp_path: Path) -> None:
    here = tmp_path / "here" / "c++"
    conf = client_config("http://127.0.0.1:1", "tok", toolchain_cache=tmp_path, no_dist=[here])
    parsed = tomllib.loads(conf)
    assert parsed["dist"]["toolchains"] == [{"type": "no_dist", "compiler_executable": str(here)}]
    assert parsed["dist"]["auth"] == {"type": "token", "token": "tok"}
    log = tmp_path / "sccache.log"
    warn = "WARN sccache::compiler::compiler] [{}]: Could not perform distributed compile, "
    log.write_text(
        "".join(
            warn.format(f"u{i}.o") + f"falling back to local: {reason}\n"
            for i, reason in enumerate(
                [
                    f"Toolchain distribution for {here} is disabled",
                    f'Toolchain distribution for "{here}" is disabled',
                    "Toolchain distribution for /usr/bin/c++ is disabled",  # not ours
                    "Connection reset by peer (os error 104)",
                ]
            )
        )
    )
    assert fallbacks(log, kept=[here]) == Fallbacks(
        (
            "Toolchain distribution for /usr/bin/c++ is disabled (1×)",
            "Connection reset by peer (os error 104) (1×)",
        ),
        kept=2,
    )
    counts = dataclasses.replace(parse_stats(json.dumps(STATS)), kept_here=2, fell_back=0)
    assert "2 unoptimized, kept here" in counts.describe()
    assert counts.to_json()["kept_here"] == 2


def test_the_launcher_reads_the_nvcc_flag_variables_the_cache_keys_name() -> None:
    # launcher.py runs as a stdlib-only script (`python -I`): its copy of the names must not
    # drift from the one place the rest of buildtools reads them
    from buildtools.distcompile import launcher
    from buildtools.toolchain.ccachekeys import NVCC_ENV_FLAGS

    assert launcher._NVCC_FLAG_VARS == NVCC_ENV_FLAGS
