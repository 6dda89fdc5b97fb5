"""Which wheels `buildtools smoke` tests: from directories, files and find-links pages.

Each wheel's build record says what it needs (torch build, accelerator, Python); a wheel
for another accelerator than the runner's is skipped with the reason, CPU wheels run
anywhere.
"""

from __future__ import annotations

__all__ = [
    "TORCH_LIB",
    "SmokeTarget",
    "WheelSource",
    "bundled_torch_libs",
    "choose_cell",
    "collect_wheels",
    "detect_accelerator",
    "import_names",
    "parse_find_links",
    "plan_targets",
    "window_targets",
]

import dataclasses
import html.parser
import platform
import re
import sys
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import parse_wheel_filename
from packaging.version import InvalidVersion

from ..errors import ConfigError
from ..files import check_wheel_filename, copy_atomic, read_regular, sha256_file
from ..http import DownloadError, HttpClient
from ..model import Accelerator, BuildRecord, BuildRecordError, Cell
from ..wheel.archive import DEFAULT_LIMITS, open_wheel
from ..wheel.meta import BUILD_RECORD_BYTES, BUILD_RECORD_NAME, parse_build_record
from .smoke_report import SmokeResult, SmokeStatus

# libc10.so, libtorch_cpu.so, and auditwheel's grafted copies: libc10-52d951ec.so
TORCH_LIB = re.compile(r"^(lib(?:c10|torch)[A-Za-z0-9_]*?)(?:-[0-9a-f]{8})?\.so(?:\.[0-9]+)*$")


# --------------------------------------------------------------------------- wheels


@dataclass(frozen=True, kw_only=True)
class WheelSource:
    """A wheel to test: a local file (downloaded when it came from a page) and its origin."""

    path: Path
    origin: str  # the local path, or the URL the page links to
    find_links: str | None = None  # the page pip installs from, when given
    expected_sha256: str | None = None  # from the link's #sha256= fragment

    @property
    def name(self) -> str:
        return self.path.name


class _LinkParser(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.links.append(href)


def parse_find_links(page: str, base: str) -> list[tuple[str, str | None]]:
    """(absolute URL or path, sha256 or None) of every wheel linked from a find-links page.

    A page served over http(s) may link only http(s) URLs: its `file:///…` link would make
    this machine copy a local file of the page's choosing (ConfigError naming the link).
    """
    remote = urllib.parse.urlparse(base).scheme in ("http", "https")
    parser = _LinkParser()
    parser.feed(page)
    out: list[tuple[str, str | None]] = []
    for href in parser.links:
        url, _, fragment = href.partition("#")
        if not urllib.parse.unquote(url).endswith(".whl"):
            continue
        digest = None
        if fragment.startswith("sha256="):
            digest = fragment.removeprefix("sha256=").lower()
        absolute = urllib.parse.urljoin(base, url)
        scheme = urllib.parse.urlparse(absolute).scheme
        if scheme not in (("http", "https") if remote else ("http", "https", "file")):
            raise ConfigError(
                f"find-links page {base} links {absolute!r}: a page served over http(s) may "
                "link only http(s) URLs, a local page also file: URLs; fix the page"
            )
        out.append((absolute, digest))
    return out


_PAGE_BYTES = 64 << 20  # a find-links page (a 10,000-wheel page is ~5 MB)


def _read_page(page: str, http: HttpClient) -> tuple[str, str]:
    """The page's text and the base its links resolve against."""
    if urllib.parse.urlparse(page).scheme in ("http", "https"):
        data = http.get(page, max_bytes=_PAGE_BYTES)
        return data.decode("utf-8", errors="replace"), page
    if urllib.parse.urlparse(page).scheme == "file":
        page = urllib.request.url2pathname(urllib.parse.urlparse(page).path)
    path = Path(page).resolve()
    return read_regular(path, max_bytes=_PAGE_BYTES).decode("utf-8"), path.as_uri()


def _fetch(url: str, dest_dir: Path, http: HttpClient) -> Path:
    name = urllib.parse.unquote(Path(urllib.parse.urlparse(url).path).name)
    dest = dest_dir / check_wheel_filename(name, what="a linked wheel")  # no '../' in it
    if urllib.parse.urlparse(url).scheme == "file":
        copy_atomic(Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path)), dest)
        return dest
    http.download(url, dest, max_bytes=DEFAULT_LIMITS.total_bytes)
    return dest


