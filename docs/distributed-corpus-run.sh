#!/usr/bin/env bash
# xformers' selective build, cold, through 1 x 1 and 2 x 1 loopback clusters on an offline GPU
# runner with a 2-CPU client (docs/distributed.md, "A corpus extension, 1 × 1 against 2 × 1").
#
#   SDIST   xformers-0.0.33.post2.tar.gz, the corpus' pinned sdist (`python bench/corpus.py
#           xformers DIR` fetches and checks it where an index is reachable)
#   MATRIX  the matrix.yaml `buildtools init` writes for it, with
#           build_env: {XFORMERS_DISABLE_FLASH_ATTN: "1", XFORMERS_SELECTIVE_BUILD: "attention/cuda"}
#
# A runner whose CC/CXX name wrapper scripts (the lent GPU machine's do) runs it as
#
#     env -u CC -u CXX -u CUDAHOSTCXX SDIST=… MATRIX=… OUT=/tmp/out bash docs/distributed-corpus-run.sh
#
# and the rest is docs/distributed-proof-run.sh (CARRY holds what the machine cannot download).
# CLIENT_CPUS: the client's CPUs (default 2, this project's CI machine; 4 is a GitHub-hosted
# runner's), e.g. CLIENT_CPUS=4 or CLIENT_CPUS="4 2" (one pair of builds each).
set -u
: "${SDIST:?the xformers sdist}" "${MATRIX:?its matrix.yaml}"
WORKSRC=${WORKSRC:-/tmp/xf}
rm -rf "$WORKSRC" && mkdir -p "$WORKSRC" && tar xzf "$SDIST" -C "$WORKSRC" || exit 1
SRC=$(find "$WORKSRC" -mindepth 1 -maxdepth 1 -type d | head -1)
cp "$MATRIX" "$SRC/matrix.yaml" || exit 1
# MORE: further options of bench/distributed.py (default --no-here; e.g. "--budget default")
BENCH_ARGS="--project $SRC --servers ${SERVERS:-1,2} ${MORE:---no-here}" \
    CLIENT_CPUS=${CLIENT_CPUS:-2} OUT=${OUT:-/tmp/out} bash "$(dirname "$0")/distributed-proof-run.sh"
