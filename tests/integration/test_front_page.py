"""The front page in a real browser: headless Chromium driven through its DevTools protocol
(tests/fixtures/browser.py) against sites served by http.server on 127.0.0.1.

- every combination the selector offers gives the command index.json implies (and, for
  one that is not published, says so and offers the nearest published one); the copy
  button puts the command on the clipboard; with JavaScript off, the page lists the same
  commands; the page's own policy lets its script and style run and nothing else;
- the hostile-but-valid sites of tests/corpus/pages/ run none of what they carry;
- the example: its CPU wheel (`buildtools build`, smoke-tested for real by `buildtools
  smoke`) and a crafted CUDA wheel are indexed with the matrix; the command the selector
  shows for torch 2.13.0 / CPU / Python 3.11 (pip, then uv) installs the wheel into a fresh
  venv from the served site, and the example's smoke test passes there. The coverage map
  shows the smoke-tested, published, missing and impossible cells.

Every test skips, saying why, where no Chromium is installed. With
BUILDTOOLS_SCREENSHOT_DIR set, the screenshots of the selector and the map are kept there
(docs/front-selector.png and docs/front-coverage.png are made that way).
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fixtures.browser import Browser, CDPError, Page, chromium, find_chromium
from fixtures.cli import HOST, REPO, buildtools
from fixtures.crafted import make_wheel
from fixtures.envs import TorchEnv
from fixtures.pagecheck import read_page

from buildtools.index.manifest import read_manifest
from buildtools.index.settings import IndexSettings
from buildtools.index.site import render_site
from buildtools.knowledge import load_knowledge

pytestmark = pytest.mark.integration

BINARY, WHY = find_chromium()
needs_browser = pytest.mark.skipif(BINARY is None, reason=WHY)
AXES = ("torch", "accelerator", "python", "platform")
TIMEOUT = 600


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A directory served on 127.0.0.1 (random port): (its path, its URL)."""
    root = tmp_path_factory.mktemp("www")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    if BINARY is None:
        pytest.skip(WHY)
    with chromium(BINARY, tmp_path_factory.mktemp("chromium")) as b:
        yield b


def shots(page: Page, name: str, tmp: Path, *, keep: bool = False) -> None:
    """Screenshots of the selector and the map (with `keep`, also where
    BUILDTOOLS_SCREENSHOT_DIR says)."""
    where = os.environ.get("BUILDTOOLS_SCREENSHOT_DIR") if keep else None
    for part, selector in (("selector", "#install"), ("coverage", "#map")):
        path = tmp / f"{name}-{part}.png"
        page.screenshot(path, selector, width=980)
        assert path.read_bytes().startswith(b"\x89PNG")
        if where:
            shutil.copyfile(path, Path(where) / f"front-{part}.png")


# -- the page's state, through the DOM ------------------------------------------------------


def choose(page: Page, axis: str, value: str) -> None:
    """Click the label of `value` on `axis` (real mouse events)."""
    ident = page.evaluate(
        f'(document.querySelector(\'input[name="{axis}"][value="\' + '
        f"CSS.escape({json.dumps(value)}) + '\"]') || {{}}).id || null"
    )
    assert ident, f"the selector offers no {axis} {value}"
    page.click(f'label[for="{ident}"]')


def options(page: Page, axis: str) -> list[str]:
    return list(
        page.evaluate(f"[...document.querySelectorAll('input[name=\"{axis}\"]')].map(i => i.value)")
    )


def state(page: Page) -> dict[str, Any]:
    value: dict[str, Any] = page.evaluate(
        "({command: document.getElementById('command').textContent,"
        " status: document.getElementById('status').textContent,"
        " missing: document.getElementById('status').classList.contains('missing'),"
        " nearest: document.getElementById('status').getAttribute('data-nearest'),"
        " checked: Object.fromEntries([...document.querySelectorAll('#selector input:checked')]"
        "   .map(i => [i.name, i.value]))})"
    )
    return value