def collect_wheels(
    paths: Sequence[Path], find_links: Sequence[str], *, download_dir: Path
) -> list[WheelSource]:
    """Wheels named on the command line, in directories, and on find-links pages."""
    out: list[WheelSource] = []
    http = HttpClient()
    for path in paths:
        if path.is_dir():
            out += [WheelSource(path=p, origin=str(p)) for p in sorted(path.glob("*.whl"))]
        elif path.is_file() and path.name.endswith(".whl"):
            out.append(WheelSource(path=path, origin=str(path)))
        else:
            raise ConfigError(f"{path}: neither a wheel file nor a directory of wheels")
    for page in find_links:
        try:
            text, base = _read_page(page, http)
        except (OSError, ValueError, DownloadError) as exc:
            raise ConfigError(f"find-links page {page}: cannot read it: {exc}") from exc
        for url, digest in parse_find_links(text, base):
            download_dir.mkdir(parents=True, exist_ok=True)
            try:
                local = _fetch(url, download_dir, http)
            except (OSError, ValueError, DownloadError) as exc:
                raise ConfigError(f"{url} (linked from {page}): cannot download: {exc}") from exc
            out.append(WheelSource(path=local, origin=url, find_links=page, expected_sha256=digest))
    return out


def bundled_torch_libs(names: Sequence[str]) -> tuple[str, ...]:
    """Archive members that are a copy of libc10/libtorch (what a naive repair grafts)."""
    return tuple(sorted(n for n in names if TORCH_LIB.match(n.rsplit("/", 1)[-1])))


def import_names(names: Sequence[str], top_level: str | None = None) -> tuple[str, ...]:
    """The top-level modules a wheel installs (top_level.txt when present)."""
    if top_level is not None:
        found = [line.strip() for line in top_level.splitlines() if line.strip()]
        if found:
            return tuple(dict.fromkeys(found))
    out: list[str] = []
    for name in names:
        top, sep, _ = name.partition("/")
        if top.endswith((".dist-info", ".data", ".libs")):
            continue
        module = top if sep else top.split(".", 1)[0]
        if not sep and not top.endswith((".py", ".so")):
            continue
        if module.isidentifier():
            out.append(module)
    return tuple(dict.fromkeys(sorted(out)))


# --------------------------------------------------------------------------- planning


@dataclass(frozen=True, kw_only=True)
class SmokeTarget:
    """A wheel with what its build record says it needs."""

    source: WheelSource
    sha256: str
    accelerator: Accelerator
    torch: str  # the torch it was built against, as torch.__version__ ("2.11.0+cu130")
    cuda: str | None
    hip: str | None
    python: str  # "3.12"
    cell: str  # the covered cell this runner tests (see `choose_cell`)
    modules: tuple[str, ...]
    bundled: tuple[str, ...]
    covers: tuple[str, ...] = ()  # every cell the build record says the wheel serves
    recorded: bool = True  # False: no build record, tested as-is with the runner's torch
    # another release of a stable wheel's ABI window (`window_targets`), not its own torch
    window: bool = False
    # the wheel's members: which files an import of its packages must come from (empty:
    # unknown, not checked)
    members: tuple[str, ...] = ()


def detect_accelerator(
    *, exists: Callable[[str], bool], which: Callable[[str], str | None]
) -> Literal["cpu", "cuda", "rocm"]:
    """cuda where an NVIDIA driver is visible, rocm where /dev/kfd exists, else cpu."""
    if which("nvidia-smi") or exists("/dev/nvidiactl"):
        return "cuda"
    if exists("/dev/kfd"):
        return "rocm"
    return "cpu"


def _wheel_python(wheel: str, record: BuildRecord) -> str:
    if record.python:
        return ".".join(record.python.split(".")[:2])
    _, _, _, tags = parse_wheel_filename(wheel)
    for tag in sorted(str(t.interpreter) for t in tags):
        m = re.fullmatch(r"cp(\d)(\d+)", tag)
        if m:
            return f"{m[1]}.{m[2]}"
    return f"{sys.version_info.major}.{sys.version_info.minor}"


_CELL_ID = re.compile(
    r"^torch(?P<torch>[^-]+)(?P<current>-current)?-(?P<accel>[^-]+)-cp(?P<major>\d)(?P<minor>\d+)"
    r"(?:-(?P<platform>.+))?$"
)


@dataclass(frozen=True, kw_only=True)
class _CoveredCell:
    id: str
    torch: str  # public version of the cell's torch ("2.11.0")
    python: str  # "3.12"


def _parse_cell(cell_id: str) -> _CoveredCell | None:
    m = _CELL_ID.match(cell_id)
    if m is None:
        return None
    return _CoveredCell(id=cell_id, torch=_public(m["torch"]), python=f"{m['major']}.{m['minor']}")


def _public(version: str) -> str:
    return version.split("+", 1)[0]


