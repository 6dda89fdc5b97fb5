"""`buildtools index` for real: plain pip installs the example from the generated site.

The real wheel is the reference matrix's CPU cell (torch 2.13.0, this Python), built once.
Next to it the site lists decoys pip must NOT pick: the same version for another Python,
a CUDA build for the same torch, and a newer version for another torch. A decoy that gets
installed fails the import (its package raises), so "pip picked the right wheel" is
checked by running the example's smoke test in a fresh venv that has torch 2.13.0.

Served two ways: `file://` and python's http.server on 127.0.0.1 (random port, stopped at
the end). The server's request log also proves pip used the PEP 658 metadata files.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fixtures.cli import HOST, REPO, buildtools
from fixtures.crafted import make_wheel
from fixtures.envs import fresh_venv

CP = f"cp{HOST.replace('.', '')}"
REAL_VERSION = "0.1.0+pt213cpu"
CUDA_WHEELHOUSE = Path(os.environ.get("BUILDTOOLS_TEST_CUDA_WHEELHOUSE", "/tmp/wh-cuda"))
PIP_TIMEOUT = 300


def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    return subprocess.run(
        argv, text=True, capture_output=True, check=False, timeout=PIP_TIMEOUT, env=env, **kwargs
    )


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def decoy(directory: Path, version: str, tag: str, torch: str, accelerator: str) -> Path:
    minor = ".".join(torch.split(".")[:2])
    record = {"schema": 1, "torch": torch, "accelerator": accelerator, "cxx11_abi": True}
    return make_wheel(
        directory,
        name="bt_scatter",
        version=version,
        tag=tag,
        files={"bt_scatter/__init__.py": f"raise ImportError('decoy {version} {tag}')\n".encode()},
        requires=[f"torch=={minor}.*"],
        extra_metadata=["Requires-Python: >=3.9"],
        dist_info_files={"buildtools.json": json.dumps(record).encode()},
    )


@pytest.fixture(scope="module")
def wheelhouse(example_wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real CPU wheel of the example (buildtools build) plus the decoys."""
    wh = tmp_path_factory.mktemp("wheelhouse")
    for wheel in example_wheelhouse.glob("*.whl"):
        shutil.copy2(wheel, wh / wheel.name)
    other = "cp312" if CP != "cp312" else "cp313"
    decoy(wh, REAL_VERSION, f"{other}-{other}-manylinux_2_28_x86_64", "2.13.0+cpu", "cpu")
    decoy(wh, "0.1.0+pt213cu130", f"{CP}-{CP}-manylinux_2_28_x86_64", "2.13.0+cu130", "cu130")
    decoy(wh, "0.2.0+pt211cpu", f"{CP}-{CP}-manylinux_2_28_x86_64", "2.11.0+cpu", "cpu")
    return wh


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with torch 2.13.0 (pip's configured indexes; the CPU wheel is local)."""
    return fresh_venv(tmp_path_factory.mktemp("venv") / "venv", "torch==2.13.0")


class _Handler(SimpleHTTPRequestHandler):
    requests: list[str]

    def log_message(self, format: str, *args: Any) -> None:
        self.requests.append(self.path)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, list[str]]]:
    """http.server on 127.0.0.1:<random> serving a directory; (base URL, root, request log)."""
    root = tmp_path_factory.mktemp("www")
    requests: list[str] = []
    handler = type("Handler", (_Handler,), {"requests": requests})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", root, requests
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def site(server: tuple[str, Path, list[str]], wheelhouse: Path) -> Path:
    """The site with relative links, published under the server's root."""
    _, root, _ = server
    out = root / "whl"
    proc = buildtools("index", str(wheelhouse), "--site", str(out), "--no-matrix")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "published 4 new wheel(s)" in proc.stdout
    return out


def pip_install(python: Path, *args: str) -> str:
    """Install bt-scatter with only the given index options; return the version installed."""
    proc = run([str(python), "-m", "pip", "install", "--isolated", "--no-cache-dir", *args])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    try:
        show = run([str(python), "-m", "pip", "show", "bt-scatter"])
        version = next(
            line.split(":", 1)[1].strip()
            for line in show.stdout.splitlines()
            if line.startswith("Version:")
        )
        smoke = run([str(python), str(REPO / "examples" / "scatter" / "smoke.py")], cwd="/")
        assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    finally:
        run([str(python), "-m", "pip", "uninstall", "-y", "bt-scatter"])
    return version


