"""The signing job's `run:` scripts: bash and the runner image's own tools, nothing else.

The release's `publish` job holds `id-token: write` (it signs), `attestations: write` and
`contents: write` (the release's assets). It checks nothing out and installs nothing: its
scripts use bash, coreutils (`sha256sum`, `find`), `curl`, `jq` and `gh` of the
GitHub-hosted runner image, beside actions pinned by commit. What it publishes is the
bundle the unprivileged `prepare` job made (`cisteps.bundle`), bound by the digest that
job output; every script here first refuses anything it cannot read as the bundle's fixed
layout (paths, digests, sizes by pattern), since the bundle was made by a job that runs
the tag's code.

- `bundle_check_script`: the manifest's sha256 is the prepare job's output; every file
  matches it, none is missing or added, nothing is a link; the attestation subjects are
  exactly the bundle's wheels and record; every wheel is one a build leg of this run
  reported (`wheels_<leg>` outputs, which only that leg could set).
- `attestation_check_script`: `gh attestation verify` of every subject, and on what it
  verified (jq): release.yml of this repository at the default branch, a hosted runner,
  this run and its commit, the predicate naming the vetted tag and its commit.
- `release_script`: the GitHub REST API through curl: the tag's draft release, each wheel
  uploaded (the same bytes kept, other bytes under a published name refused with exit 11,
  an unfinished upload replaced), every wheel the new index links under this tag's
  downloads checked against the release's assets, the record `index.json` replaced, the
  release published. Before any of it: the newest published record must still be the one
  the prepare job merged into (another release recording meanwhile would otherwise drop
  its wheels from the index).
"""

from __future__ import annotations

__all__ = ["BUNDLE_DIR", "attestation_check_script", "bundle_check_script", "release_script"]

from ..ciplan import layout
from .scripts import bash

BUNDLE_DIR = "release-bundle"
# a path inside the bundle, a wheel's file name, a manifest line: nothing a shell, a URL
# or a sha256sum line could read as anything else
_PATH = "[A-Za-z0-9._+-]+(/[A-Za-z0-9._+-]+)*"
_WHEEL = "[A-Za-z0-9._+-]+[.]whl"
_RECORD = r"site(/[A-Za-z0-9._+-]+)*/index[.]json"


def _fail(message: str, code: int = 1, *, depth: int = 1) -> list[str]:
    """`echo ::error::…; exit code`, indented `depth` levels (inside an `if`)."""
    pad = "  " * depth
    return [f'{pad}echo "::error::{message}"', f"{pad}exit {code}"]