def errors(browser: Browser) -> list[dict[str, Any]]:
    """Exceptions and console errors the pages reported (a CSP refusal is one)."""
    return [
        e
        for e in browser.events
        if e.get("method") == "Runtime.exceptionThrown"
        or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
    ]


# -- a test site: what index.json implies ---------------------------------------------------

TORCH_INDEX = {"cpu": "https://torch.example/whl/cpu", "cu126": "https://torch.example/whl/cu126"}


def crafted(directory: Path, torch: str, accelerator: str, tag: str) -> Path:
    minor = ".".join(torch.split(".")[:2])
    record = {"schema": 1, "torch": f"{torch}+{accelerator}", "accelerator": accelerator}
    return make_wheel(
        directory,
        name="bt_scatter",
        version=f"0.1.0+pt{minor.replace('.', '')}{accelerator}",
        tag=tag,
        files={"bt_scatter/__init__.py": b""},
        requires=[f"torch=={minor}.*"],
        extra_metadata=["Requires-Python: >=3.10"],
        dist_info_files={"buildtools.json": json.dumps({**record, "cxx11_abi": True}).encode()},
    )


def implied(site: Path, base: str) -> dict[tuple[str, ...], tuple[str, str]]:
    """(torch, accelerator, python, platform) → (pip, uv) from index.json: the page of each
    torch a wheel serves (a wheel for X.Y.0 also on every patch of X.Y the knowledge base
    knows: its pin admits them), its Python and platform tags, and torch's index."""
    kb = load_knowledge()
    found: dict[tuple[str, ...], tuple[str, str]] = {}
    for w in read_manifest(site).wheels:
        _, python, _, platform = w.filename.removesuffix(".whl").rsplit("-", 3)
        py = f"{python[2]}.{python[3:]}"
        plat = "linux_aarch64" if "aarch64" in platform else "linux_x86_64"
        for torch in {p for t in w.torch_versions for p in kb.torch_release(t).patches}:
            page = f"{base}/torch-{torch}+{w.accelerator}.html"
            extra = f" --extra-index-url {TORCH_INDEX[w.accelerator]}"
            found[(torch, w.accelerator, py, plat)] = (
                f"pip install bt-scatter -f {page}{extra}",
                f"uv pip install bt-scatter --find-links {page}{extra}",
            )
    return found


