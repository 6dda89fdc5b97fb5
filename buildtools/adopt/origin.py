"""Where the running buildtools was installed from, for the noxfile `init` writes.

pip records a distribution's origin in its `direct_url.json` (PEP 610) unless it came from
a package index: a local directory (a checkout, editable or not), an archive (a wheel or
sdist, local or by URL), or a VCS URL with the commit it resolved to. `init` writes that
origin into the noxfile, so its sessions install the same buildtools here; before the
package is published to an index, a version alone would not install anywhere.
"""

from __future__ import annotations

__all__ = ["install_source", "running_source"]

from importlib import metadata
from typing import Any
from urllib.parse import unquote, urlsplit

from .. import __version__
from ..jsonfields import decode_json

DIST = "torch-buildtools"


def install_source(direct_url: Any, version: str) -> str:
    """What BUILDTOOLS_INSTALL would say for this origin (pure): a path for a local directory
    or file, a pip URL (`git+https://…@<commit>`, `https://…whl`) for a remote one, else
    `version` (an index install). An origin it cannot read is an index install."""
    if not isinstance(direct_url, dict) or not isinstance(direct_url.get("url"), str):
        return version
    url: str = direct_url["url"]
    parts = urlsplit(url)
    vcs = direct_url.get("vcs_info")
    if isinstance(vcs, dict) and isinstance(vcs.get("vcs"), str):
        rev = vcs.get("commit_id") or vcs.get("requested_revision")
        out = f"{vcs['vcs']}+{url}" + (f"@{rev}" if isinstance(rev, str) and rev else "")
    elif parts.scheme == "file":
        out = unquote(parts.path)
    else:
        out = url
    subdirectory = direct_url.get("subdirectory")
    if isinstance(subdirectory, str) and subdirectory and parts.scheme != "file":
        out += f"#subdirectory={subdirectory}"
    return out


def running_source() -> str:
    """The origin of the installed torch-buildtools (its version when it has no record).

    The first of its distributions on sys.path that has a record: a source tree's own
    `*.egg-info` (on sys.path with `python -m` from the checkout) has none.
    """
    texts = (d.read_text("direct_url.json") for d in metadata.distributions(name=DIST))
    text = next((t for t in texts if t), None)
    try:
        data = decode_json(text, what="direct_url.json") if text else None
    except ValueError:
        data = None
    return install_source(data, __version__)