def test_find_links_page_from_file_url(site: Path, venv: Path) -> None:
    page = (site / "torch-2.13.0+cpu.html").as_uri()
    assert pip_install(venv, "--no-index", "-f", page, "bt-scatter") == REAL_VERSION


def test_find_links_page_over_http(
    site: Path, venv: Path, server: tuple[str, Path, list[str]]
) -> None:
    base, _, requests = server
    requests.clear()
    page = f"{base}/whl/torch-2.13.0+cpu.html"
    assert pip_install(venv, "--no-index", "-f", page, "bt-scatter") == REAL_VERSION
    real = next(site.glob(f"wheels/bt_scatter-{REAL_VERSION}-{CP}-*.whl")).name
    wheel_path = "/whl/wheels/" + real.replace("+", "%2B")
    assert f"{wheel_path}.metadata" in requests, requests  # PEP 658: metadata before the wheel
    assert [r for r in requests if r.endswith(".whl")] == [wheel_path]


def test_variant_simple_index_over_http_and_file(
    site: Path, venv: Path, server: tuple[str, Path, list[str]]
) -> None:
    base, _, _ = server
    index = f"{base}/whl/torch-2.13.0+cpu/"
    assert pip_install(venv, "--index-url", index, "bt-scatter") == REAL_VERSION
    file_index = (site / "torch-2.13.0+cpu").as_uri() + "/"
    assert pip_install(venv, "--index-url", file_index, "bt-scatter") == REAL_VERSION


def test_simple_index_of_every_wheel_with_a_pinned_version(
    site: Path, venv: Path, server: tuple[str, Path, list[str]]
) -> None:
    base, _, _ = server
    pin = f"bt-scatter=={REAL_VERSION}"
    assert pip_install(venv, "--index-url", f"{base}/whl/simple/", pin) == REAL_VERSION
    assert pip_install(venv, "--index-url", (site / "simple").as_uri() + "/", pin) == REAL_VERSION


def test_absolute_links_and_wheels_hosted_elsewhere(
    wheelhouse: Path, venv: Path, server: tuple[str, Path, list[str]]
) -> None:
    base, root, requests = server
    assets = root / "assets"
    assets.mkdir()
    for wheel in wheelhouse.glob("*.whl"):
        shutil.copyfile(wheel, assets / wheel.name)
    out = root / "elsewhere"
    proc = buildtools(
        "index",
        str(wheelhouse),
        "--site",
        str(out),
        "--no-matrix",
        "--base-url",
        f"{base}/elsewhere/",
        "--wheel-url",
        f"{base}/assets/{{filename}}",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (out / "wheels").exists()
    requests.clear()
    page = f"{base}/elsewhere/torch-2.13.0+cpu.html"
    assert pip_install(venv, "--no-index", "-f", page, "bt-scatter") == REAL_VERSION
    assert [r for r in requests if r.endswith(".whl")] == [
        r for r in requests if r.startswith("/assets/") and r.endswith(".whl")
    ]
    index = f"{base}/elsewhere/torch-2.13.0+cpu/"
    assert pip_install(venv, "--index-url", index, "bt-scatter") == REAL_VERSION


def pip_download(page: str, python: str, dest: Path) -> list[str]:
    """What `pip download` picks for another Python (no install: only tags are compared)."""
    proc = run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--isolated",
            "--no-index",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            python,
            "--platform",
            "manylinux_2_34_x86_64",
            "--platform",
            "manylinux_2_28_x86_64",
            "-f",
            page,
            "-d",
            str(dest),
            "bt-scatter",
        ]
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return sorted(p.name for p in dest.iterdir())


def test_pip_picks_the_wheel_of_the_python(site: Path, tmp_path: Path) -> None:
    other = "3.12" if HOST != "3.12" else "3.13"
    page = (site / "torch-2.13.0+cpu.html").as_uri()
    tag = f"cp{other.replace('.', '')}"
    got = pip_download(page, other, tmp_path / "a")
    assert got == [f"bt_scatter-{REAL_VERSION}-{tag}-{tag}-manylinux_2_28_x86_64.whl"]


