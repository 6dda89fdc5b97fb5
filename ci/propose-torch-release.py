"""Propose the buildtools/data/torch.yaml row of a torch release the data does not have yet.

    python ci/propose-torch-release.py 2.16.0 >> proposed.yaml

Reads the release from the package index (its PEP 691 page and, by HTTP range requests,
one wheel's METADATA per Linux platform): Pythons, free-threaded Pythons, manylinux tags,
the PyPI wheel's CUDA and cuda-toolkit pin. What the index cannot tell is copied from the
newest known release and the row is marked `confirmed: false` with a note naming those
fields. Then `buildtools knowledge --check-index` confirms what the index can.
The same as `buildtools knowledge --propose VERSION`.
"""

from __future__ import annotations

import sys

from buildtools.cli.main import main

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):
        sys.stderr.write("usage: python ci/propose-torch-release.py VERSION (e.g. 2.16.0)\n")
        sys.exit(2)
    sys.exit(main(["knowledge", "--propose", sys.argv[1]]))
