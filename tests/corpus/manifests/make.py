"""Regenerate the hostile manifests (`index.json` of a published site) of this directory:
`python tests/corpus/manifests/make.py`. Each is a real manifest with one thing changed;
the corpus test serves each as a published site (restore-site over HTTP on loopback) and
merges a wheel into it (`buildtools index`); expect.tsv says what each must end in."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NAME = "bt_scatter-0.1.0+pt213cpu-cp312-cp312-manylinux_2_28_x86_64.whl"
ENTRY: dict[str, Any] = {
    "accelerator": "cpu",
    "filename": NAME,
    "fingerprint": None,
    "metadata_sha256": "a" * 64,
    "name": "bt-scatter",
    "requires_python": None,
    "sha256": "b" * 64,
    "size": 1234,
    "torch": "2.13.0+cpu",
    "torch_specifier": "==2.13.*",
    "torch_versions": ["2.13.0"],
    "url": None,
    "version": "0.1.0+pt213cpu",
}
RUN: dict[str, Any] = {
    "sha256": "b" * 64,
    "cell": "torch2.13.0-cpu-cp312",
    "runner": "cuda",
    "gpu": "NVIDIA H100 80GB HBM3",
    "driver": "580.159.04",
    "date": "2026-11-25",
    "python": "3.12.3",
    "torch": "2.13.0+cpu",
}
GOOD: dict[str, Any] = {
    "schema": "torch-buildtools/index/v1",
    "wheels": [ENTRY],
    "generated": ["index.html", "index.json"],
}


def _with(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(GOOD)
    data["wheels"][0].update(changes)
    return data


CASES: dict[str, Any] = {
    "filename-traversal": _with(filename="../../escaped-1.0-py3-none-any.whl"),
    "filename-absolute": _with(filename="/tmp/escaped-1.0-py3-none-any.whl"),
    "filename-subdirectory": _with(filename="sub/escaped-1.0-py3-none-any.whl"),
    "filename-not-a-wheel": _with(filename="index.html"),
    "filename-backslash": _with(filename="..\\..\\escaped-1.0-py3-none-any.whl"),
    "sha256-traversal": _with(sha256="../../../etc/passwd"),
    "sha256-short": _with(sha256="abc"),
    "url-javascript": _with(url="javascript:alert(document.cookie)"),
    "url-quote": _with(url='https://x.io/a.whl"><script>alert(1)</script>'),
    "size-negative": _with(size=-1),
    "size-string": _with(size="big"),
    "missing-sha256": {**GOOD, "wheels": [{k: v for k, v in ENTRY.items() if k != "sha256"}]},
    "wheels-not-a-list": {**GOOD, "wheels": {"a": 1}},
    "wrong-schema": {**GOOD, "schema": "someone-else/v9"},
    "generated-traversal": {**GOOD, "generated": ["../../../etc/passwd"]},
    "top-level-list": [GOOD],
    # the values pages and their file names are made of
    "name-not-the-file": _with(name="../../evil"),
    "accelerator-markup": _with(accelerator='cpu"><script>alert(1)</script>'),
    "torch-path": _with(torch_versions=["../../../tmp/x"]),
    "version-markup": _with(version="0.1.0<script>"),
    # the smoke runs the coverage map shows
    "smoke-not-a-list": {**GOOD, "smoke": {"gpu": "x"}},
    "smoke-gpu-number": {**GOOD, "smoke": [{**RUN, "gpu": 80}]},
    "smoke-runner-unknown": {**GOOD, "smoke": [{**RUN, "runner": "tpu"}]},
    "smoke-gpu-control": {**GOOD, "smoke": [{**RUN, "gpu": "H100\x1b[2J"}]},
}

# the second pass (issue 24): what a site can list that pip tells apart from nothing
SPELLED = "Bt_Scatter-0.1.0+pt213cpu-cp312-cp312-manylinux_2_28_x86_64.whl"
SECOND: dict[str, Any] = {
    "duplicate-entry": {**GOOD, "wheels": [ENTRY, ENTRY, ENTRY]},
    "two-spellings-of-one-wheel": {
        **GOOD,
        "wheels": [ENTRY, {**ENTRY, "filename": SPELLED, "name": "Bt_Scatter", "sha256": "c" * 64}],
    },
    "name-cyrillic": _with(name="bt-s\u0441atter"),
    "name-of-another-project": _with(name="someone-else"),
}
# the third pass (issue 44): numbers int() cannot read, names no file system holds, and
# smoke runs whose text a terminal or a reader would act on
LONG_TAG = "manylinux_2_28_" + "x" * 300
THIRD: dict[str, Any] = {
    "torch-versions-5000-digits": _with(torch_versions=["2." + "9" * 5000]),
    "filename-longer-than-a-file-name": _with(
        filename=f"bt_scatter-0.1.0+pt213cpu-cp312-cp312-{LONG_TAG}.whl"
    ),
    "smoke-gpu-c1-control": {**GOOD, "smoke": [{**RUN, "gpu": "H100\x9b2J"}]},
    "smoke-gpu-bidi-override": {**GOOD, "smoke": [{**RUN, "gpu": "H100\u202egnp.exe"}]},
    "smoke-date-month-99": {**GOOD, "smoke": [{**RUN, "date": "2026-99-25"}]},
    "smoke-date-full-width-digits": {**GOOD, "smoke": [{**RUN, "date": "２０２６-11-25"}]},
}
TEXTS = {  # documents json.dumps cannot write
    "nested-deep": '{"schema": "torch-buildtools/index/v1", "wheels": '
    + "[" * 100_000
    + "]" * 100_000
    + "}\n",
    "size-nan": json.dumps(GOOD).replace('"size": 1234', '"size": NaN'),
}


def main() -> None:
    for n, (slug, data) in enumerate(CASES.items(), 1):
        (HERE / f"{n:03d}-{slug}.json").write_text(json.dumps(data, indent=1) + "\n")
    (HERE / f"{len(CASES) + 1:03d}-not-json.json").write_text('{"schema": "torch-buildtools/\n')
    n = len(CASES) + 2
    for slug, data in SECOND.items():
        (HERE / f"{n:03d}-{slug}.json").write_text(json.dumps(data, indent=1) + "\n")
        n += 1
    for slug, text in TEXTS.items():
        (HERE / f"{n:03d}-{slug}.json").write_text(text)
        n += 1
    for slug, data in THIRD.items():
        (HERE / f"{n:03d}-{slug}.json").write_text(json.dumps(data, indent=1) + "\n")
        n += 1


if __name__ == "__main__":
    main()