def test_real_cuda_wheel_is_listed_for_its_torch_and_picked_for_its_python(
    tmp_path: Path, wheelhouse: Path
) -> None:
    cuda = sorted(CUDA_WHEELHOUSE.glob("bt_scatter-*+pt211cu130-cp312-*.whl"))
    if not cuda:
        pytest.skip(
            f"no CUDA wheel of the example in {CUDA_WHEELHOUSE} (buildtools build a cu130 cell)"
        )
    out = tmp_path / "site"
    proc = buildtools("index", str(wheelhouse), str(cuda[-1]), "--site", str(out), "--no-matrix")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = (out / "torch-2.11.0+cu130.html").read_text()
    assert cuda[-1].name in page and "pt213" not in page
    assert cuda[-1].name not in (out / "torch-2.13.0+cpu.html").read_text()
    got = pip_download((out / "torch-2.11.0+cu130.html").as_uri(), "3.12", tmp_path / "d")
    assert got == [cuda[-1].name]


def test_cli_output_is_deterministic(wheelhouse: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        proc = buildtools("index", str(wheelhouse), "--site", str(out), "--no-matrix")
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert snapshot(a) == snapshot(b)
    first = snapshot(a)
    proc = buildtools("index", str(wheelhouse), "--site", str(a), "--no-matrix")
    assert proc.returncode == 0 and "4 already published" in proc.stdout
    assert snapshot(a) == first


def test_matrix_settings_are_used(wheelhouse: Path, tmp_path: Path) -> None:
    out = tmp_path / "site"
    proc = buildtools("index", str(wheelhouse), "--site", str(out))  # ./matrix.yaml of the repo
    assert proc.returncode == 0, proc.stdout + proc.stderr
    landing = (out / "index.html").read_text()
    assert (
        "pip install bt-scatter -f https://example.github.io/bt-scatter/whl/torch-2.13.0+cpu.html"
        in landing
    )


_CRASH = textwrap.dedent("""\
    import os, sys
    from pathlib import Path
    from buildtools.index.publish import PublishOptions, publish
    from buildtools.index.settings import IndexSettings
    from buildtools.index.wheels import collect_wheels, read_wheel
    from buildtools.knowledge import load_knowledge

    site, stage, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    wheels = [read_wheel(p) for p in collect_wheels([Path(a) for a in sys.argv[4:]])]

    def fault(at):
        if at == stage:
            os._exit(9)  # a hard crash: no except, no finally, no cleanup

    kwargs = {"exchange": lambda a, b: False} if mode == "two-renames" else {}
    publish(site, wheels, IndexSettings(), load_knowledge(), options=PublishOptions(fault=fault, **kwargs))
    """)


@pytest.mark.parametrize(
    ("mode", "stage"),
    [
        ("renameat2", "wheels-copied"),
        ("renameat2", "pages-written"),
        ("two-renames", "pages-written"),
        ("two-renames", "between-renames"),
    ],
)
def test_killed_publisher_leaves_the_old_site(
    wheelhouse: Path, tmp_path: Path, mode: str, stage: str
) -> None:
    real = next(wheelhouse.glob(f"bt_scatter-{REAL_VERSION}-{CP}-*.whl"))
    site = tmp_path / "site"
    proc = buildtools("index", str(real), "--site", str(site), "--no-matrix")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    before = snapshot(site)
    crash = run([sys.executable, "-c", _CRASH, str(site), stage, mode, str(wheelhouse)], cwd=REPO)
    assert crash.returncode == 9, crash.stdout + crash.stderr
    leftovers = sorted(p.name for p in tmp_path.glob(".site.*-*"))
    assert leftovers, "the crash should have left a staging directory behind"
    if stage == "between-renames":
        assert not site.exists()  # the one instant two renames cannot cover ...
    else:
        assert snapshot(site) == before
    proc = buildtools("index", str(real), "--site", str(site), "--no-matrix")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert snapshot(site) == before  # the next run restored the old site and cleaned up
    assert not list(tmp_path.glob(".site.*-*"))
    proc = buildtools("index", str(wheelhouse), "--site", str(site), "--no-matrix")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 new wheel(s)" in proc.stdout and "1 already published" in proc.stdout


def test_both_architectures_side_by_side_and_pip_picks_its_own(tmp_path: Path) -> None:
    """An x86_64 and an aarch64 wheel of one cell share the page; pip takes its machine's."""
    wh = tmp_path / "wh"
    version = "0.1.0+pt211cu130"
    x86 = decoy(wh, version, "cp312-cp312-manylinux_2_28_x86_64", "2.11.0+cu130", "cu130")
    arm = decoy(wh, version, "cp312-cp312-manylinux_2_28_aarch64", "2.11.0", "cu130")
    out = tmp_path / "site"
    proc = buildtools("index", str(wh), "--site", str(out), "--no-matrix")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = out / "torch-2.11.0+cu130.html"
    text = page.read_text()
    assert x86.name in text and arm.name in text

    def picks(platform: str) -> list[str]:
        dest = tmp_path / platform
        argv = [sys.executable, "-m", "pip", "download", "--isolated", "--no-index"]
        argv += ["--no-deps", "--only-binary=:all:", "--python-version", "3.12"]
        argv += ["--platform", platform, "-f", page.as_uri(), "-d", str(dest), "bt-scatter"]
        got = run(argv)
        assert got.returncode == 0, got.stdout + got.stderr
        return sorted(p.name for p in dest.iterdir())

    assert picks("manylinux_2_28_aarch64") == [arm.name]
    assert picks("manylinux_2_28_x86_64") == [x86.name]


# -- uv: the same site, installed with uv three ways ---------------------------------------
# (the find-links page, the page's PEP 503 index, and the README's [[tool.uv.index]] +
# [tool.uv.sources] snippet, read from the README so the snippet users copy is the one
# tested); torch 2.13.0 is in the venv already: uv keeps it (uv does not read pip's
# configuration, where this machine's CPU torch lives)
UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
_NO_UV = pytest.mark.skipif(UV is None, reason="uv is not installed (a buildtools dependency)")


def uv_install(python: Path, cwd: Path, *args: str) -> str:
    """Install with uv (no user config, a private cache); the version installed, smoke run."""
    assert UV is not None
    cache = cwd / ".uv-cache"
    proc = run(
        [UV, "pip", "install", "--no-config", "--cache-dir", str(cache), "--python",
         str(python), *args],
        cwd=cwd,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    try:
        show = run([str(python), "-m", "pip", "show", "bt-scatter"])
        version = next(
            line.split(":", 1)[1].strip()
            for line in show.stdout.splitlines()
            if line.startswith("Version:")
        )
        smoke = run([str(python), str(REPO / "examples" / "scatter" / "smoke.py")], cwd="/")
        assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    finally:
        run([str(python), "-m", "pip", "uninstall", "-y", "bt-scatter"])
    return version


@_NO_UV
def test_uv_from_the_find_links_page(
    site: Path, venv: Path, server: tuple[str, Path, list[str]], tmp_path: Path
) -> None:
    base, _, _ = server
    for page in (f"{base}/whl/torch-2.13.0+cpu.html", (site / "torch-2.13.0+cpu.html").as_uri()):
        assert uv_install(venv, tmp_path, "bt-scatter", "--find-links", page) == REAL_VERSION


@_NO_UV
def test_uv_from_the_pep503_index(
    site: Path, venv: Path, server: tuple[str, Path, list[str]], tmp_path: Path
) -> None:
    base, _, _ = server
    index = f"{base}/whl/torch-2.13.0+cpu/"
    assert uv_install(venv, tmp_path, "bt-scatter", "--index", index) == REAL_VERSION


@_NO_UV
def test_uv_with_the_readme_s_index_and_sources_snippet(
    site: Path, venv: Path, server: tuple[str, Path, list[str]], tmp_path: Path
) -> None:
    base, _, _ = server
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    snippet = next(
        block
        for block in re.findall(r"```toml\n(.*?)```", readme, re.S)
        if "[tool.uv.sources]" in block
    )
    published = "https://example.github.io/bt-scatter/whl/torch-2.11.0+cu130/"
    assert published in snippet
    snippet = snippet.replace(published, f"{base}/whl/torch-2.13.0+cpu/")
    snippet = snippet.replace("whl/cu130", "whl/cpu").replace("pytorch-cu130", "pytorch-cpu")
    project = tmp_path / "app"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "app"\nversion = "0"\ndependencies = ["bt-scatter"]\n\n' + snippet
    )
    # --no-config would drop the project's [tool.uv] too: the snippet is read from the project
    assert UV is not None
    proc = run(
        [UV, "pip", "install", "--cache-dir", str(tmp_path / ".uv-cache"), "--python", str(venv),
         "-r", "pyproject.toml"],
        cwd=project,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    try:
        show = run([str(venv), "-m", "pip", "show", "bt-scatter"])
        assert f"Version: {REAL_VERSION}" in show.stdout
        smoke = run([str(venv), str(REPO / "examples" / "scatter" / "smoke.py")], cwd="/")
        assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    finally:
        run([str(venv), "-m", "pip", "uninstall", "-y", "bt-scatter"])
