# Builder image for CPU jobs: FROM the manylinux builder the knowledge base names
# (buildtools/data/images.yaml), plus only what torch-buildtools' in-container steps need
# (install-tools.sh). The docker backend always passes BASE (the job's image, by digest
# when docker/pins.yaml knows one); the default here is for building by hand:
#   docker build -f docker/cpu.Dockerfile --build-arg BASE=... <context made by buildtools>
ARG BASE=pytorch/manylinux2_28-builder:cpu
FROM ${BASE}
COPY tools-requirements.txt install-tools.sh /tmp/buildtools/
COPY wheels/ /tmp/buildtools/wheels/
RUN sh /tmp/buildtools/install-tools.sh && rm -rf /tmp/buildtools
LABEL org.torch-buildtools.accelerator=cpu