def bundle_check_script(built: list[str]) -> str:
    """Check the downloaded bundle against the digest the prepare job output (BT_BUNDLE),
    and its wheels against what the build legs reported (the variables `built`)."""
    return bash(
        f"cd {BUNDLE_DIR}",
        "if ! [[ ${BT_BUNDLE:-} =~ ^[0-9a-f]{64}$ ]]; then",
        *_fail("the prepare job output no bundle digest: nothing is published"),
        "fi",
        "got=\"$(sha256sum MANIFEST.sha256 | cut -d' ' -f1)\"",
        'if [ "$got" != "$BT_BUNDLE" ]; then',
        *_fail(
            "the release bundle's manifest has sha256 $got, but the prepare job made "
            "$BT_BUNDLE: something else wrote the artifact; nothing is published"
        ),
        "fi",
        f"if grep -v -x -E '[0-9a-f]{{64}}  {_PATH}' MANIFEST.sha256 | grep -q . ||"
        " grep -q -E '(^|/)[.][.]?(/|$)' MANIFEST.sha256; then",
        *_fail("the release bundle's manifest holds a line that is not a sha256 and a path"),
        "fi",
        "if find . ! -type f ! -type d | grep -q .; then",
        *_fail("the release bundle holds something that is not a regular file"),
        "fi",
        "sha256sum --check --strict --quiet MANIFEST.sha256",
        'listed="$(cut -c67- MANIFEST.sha256 | LC_ALL=C sort)"',
        "present=\"$(find . -type f ! -path ./MANIFEST.sha256 -printf '%P\\n' | LC_ALL=C sort)\"",
        'if [ "$listed" != "$present" ]; then',
        '  diff <(echo "$listed") <(echo "$present") || true',
        *_fail("the release bundle holds files its manifest does not list: nothing is published"),
        "fi",
        'record="$(cat record)"',
        f'if ! [[ $record =~ ^{_RECORD}$ ]] || [ ! -f "$record" ]; then',
        *_fail("the release bundle names no record (site/…/index.json)"),
        "fi",
        "# the attestation subjects: exactly the wheels and the record, by sha256",
        "mapfile -t wheels < <(find wheels -type f | LC_ALL=C sort)",
        'want="$(for f in "${wheels[@]}" "$record"; do echo "$(sha256sum < "$f" | cut -d\' \' -f1)  '
        '${f##*/}"; done | LC_ALL=C sort)"',
        'if [ "$want" != "$(LC_ALL=C sort attest/subjects.sha256)" ]; then',
        *_fail(
            "attest/subjects.sha256 is not the bundle's wheels and record: nothing is published"
        ),
        "fi",
        "# every wheel: one a build leg of this run reported (its job output), by sha256",
        'reported=""',
        f"for var in {' '.join(built)}; do",
        '  outputs="${!var:-}"',
        '  reported+="$(jq -r \'to_entries[] | select(.key | startswith("wheels_")) | '
        '.value | split(" ")[] | select(length > 0)\' <<< "${outputs:-"{}"}")"$\'\\n\'',
        "done",
        'for f in "${wheels[@]}"; do',
        '  name="${f##*/}"',
        f"  if ! [[ $name =~ ^{_WHEEL}$ ]]; then",
        *_fail("$name: not a wheel's file name", depth=2),
        "  fi",
        '  sha="$(sha256sum < "$f" | cut -d\' \' -f1)"',
        '  if ! grep -q -x -F "$sha:$name" <<< "$reported"; then',
        '    echo "::error::$name (sha256 $sha): no build leg of this run reported these bytes;'
        ' nothing is published"',
        "    exit 1",
        "  fi",
        "done",
        'echo "release bundle $BT_BUNDLE: ${#wheels[@]} wheel(s) and $record, as the '
        'prepare job made them and the builds reported them"',
    )


def attestation_check_script() -> str:
    """Every subject's release statement: signed by release.yml at the default branch on a
    hosted runner in this run, naming the vetted tag (BT_TAG) and its commit (BT_SHA)."""
    signer = f"$GITHUB_REPOSITORY/{layout.RELEASE_WORKFLOW}"
    check = (
        "any(.[]; .verificationResult as $v | ($v.signature.certificate // {}) as $c"
        " | ($v.statement.predicate // {}) as $p"
        " | ($c.buildSignerURI // $c.subjectAlternativeName) == $signer"
        ' and $c.sourceRepositoryRef == $ref and $c.runnerEnvironment == "github-hosted"'
        " and $c.sourceRepositoryDigest == $run_sha"
        ' and (($c.runInvocationURI // "") | contains("/actions/runs/" + $run + "/"))'
        " and $v.statement.predicateType == $type and $p.repository == $repo"
        " and $p.tag == $tag and $p.commit == $commit and $p.run_id == $run)"
    )
    return bash(
        f"cd {BUNDLE_DIR}",
        "mapfile -t files < <(find wheels -maxdepth 1 -type f -name '*.whl' | LC_ALL=C sort)",
        'files+=("$(cat record)")',
        "# gh prints the verified statements as one JSON list (log lines may precede it)",
        'verified="$(mktemp)"',
        'for file in "${files[@]}"; do',
        f'  if ! gh attestation verify "$file" --repo "$GITHUB_REPOSITORY" --signer-workflow "{signer}" \\',
        f"      --predicate-type {layout.RELEASE_PREDICATE} --deny-self-hosted-runners"
        ' --format json > "$verified"; then',
        *_fail("$file: gh attestation verify found no release statement of this run", 10, depth=2),
        "  fi",
        '  if ! jq -e --arg signer "$GITHUB_SERVER_URL/'
        + signer
        + '@refs/heads/$BT_DEFAULT_BRANCH" \\',
        '      --arg ref "refs/heads/$BT_DEFAULT_BRANCH" --arg run_sha "$GITHUB_SHA" \\',
        '      --arg run "$GITHUB_RUN_ID" --arg repo "$GITHUB_REPOSITORY" --arg tag "$BT_TAG" \\',
        f'      --arg commit "$BT_SHA" --arg type {layout.RELEASE_PREDICATE} \\',
        f"      '{check}' <(sed -n '/^\\[/,$p' \"$verified\") > /dev/null; then",
        *_fail(
            "$file: its attestation is not this run's release statement for $BT_TAG at "
            "$BT_SHA (release.yml at $BT_DEFAULT_BRANCH, a hosted runner): nothing is published",
            10,
            depth=2,
        ),
        "  fi",
        '  echo "verified $file: release.yml@$BT_DEFAULT_BRANCH, run $GITHUB_RUN_ID, '
        'tag $BT_TAG at $BT_SHA"',
        "done",
    )


