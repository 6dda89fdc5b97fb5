"""The steps a generated workflow runs inside GitHub Actions (the `buildtools ci` verbs).

The tag checked against the project's version (`tagcheck`), the published site restored
from the authenticated record (`restore`, `record`, `provenance`), the smoke-passed wheels
selected and uploaded as release assets (`assets`, through `github_api`), the builder images
and downloads of the cache jobs (`cache_jobs`) and the run's verdict (`status`).

It shares with workflow generation (`workflows`) only `ciplan`; the two never import each
other (an import-linter contract).
"""
