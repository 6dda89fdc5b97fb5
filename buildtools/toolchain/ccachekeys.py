"""How ccache keys a compile, the same for a local build and a container build.

- `CCACHE_NOHASHDIR`: with -g (Python's CFLAGS have it) ccache hashes the working
  directory; another checkout must hit (only the debug info's comp_dir differs).
- `CCACHE_COMPILERCHECK=content`: ccache's default identifies the compiler by its mtime and
  size. A container build installs nvcc (NVIDIA's PyPI toolkit) afresh in every container,
  so its mtime is new each time and every nvcc unit missed: an xformers rebuild after a
  one-`.cu` edit hit 11 of 31 units, all of them `c++` (the image's gcc keeps its mtime). The
  compiler's content is the same in every container and differs between toolkits, so it is
  the right key; hashing the driver binary costs milliseconds a compile.

sccache needs neither: it hashes the compiler's content, and its base directories stand
for the working directory (`SCCACHE_BASEDIRS`).
"""

from __future__ import annotations

__all__ = ["CCACHE_KEYING"]

CCACHE_KEYING: tuple[tuple[str, str], ...] = (
    ("CCACHE_NOHASHDIR", "1"),
    ("CCACHE_COMPILERCHECK", "content"),
)