# the REST calls, through curl with the job's token (never on the command line); `pages`
# reads every page of a list (100 at a time)
_API = (
    'auth="$(mktemp)"',
    "trap 'rm -f \"$auth\"' EXIT",
    'printf \'header = "Authorization: Bearer %s"\\n\' "$GH_TOKEN" > "$auth"',
    "api() {  # api METHOD URL [curl options]: the answer on stdout; an HTTP error fails",
    '  curl --silent --show-error --fail --location --config "$auth" \\',
    '    -H \'X-GitHub-Api-Version: 2022-11-28\' -X "$1" "$2" "${@:3}"',
    "}",
    "pages() {  # pages URL: every entry of a paginated list, as one JSON array",
    "  local page=1 all='[]' batch",
    "  while :; do",
    '    batch="$(api GET "$1?per_page=100&page=$page" --retry 3 -H \'Accept: application/vnd.github+json\')"',
    '    all="$(jq -c -s \'add\' <<< "$all$batch")"',
    '    [ "$(jq length <<< "$batch")" -ge 100 ] || break',
    "    page=$((page + 1))",
    "  done",
    '  echo "$all"',
    "}",
    'repo="$GITHUB_API_URL/repos/$GITHUB_REPOSITORY"',
)


def release_script() -> str:
    """Upload the bundle's wheels to the tag's draft release, check every link of the new
    index against the release, record index.json, publish the release (BT_TAG, GH_TOKEN)."""
    newest = (
        "[.[] | select(.draft == false) | .tag_name as $tag | .assets[]?"
        ' | select(.name == "index.json" and .state == "uploaded")'
        ' | {id: (.id | tostring), $tag, t: (.updated_at // .created_at // "")}]'
        ' | (max_by(.t) // {id: "none", tag: "-"}) | "\\(.id) \\(.tag)"'
    )
    return bash(
        f"cd {BUNDLE_DIR}",
        *_API,
        'releases="$(pages "$repo/releases")"',
        "# the record the prepare job merged into must still be the newest (or this tag's own)",
        'base="$(cat base-record)"',
        f'read -r newest newest_tag <<< "$(jq -r \'{newest}\' <<< "$releases")"',
        'if [ "$newest" != "$base" ] && [ "$newest_tag" != "$BT_TAG" ]; then',
        *_fail(
            "the release $newest_tag recorded index.json (asset $newest) after this run's "
            "prepare job merged into $base: re-run the prepare job (this job follows it), "
            "so that the index keeps both releases' wheels"
        ),
        "fi",
        'release="$(jq -c --arg tag "$BT_TAG" \'map(select(.tag_name == $tag)) | first // empty\''
        ' <<< "$releases")"',
        'if [ -z "$release" ]; then',
        '  body="$(jq -c -n --arg tag "$BT_TAG" '
        "'{tag_name: $tag, name: $tag, draft: true, prerelease: false}')\"",
        '  release="$(api POST "$repo/releases" -H \'Content-Type: application/json\' '
        '--data "$body")"',
        '  echo "created the draft release $BT_TAG"',
        "fi",
        'id="$(jq -r .id <<< "$release")"',
        'upload="$(jq -r \'.upload_url | sub("[{].*$"; "")\' <<< "$release")"',
        "if ! [[ $id =~ ^[0-9]+$ ]]; then",
        *_fail("the release of $BT_TAG has no id"),
        "fi",
        'assets="$(pages "$repo/releases/$id/assets")"',
        "uploaded=0 present=0",
        "mapfile -t wheels < <(find wheels -maxdepth 1 -type f -name '*.whl' -printf '%P\\n' "
        "| LC_ALL=C sort)",
        'for name in "${wheels[@]}"; do',
        '  file="wheels/$name"',
        '  sha="$(sha256sum < "$file" | cut -d\' \' -f1)"',
        '  size="$(stat -c %s "$file")"',
        '  asset="$(jq -c --arg n "$name" \'map(select(.name == $n)) | first // empty\''
        ' <<< "$assets")"',
        '  if [ -n "$asset" ] && [ "$(jq -r .state <<< "$asset")" = uploaded ]; then',
        '    digest="$(jq -r \'.digest // ""\' <<< "$asset")"',
        '    if [ -z "$digest" ]; then  # an older asset: GitHub gives no digest, read its bytes',
        '      digest="sha256:$(api GET "$(jq -r .url <<< "$asset")" --retry 3 '
        "-H 'Accept: application/octet-stream' | sha256sum | cut -d' ' -f1)\"",
        "    fi",
        '    if [ "$(jq -r .size <<< "$asset")" != "$size" ] || [ "$digest" != "sha256:$sha" ];'
        " then",
        '      echo "::error::$name: the release $BT_TAG has an asset of this name with other'
        " bytes (the new file has sha256 $sha); published files never change: bump the version,"
        ' or delete the asset by hand if it was never installable"',
        "      exit 11",
        "    fi",
        '    echo "present    $name (same bytes)"',
        "    present=$((present + 1))",
        "    continue",
        "  fi",
        '  if [ -n "$asset" ]; then',
        '    api DELETE "$repo/releases/assets/$(jq -r .id <<< "$asset")" > /dev/null',
        '    echo "replaced   $name (an unfinished upload of an earlier attempt)"',
        "  fi",
        "  api POST \"$upload?name=${name//+/%2B}\" -H 'Content-Type: application/octet-stream' \\",
        "    -H 'Accept: application/vnd.github+json' --data-binary \"@$file\" > /dev/null",
        '  echo "uploaded   $name"',
        "  uploaded=$((uploaded + 1))",
        "done",
        'echo "release $BT_TAG: $uploaded uploaded, $present already there"',
        "# every wheel the new index links under this tag's downloads: an uploaded asset with",
        "# the bytes the index records",
        'assets="$(pages "$repo/releases/$id/assets")"',
        "missing=0",
        "while read -r sha size name; do",
        f"  if ! [[ $sha =~ ^[0-9a-f]{{64}}$ && $size =~ ^[0-9]+$ && $name =~ ^{_WHEEL}$ ]]; then",
        *_fail("linked.tsv: a line is not a sha256, a size and a wheel", depth=2),
        "  fi",
        '  found="$(jq -r --arg n "$name" --arg d "sha256:$sha" --argjson s "$size" '
        '\'map(select(.name == $n and .state == "uploaded" and .size == $s '
        'and (.digest // $d) == $d)) | length\' <<< "$assets")"',
        '  if [ "$found" = 0 ]; then',
        '    echo "::error::$name: the new index links it, but the release $BT_TAG holds no'
        ' uploaded asset with those bytes"',
        "    missing=1",
        "  fi",
        "done < linked.tsv",
        'if [ "$missing" != 0 ]; then',
        *_fail("nothing is recorded or deployed"),
        "fi",
        "# the record: the one asset that is replaced",
        'for old in $(jq -r \'map(select(.name == "index.json")) | .[].id\' <<< "$assets"); do',
        '  api DELETE "$repo/releases/assets/$old" > /dev/null',
        "done",
        'record="$(cat record)"',
        "api POST \"$upload?name=index.json\" -H 'Content-Type: application/octet-stream' \\",
        "  -H 'Accept: application/vnd.github+json' --data-binary \"@$record\" > /dev/null",
        'echo "recorded $record as index.json of the release $BT_TAG"',
        'if [ "$(jq -r .draft <<< "$release")" != false ]; then',
        "  api PATCH \"$repo/releases/$id\" -H 'Content-Type: application/json' "
        "--data '{\"draft\": false}' > /dev/null",
        '  echo "release $BT_TAG: published"',
        "else",
        '  echo "release $BT_TAG: published already"',
        "fi",
    )
