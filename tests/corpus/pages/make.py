"""Regenerate the hostile-but-valid sites of this directory: `python tests/corpus/pages/make.py`.

Each case is the `index.json` of a published site that `read_manifest` accepts (the values
have the types and shapes it checks) but whose free-text fields carry markup, script,
quotes, markdown and line separators: the Requires-Python and torch pins of a wheel, a
wheel URL elsewhere, and what its smoke runs say of the runner (GPU, driver, cell, Python,
torch). The front page, the coverage markdown and the selector must show each as text
(tests/unit/test_index_front.py, tests/integration/test_front_page.py); PAYLOADS lists
what must never become markup.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NAME = "bt_scatter-0.1.0+pt213cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
SHA = "b" * 64
ENTRY: dict[str, Any] = {
    "accelerator": "cpu",
    "filename": NAME,
    "metadata_sha256": "a" * 64,
    "name": "bt-scatter",
    "requires_python": ">=3.10",
    "sha256": SHA,
    "size": 1234,
    "torch": "2.13.0",
    "torch_specifier": "==2.13.*",
    "torch_versions": ["2.13.0"],
    "url": None,
    "version": "0.1.0+pt213cpu",
}
RUN: dict[str, Any] = {
    "sha256": SHA,
    "cell": "torch2.13.0-cpu-cp311",
    "runner": "cuda",
    "gpu": "NVIDIA H100 80GB HBM3",
    "driver": "580.159.04",
    "date": "2026-11-25",
    "python": "3.11.7",
    "torch": "2.13.0+cpu",
}
GOOD: dict[str, Any] = {
    "schema": "torch-buildtools/index/v1",
    "wheels": [ENTRY],
    "smoke": [RUN],
    "generated": ["index.html", "index.json"],
}
# what each case plants; none of it may turn into an element, an attribute or a link
PAYLOADS = {
    "requires-python": '>=3.10"><script>window.pwned=1</script>',
    "torch-specifier": "==2.13.*</script><script>window.pwned=2</script><!--",
    "gpu-markup": "<img src=x onerror=window.pwned=3><svg onload=window.pwned=4>",
    "driver-quotes": "580'\"><iframe srcdoc='<script>window.pwned=5</script>'>",
    "cell-comment": "torch2.13.0-cpu-cp311<!--<script>window.pwned=6</script>-->",
    "python-separators": "3.11\u2028\u2029</script>window.pwned=7",
    "torch-template": "{{constructor.constructor('window.pwned=8')()}}",
    "gpu-markdown": "| x | [click](javascript:alert(9)) ![i](https://x.io/i.png) <b>",
    "url-ampersand": "https://x.io/a.whl?a=1&amp;b=<2",
}


def _case(slug: str) -> dict[str, Any]:
    data = copy.deepcopy(GOOD)
    wheel, run = data["wheels"][0], data["smoke"][0]
    payload = PAYLOADS[slug]
    if slug == "requires-python":
        wheel["requires_python"] = payload
    elif slug == "torch-specifier":
        wheel["torch_specifier"] = payload
    elif slug in ("gpu-markup", "gpu-markdown"):
        run["gpu"] = payload
    elif slug == "driver-quotes":
        run["driver"] = payload
    elif slug == "cell-comment":
        run["cell"] = payload
        data["smoke"].append({**RUN, "gpu": "second"})  # so the cell still shows a run
    elif slug == "python-separators":
        # a smoke run's fields refuse what the sanitiser would escape (U+2028 among them):
        # the separators ride on the wheel's Requires-Python, which is shown as text
        wheel["requires_python"] = payload
    elif slug == "torch-template":
        run["torch"] = payload
    elif slug == "url-ampersand":
        # the manifest refuses quotes, spaces and angle brackets in a URL: '&' and '<' as
        # %3C are what remains to escape
        wheel["url"] = "https://x.io/a.whl?a=1&b=%3C2"
    return data


def main() -> None:
    for n, slug in enumerate(PAYLOADS, 1):
        (HERE / f"{n:03d}-{slug}.json").write_text(
            json.dumps(_case(slug), indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )


if __name__ == "__main__":
    main()
