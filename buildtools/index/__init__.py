"""`buildtools index`: publish wheels as a static pip index, incrementally and atomically.

From wheels (and the build records inside them) this writes a static site:

```
SITE/
  index.html                     landing page: every torch × accelerator, install commands
  index.json                     manifest: every published wheel with its sha256
  torch-2.11.0+cu130.html        find-links page (`pip install X -f …/torch-2.11.0+cu130.html`)
  torch-2.11.0+cu130/            PEP 503 index of the same wheels (`--index-url …`)
    index.html, <project>/index.html
  simple/                        PEP 503 index of every wheel
    index.html, <project>/index.html
  wheels/<wheel>, wheels/<wheel>.metadata    (PEP 658; unless wheels live elsewhere)
```

The steps are separate: `wheels.read_wheel` (I/O), `gate.SmokeGate` (which wheels may go
out), `merge.merge` (pure: the published set plus the new wheels, or an
`ImmutableWheelError`), `site.render_site` (pure: path → bytes, with `variants` deciding
which pages list a wheel and `pages` writing the HTML) and `publish.publish` (the only
writer: stages the new site next to the old one and swaps it in, see `transaction`).
Everything is decided before anything is written, so a conflict leaves the site untouched.

Published wheels are immutable: merging reads `index.json` (`manifest`, never the HTML),
keeps every wheel it lists, and refuses a wheel whose file name is published with another
sha256.
"""