def choose_cell(
    cells: Sequence[str],
    *,
    built_torch: str,
    built_python: str,
    runner_python: str | None = None,
    runner_torch: str | None = None,
) -> tuple[str, str, str] | None:
    """(cell id, torch public version, Python) of the covered cell to test on this runner.

    An abi3 wheel serves several Pythons and a stable-ABI wheel several torch releases, so
    the build's own cell is only one of those it promises: the runner's Python and torch pick
    among them, the build's cell is the fallback. None when no cell id is readable.
    """
    parsed = [c for c in (_parse_cell(cell) for cell in cells) if c is not None]
    if not parsed:
        return None
    built = _public(built_torch)
    runner = _public(runner_torch) if runner_torch else None
    preferences: tuple[Callable[[_CoveredCell], bool], ...] = (
        lambda c: c.python == runner_python and c.torch == runner,
        lambda c: c.python == runner_python and c.torch == built,
        lambda c: c.python == runner_python,
        lambda c: c.python == built_python and c.torch == built,
        lambda c: c.python == built_python,
    )
    for wanted in preferences:
        found = next((c for c in parsed if wanted(c)), None)
        if found is not None:
            return found.id, found.torch, found.python
    first = parsed[0]
    return first.id, first.torch, first.python


def _cell_torch(built_torch: str, cell_torch: str) -> str:
    """The torch.__version__ a cell needs: the build's own, or the cell's with its local label."""
    if _public(built_torch) == cell_torch:
        return built_torch
    _, plus, local = built_torch.partition("+")
    return f"{cell_torch}+{local}" if plus else cell_torch


def _wheel_machines(wheel: str) -> set[str]:
    """The architectures a wheel's platform tags name ('aarch64'); empty for 'any'."""
    try:
        _, _, _, tags = parse_wheel_filename(wheel)
    except ValueError:
        return set()
    out = set()
    for tag in tags:
        m = re.fullmatch(r"(?:many|musl)?linux(?:_\d+_\d+|\d+)?_(?P<arch>.+)", tag.platform)
        if m:
            out.add(m["arch"])
    return out


