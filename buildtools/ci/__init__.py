"""The GitHub Actions release pipeline generated from matrix.yaml.

- `buildtools ci github [--check]` writes (or checks) `.github/workflows/release.yml`,
  `.github/workflows/pull-request.yml` and `.github/actionlint.yaml` (`ci.github`,
  `ci.workflows`: `ci.release` and `ci.pull_request` from the jobs of `ci.jobs`, their
  scripts in `ci.scripts`, runner labels in `ci.runners`; `ci.yamlwriter`, pins in
  `data/actions.yaml` via `ci.pins`);
- `buildtools ci matrix` is the workflows' plan job (`ci.matrix`);
- `buildtools ci restore-site` is how the publish job starts the site (`ci.site`, the record
  authenticated by `ci.record` and `ci.provenance`).

The command line of these verbs is `buildtools.cli.ci`.
"""