@pytest.fixture(scope="module")
def test_site(
    served: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str]:
    """Crafted wheels over two torch minors (one with two patches), CPU and CUDA, two
    Pythons and two platforms, published by the CLI with an absolute base URL."""
    root, url = served
    wh = tmp_path_factory.mktemp("crafted")
    for torch, accelerator, tag in (
        ("2.13.0", "cpu", "cp311-cp311-manylinux_2_28_x86_64"),
        ("2.13.0", "cpu", "cp312-cp312-manylinux_2_28_x86_64"),
        ("2.13.0", "cpu", "cp312-cp312-manylinux_2_28_aarch64"),
        ("2.12.0", "cu126", "cp311-cp311-manylinux_2_28_x86_64"),
        ("2.12.0", "cpu", "cp312-cp312-manylinux_2_28_x86_64"),
    ):
        crafted(wh, torch, accelerator, tag)
    matrix = wh / "matrix.yaml"
    matrix.write_text(
        "version: 1\nproject: {path: ., name: bt-scatter}\n"
        "axes: {torch: ['2.12.0', '2.13.0'], accelerator: [cpu, cu126], python: ['3.11', '3.12']}\n"
        f"accelerators: {{cpu: {{torch_index: '{TORCH_INDEX['cpu']}'}}, "
        "cuda: {torch_index: 'https://torch.example/whl/{accelerator}'}}\n"
    )
    site = root / "crafted"
    proc = buildtools(
        "index",
        str(wh),
        "--site",
        str(site),
        "--matrix",
        str(matrix),
        "--base-url",
        f"{url}/crafted",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return site, f"{url}/crafted"


@needs_browser
def test_every_selector_combination_gives_the_command_the_index_implies(
    browser: Browser, test_site: tuple[Path, str], tmp_path: Path
) -> None:
    site, url = test_site
    want = implied(site, url)
    assert len(want) == 7  # 2.12.0's wheels on its alias 2.12.1's page too
    page = browser.new_page()
    browser.events.clear()
    page.navigate(f"{url}/")
    values = {axis: options(page, axis) for axis in AXES}
    assert sorted(values["torch"]) == ["2.12.0", "2.12.1", "2.13.0"]
    seen_missing = 0
    for combo in itertools.product(*(values[a] for a in AXES), ("pip", "uv")):
        for axis, value in zip((*AXES, "installer"), combo, strict=True):
            choose(page, axis, value)
        got = state(page)
        key, installer = combo[:4], combo[4]
        assert tuple(got["checked"][a] for a in AXES) == key
        which = 0 if installer == "pip" else 1
        if key in want:
            assert not got["missing"], (key, got)
            assert got["command"] == want[key][which], key
            continue
        seen_missing += 1
        assert got["missing"] and got["status"].startswith("Not published"), (key, got)
        # the nearest: a published combination that agrees on the most important axes
        # (platform, then accelerator, then torch, then Python), with its own command
        nearest = next(k for k in want if got["nearest"].endswith(_suffix(k)))

        assert _agree(nearest, key) == max(_agree(k, key) for k in want), (key, nearest)
        assert got["command"] == want[nearest][which]
    assert seen_missing > 20
    # "Select it" moves the selector to the nearest combination
    page.click("#use-nearest")
    assert not state(page)["missing"]
    assert errors(browser) == []
    # the page's own style applies (its hash is in the policy)
    radius = page.evaluate("getComputedStyle(document.querySelector('.selector')).borderRadius")
    assert radius == "8px"
    shots(page, "crafted", tmp_path)


def _agree(k: tuple[str, ...], key: tuple[str, ...]) -> tuple[bool, ...]:
    """On which axes `k` agrees with `key`, the most important first: platform,
    accelerator, torch, Python."""
    return (k[3] == key[3], k[1] == key[1], k[0] == key[0], k[2] == key[2])


def _suffix(key: tuple[str, ...]) -> str:
    torch, acc, py, plat = key
    return f"-torch-{torch}-{acc}-cp{py.replace('.', '')}-{plat}"


@needs_browser
def test_copy_button_puts_the_command_on_the_clipboard(
    browser: Browser, test_site: tuple[Path, str]
) -> None:
    _, url = test_site
    browser.grant_clipboard(url.rsplit("/", 1)[0])
    page = browser.new_page()
    page.navigate(f"{url}/")
    for axis, value in zip(AXES, ("2.13.0", "cpu", "3.11", "linux_x86_64"), strict=True):
        choose(page, axis, value)
    choose(page, "installer", "uv")
    page.evaluate("navigator.clipboard.writeText('before')", await_promise=True)
    page.click("#copy")
    command = state(page)["command"]
    assert command.startswith("uv pip install bt-scatter --find-links ")
    assert page.evaluate("navigator.clipboard.readText()", await_promise=True) == command
    assert page.evaluate("document.getElementById('copy').textContent") == "Copied"
    # a link to a combination's anchor opens the page with it selected
    page = browser.new_page()
    page.navigate(f"{url}/#bt-scatter-torch-2.12.1-cu126-cp311-linux_x86_64")
    assert state(page)["checked"] == {
        "project": "bt-scatter",
        "torch": "2.12.1",
        "accelerator": "cu126",
        "python": "3.11",
        "platform": "linux_x86_64",
        "installer": "pip",
    }


@needs_browser
def test_without_javascript_the_page_lists_the_same_commands(
    browser: Browser, test_site: tuple[Path, str]
) -> None:
    site, url = test_site
    want = implied(site, url)
    page = browser.new_page(scripts=False)
    page.navigate(f"{url}/")
    root = page.send("DOM.getDocument", {"depth": -1})["root"]["nodeId"]
    listed = read_page(page.send("DOM.getOuterHTML", {"nodeId": root})["outerHTML"]).listed
    assert {_suffix(k): v for k, v in want.items()} == {
        "-" + a.split("-", 2)[2]: v for a, v in listed.items()
    }

    def box(selector: str) -> bool:
        node = page.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
        try:
            page.send("DOM.getBoxModel", {"nodeId": node})
        except CDPError:
            return False
        return True

    assert not box("#selector") and box("#nojs")  # no selector without its script
    # a combination's anchor leads to its row: the browser scrolls it into view
    anchor = sorted(listed)[-1]
    page = browser.new_page(scripts=False)
    page.navigate(f"{url}/#{anchor}")
    root = page.send("DOM.getDocument", {"depth": -1})["root"]["nodeId"]
    node = page.send("DOM.querySelector", {"nodeId": root, "selector": f'[id="{anchor}"]'})
    quad = page.send("DOM.getBoxModel", {"nodeId": node["nodeId"]})["model"]["content"]
    height = page.send("Page.getLayoutMetrics")["cssVisualViewport"]["clientHeight"]
    assert -1 <= quad[1] < height, (quad, height)  # scrolled into the viewport


PAGES = sorted((REPO / "tests" / "corpus" / "pages").glob("*.json"))
# the cases whose payload the front page shows (the others are attributes of other pages)
SHOWN = {"gpu-markup", "driver-quotes", "torch-template", "gpu-markdown"}


@needs_browser
@pytest.mark.parametrize("case", PAGES, ids=[p.stem for p in PAGES])
def test_hostile_site_runs_nothing_it_carries(
    case: Path, browser: Browser, served: tuple[Path, str]
) -> None:
    root, url = served
    site = root / "hostile" / case.stem
    site.mkdir(parents=True)
    shutil.copy(case, site / "index.json")
    manifest = read_manifest(site)
    for rel, data in render_site(
        manifest.wheels, IndexSettings(), load_knowledge(), runs=manifest.smoke
    ).items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    page = browser.new_page()
    browser.events.clear()
    for path in ("", "torch-2.13.0+cpu.html"):
        page.navigate(f"{url}/hostile/{case.stem}/{path}")
        assert page.evaluate("typeof window.pwned") == "undefined"
    assert not [e for e in browser.events if e.get("method") == "Page.javascriptDialogOpening"]
    page.navigate(f"{url}/hostile/{case.stem}/")
    assert page.evaluate("document.getElementById('selector').hidden") is False
    slug = case.stem.split("-", 1)[1]
    if slug in SHOWN:
        from_case = json.loads(case.read_text(encoding="utf-8"))["smoke"][0]
        shown = from_case["gpu"] if "gpu" in slug else from_case.get("driver") or ""
        if slug == "torch-template":
            shown = from_case["torch"]
        assert shown in page.evaluate("document.getElementById('map').textContent")


# -- the example, installed with the selector's command -------------------------------------


def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", **kwargs.pop("env", {})}
    return subprocess.run(
        argv, text=True, capture_output=True, check=False, timeout=TIMEOUT, env=env, **kwargs
    )


@pytest.fixture(scope="module")
def example_site(
    served: tuple[Path, str],
    example_wheelhouse: Path,
    torch213: TorchEnv,
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, str, Path]:
    """The example's CPU wheel with a real smoke report, a crafted CUDA wheel with a crafted
    one (H100), indexed with the repository's matrix (plus Python 3.9, which torch 2.13
    does not support) and torch from a PyTorch-style index served beside the site.
    Relative links: the page fills in the address it is served from."""
    root, url = served
    tmp = tmp_path_factory.mktemp("example")
    wheels = sorted(example_wheelhouse.glob("*.whl"))
    assert wheels, "buildtools build made no wheel"
    # torch as PyTorch's CPU index serves it: a PEP 503 page with the torch wheel pip finds
    torch_dir = root / "pytorch" / "cpu" / "torch"
    torch_dir.mkdir(parents=True)
    got = run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(torch_dir),
            "torch==2.13.0",
        ]
    )
    assert got.returncode == 0, got.stdout + got.stderr
    (torch_wheel,) = torch_dir.glob("torch-*.whl")
    (torch_dir / "index.html").write_text(
        f'<!DOCTYPE html><html><body><a href="{torch_wheel.name.replace("+", "%2B")}">'
        f"{torch_wheel.name}</a></body></html>\n"
    )
    (root / "pytorch" / "cpu" / "index.html").write_text('<a href="torch/">torch</a>\n')
    # the real smoke test of the CPU wheel, on this machine (no GPU)
    report = tmp / "cpu-smoke"
    smoked = buildtools(
        "smoke",
        str(example_wheelhouse),
        "--accelerator",
        "cpu",
        "--torch-python",
        str(torch213.python),
        "--out",
        str(report),
    )
    assert smoked.returncode == 0, smoked.stdout + smoked.stderr
    # a CUDA wheel and its report: crafted (no GPU here), for the page only
    cuda = crafted(tmp, "2.11.0", "cu130", "cp312-cp312-manylinux_2_28_x86_64")
    cuda_report = tmp / "cuda-smoke.json"
    cuda_report.write_text(
        json.dumps(
            {
                "schema": "torch-buildtools/smoke-report/v1",
                "runner": {
                    "accelerator": "cuda",
                    "gpu": "NVIDIA H100 80GB HBM3",
                    "driver": "580.159.04",
                    "torch": "2.11.0+cu130",
                    "python": "3.12.3",
                    "date": "2026-11-25T12:00:00+00:00",
                    "host": "gpu-runner",
                },
                "results": [
                    {
                        "wheel": cuda.name,
                        "sha256": _sha256(cuda),
                        "status": "passed",
                        "cell": "torch2.11.0-cu130-cp312",
                    }
                ],
            }
        )
    )
    text = (REPO / "matrix.yaml").read_text()
    text = text.replace("path: examples/scatter", f"path: {REPO / 'examples' / 'scatter'}")
    text = text.replace(
        'python: ["3.10", "3.11", "3.12", "3.13"]',
        'python: ["3.9", "3.10", "3.11", "3.12", "3.13"]',
    )
    text = text.replace(
        "torch_index: https://download.pytorch.org/whl/cpu", f"torch_index: {url}/pytorch/cpu"
    )
    assert f"{url}/pytorch/cpu" in text and '"3.9"' in text
    matrix = tmp / "matrix.yaml"
    matrix.write_text(text)
    summary = tmp / "summary.md"
    site = root / "whl"
    proc = buildtools(
        "index",
        *map(str, wheels),
        str(cuda),
        "--site",
        str(site),
        "--matrix",
        str(matrix),
        "--base-url",
        "",
        "--require-smoke",
        str(report / "report.json"),
        "--require-smoke",
        str(cuda_report),
        "--summary",
        str(summary),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "published 2 new wheel(s)" in proc.stdout, proc.stdout
    return site, f"{url}/whl", summary


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@needs_browser
@pytest.mark.skipif(
    HOST != "3.11",
    reason="the example's CPU cell here is cp311 (torch 2.13.0's local wheel is for 3.11)",
)
@pytest.mark.parametrize("installer", ["pip", "uv", "uv-project"])
def test_the_selectors_command_installs_the_example(
    installer: str, browser: Browser, example_site: tuple[Path, str, Path], tmp_path: Path
) -> None:
    _, url, _ = example_site
    page = browser.new_page()
    page.navigate(f"{url}/")
    pick = "pip" if installer == "pip" else "uv"
    for axis, value in zip(
        (*AXES, "installer"), ("2.13.0", "cpu", "3.11", "linux_x86_64", pick), strict=True
    ):
        choose(page, axis, value)
    got = state(page)
    assert not got["missing"], got
    command = got["command"]
    page_url = f"{url}/torch-2.13.0+cpu.html"
    torch_url = url.rsplit("/", 1)[0] + "/pytorch/cpu"
    assert command == (
        f"pip install bt-scatter -f {page_url} --extra-index-url {torch_url}"
        if installer == "pip"
        else f"uv pip install bt-scatter --find-links {page_url} --extra-index-url {torch_url}"
    )
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    assert uv, "uv is a dependency of torch-buildtools"
    env = {"UV_CACHE_DIR": str(tmp_path / "uv-cache")}
    if installer == "uv-project":
        # the other form: a uv project's pyproject.toml and the `uv add` its first line says
        snippet = page.evaluate("document.getElementById('alt-code').textContent")
        assert f'url = "{url}/torch-2.13.0+cpu/"' in snippet, snippet
        project = tmp_path / "project"
        project.mkdir()
        made = run(
            [uv, "init", "--bare", "--name", "demo", "--python", sys.executable],
            cwd=project,
            env=env,
        )
        assert made.returncode == 0, made.stdout + made.stderr
        with (project / "pyproject.toml").open("a") as fh:
            fh.write("\n" + snippet + "\n")
        add = shlex.split(snippet.splitlines()[0].split("then: ", 1)[1])
        assert add == ["uv", "add", "bt-scatter", "torch"]
        done = run([uv, *add[1:], "--python", sys.executable], cwd=project, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        python = project / ".venv" / "bin" / "python"
    else:
        venv = tmp_path / "venv"
        made = run([sys.executable, "-m", "venv", str(venv)])
        assert made.returncode == 0, made.stderr
        python = venv / "bin" / "python"
        words = shlex.split(command)
        if installer == "pip":
            argv = [str(python), "-m", *words]
        else:
            argv = [uv, *words[1:]]
            env["VIRTUAL_ENV"] = str(venv)
        done = run(argv, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
    smoke = run([str(python), str(REPO / "examples" / "scatter" / "smoke.py")], cwd="/")
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    code = "import json, importlib.metadata as m; print(json.dumps([m.version('bt-scatter'), m.version('torch')]))"
    listed = run([str(python), "-c", code])
    assert json.loads(listed.stdout) == ["0.1.0+pt213cpu", "2.13.0+cpu"], listed.stderr


@needs_browser
def test_the_example_map_shows_every_kind_of_cell(
    browser: Browser, example_site: tuple[Path, str, Path], tmp_path: Path
) -> None:
    _, url, summary = example_site
    page = browser.new_page()
    page.navigate(f"{url}/")
    cells = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('#map table')].flatMap((t, ti) => {"
        " const heads = [...t.querySelectorAll('thead th')].map(h => h.textContent);"
        " return [...t.querySelectorAll('tbody tr')].flatMap(tr => {"
        "  const th = [...tr.querySelectorAll('th')].map(h => h.textContent);"
        "  return [...tr.querySelectorAll('td')].map((td, i) => ["
        "   [ti, th[0], th[1], heads[i + 2]].join(' '), [td.className, td.textContent, td.title]]); }); }))"
    )
    cpu = cells[f"0 2.13.0 CPU Python {HOST}"]
    assert cpu[0] == "s-smoked" and cpu[1].startswith("tested") and "CPU" in cpu[2]
    cuda = cells["0 2.11.0 CUDA 13.0 Python 3.12"]
    assert (
        cuda[0] == "s-smoked" and "NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-25" in cuda[2]
    )
    assert cells["0 2.13.0 CPU Python 3.12"][0] == "s-missing"
    impossible = cells["0 2.13.0 CPU Python 3.9"]
    assert impossible[0] == "s-impossible"
    assert impossible[2] == "torch 2.13.0 has no Python 3.9 wheels (it supports 3.10–3.14)"
    assert cells["0 2.11.0 ROCm 7.2 Python 3.12"][0] == "s-excluded"
    text = summary.read_text()
    assert "| 2.11.0 | CUDA 13.0 | impossible [1] | **missing** | **missing** | ✅ tested [" in text
    shots(page, "example", tmp_path, keep=True)
