"""Workflow generation: the GitHub Actions workflows of matrix.yaml, written as text (pure).

`buildtools ci github [--check]` (`generate`) writes `release-tag.yml` + `release.yml`
(`release`), `pull-request.yml` (`pull_request`), `self-hosted.yml` (`self_hosted`),
`caches.yml` (`caches`) and `backfill.yml` (`backfill`), rendered together by `render`
from the shared job builders (`core_jobs`: plan, build, smoke; `input_jobs`: images and
downloads; `publish_jobs`: publish, pages, PyPI, status), their `run:` scripts (`scripts`,
`publish_scripts`), what every job shares (`common`), the YAML writer (`yamlwriter`), the
audit findings kept by design (`audit`) and the one check that no string from matrix.yaml
becomes an expression (`expressions`).

It shares with the in-workflow steps (`cisteps`) only the vocabulary both read
(`ciplan`); the two never import each other (an import-linter contract).
"""