def plan_targets(
    sources: Sequence[WheelSource],
    *,
    runner_accelerator: str,
    runner_python: str | None = None,
    runner_torch: str | None = None,
    runner_machine: str | None = None,
    unrecorded: Accelerator | None = None,
    window_torches: Sequence[str] = (),
) -> list[SmokeTarget | SmokeResult]:
    """A target per wheel to test on this runner, or a `skipped` result saying why not.

    `runner_python` ("3.12") and `runner_torch` ("2.11.0+cu130") choose which of the cells
    a wheel covers is tested (`choose_cell`). A wheel for another architecture than the
    runner's (`runner_machine`, default this machine's) is skipped: an aarch64 wheel is
    tested on an aarch64 runner, or here under emulation (`docker run --platform
    linux/arm64`), and is never published untested.

    A wheel without a build record (not built by buildtools: a third-party wheel from PyPI)
    is skipped, unless `unrecorded` names the accelerator of the runner's torch: then it is
    tested against that torch (`runner_torch`, `runner_python`) as it is, cell `unrecorded`.

    `window_torches`: releases beyond its record that a stable-ABI wheel is tested on too (a
    torch released after the wheel, inside its `Requires-Dist` range: release day's
    smoke-only run); one outside the range is a skipped result saying so.
    """
    machine = runner_machine or platform.machine()
    out: list[SmokeTarget | SmokeResult] = []
    for src in sources:
        try:
            digest = sha256_file(src.path)
        except OSError as exc:
            raise ConfigError(f"{src.path}: cannot read it ({exc.strerror})") from None

        def skipped(
            why: str, cell: str | None = None, digest: str = digest, src: WheelSource = src
        ) -> SmokeResult:
            return SmokeResult(
                wheel=src.name,
                sha256=digest,
                cell=cell,
                status=SmokeStatus.SKIPPED,
                diagnosis=why,
                source=src.origin,
            )

        if src.expected_sha256 and src.expected_sha256 != digest:
            out.append(
                SmokeResult(
                    wheel=src.name,
                    sha256=digest,
                    cell=None,
                    status=SmokeStatus.FAILED,
                    stage="env",
                    diagnosis=f"sha256 mismatch: the page says {src.expected_sha256}",
                    source=src.origin,
                )
            )
            continue
        try:  # one bounded read of the wheel (wheel.archive): names, top_level, record
            with open_wheel(src.path) as archive:
                names = archive.names
                raw = archive.read_optional(
                    f"{archive.dist_info}/{BUILD_RECORD_NAME}", max_bytes=BUILD_RECORD_BYTES
                )
                top = next((n for n in names if n.endswith(".dist-info/top_level.txt")), None)
                top_text = archive.read(top).decode("utf-8", "replace") if top else None
            record = None if raw is None else parse_build_record(raw)
        except BuildRecordError as exc:
            out.append(skipped(f"build record: {'; '.join(exc.problems)}"))
            continue
        except (OSError, ValueError) as exc:
            out.append(skipped(f"not a readable wheel: {exc}"))
            continue
        if record is None and unrecorded is not None and runner_torch and runner_python:
            out.append(
                SmokeTarget(
                    source=src,
                    sha256=digest,
                    accelerator=unrecorded,
                    torch=runner_torch,
                    cuda=None,
                    hip=None,
                    python=runner_python,
                    cell="unrecorded",
                    modules=import_names(names, top_text),
                    bundled=bundled_torch_libs(names),
                    recorded=False,
                    members=tuple(names),
                )
            )
            continue
        if record is None:
            out.append(
                skipped(
                    "no build record (.dist-info/buildtools.json): not built by buildtools "
                    "(--unrecorded tests it against the runner's torch)"
                )
            )
            continue
        accel = record.accelerator
        python = _wheel_python(src.name, record)
        torch = record.torch
        covers = record.cells
        chosen = choose_cell(
            covers,
            built_torch=torch,
            built_python=python,
            runner_python=runner_python,
            runner_torch=runner_torch,
        )
        if chosen is not None:
            cell, cell_torch, python = chosen
            torch = _cell_torch(torch, cell_torch)
        elif covers:
            cell = covers[0]
        else:
            public = torch.split("+", maxsplit=1)[0]
            cell = Cell(torch=public, accelerator=accel.name, python=python).id
        machines = _wheel_machines(src.name)
        if machines and machine not in machines:
            built = "/".join(sorted(machines))
            out.append(
                skipped(
                    f"built for {built}; this runner is {machine} (test it on a {built} "
                    f"runner: runners.linux_{built}.smoke, or under emulation)",
                    cell,
                )
            )
            continue
        if accel.kind not in ("cpu", runner_accelerator):
            out.append(
                skipped(
                    f"built for {accel.name}; this runner is {runner_accelerator} "
                    "(CPU wheels run anywhere, device wheels on their own GPU runners)",
                    cell,
                )
            )
            continue
        target = SmokeTarget(
            source=src,
            sha256=digest,
            accelerator=accel,
            torch=torch,
            cuda=record.cuda,
            hip=record.hip,
            python=python,
            cell=cell,
            modules=import_names(names, top_text),
            bundled=bundled_torch_libs(names),
            covers=covers,
            members=tuple(names),
        )
        out.append(target)
        if record.abi == "stable" and runner_accelerator == "cpu":
            window = window_targets(target, record.torch)
            out += window
            seen = {_public(t.torch) for t in (target, *window)}
            for extra in window_torches:
                if _public(extra) in seen:
                    continue
                seen.add(_public(extra))
                out.append(_beyond_record(target, record.torch_requirement, extra, skipped))
    return out


def _beyond_record(
    target: SmokeTarget,
    requirement: str | None,
    torch: str,
    skipped: Callable[[str, str | None], SmokeResult],
) -> SmokeTarget | SmokeResult:
    """A stable wheel's target on a release its record does not name (see `plan_targets`)."""
    cell = Cell(torch=_public(torch), accelerator=target.accelerator.name, python=target.python).id
    try:
        spec = Requirement(requirement).specifier if requirement else None
        admitted = spec is not None and spec.contains(_public(torch), prereleases=True)
    except (InvalidRequirement, InvalidVersion):
        admitted = False
    if not admitted:
        return skipped(
            f"--window-torch {torch}: outside the wheel's range ({requirement or 'none'}): "
            "a release outside it needs a new build, not a smoke run",
            cell,
        )
    return dataclasses.replace(
        target, cell=cell, torch=_cell_torch(target.torch, _public(torch)), window=True
    )


def window_targets(target: SmokeTarget, built_torch: str) -> list[SmokeTarget]:
    """The ABI window proven, not assumed: a stable-ABI wheel on a CPU runner is tested on
    every other torch release it claims (its covered cells of the target's Python), each in
    a fresh environment with that torch; `target` is the first of them."""
    extra: list[SmokeTarget] = []
    seen = {_public(target.torch)}
    for cell in target.covers:
        parsed = _parse_cell(cell)
        if parsed is None or parsed.python != target.python or parsed.torch in seen:
            continue
        seen.add(parsed.torch)
        torch = _cell_torch(built_torch, parsed.torch)
        extra.append(dataclasses.replace(target, cell=parsed.id, torch=torch, window=True))
    return extra
