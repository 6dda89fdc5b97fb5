# Builder image for CUDA jobs: FROM the manylinux builder the knowledge base names
# (buildtools/data/images.yaml), plus only what torch-buildtools' in-container steps need
# (install-tools.sh). The docker backend always passes BASE (the job's image, by digest
# when docker/pins.yaml knows one); the default here is for building by hand:
#   docker build -f docker/cuda.Dockerfile --build-arg BASE=... <context made by buildtools>
ARG BASE=pytorch/manylinux2_28-builder:cuda13.0
FROM ${BASE}
# The compiler is chosen per job inside the container (python -m buildtools.backends.docker.incontainer
# before-build): the image's /usr/local/cuda-X.Y when its nvcc is torch's CUDA version,
# else NVIDIA's PyPI toolkit pinned to torch's own CUDA pin — the same rule as the local
# backend, so an image without CUDA (e.g. a local base) builds CUDA cells too.
COPY tools-requirements.txt install-tools.sh /tmp/buildtools/
COPY wheels/ /tmp/buildtools/wheels/
RUN sh /tmp/buildtools/install-tools.sh && rm -rf /tmp/buildtools
LABEL org.torch-buildtools.accelerator=cuda
