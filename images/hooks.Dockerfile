# miles-hooks: the image of the chart's Helm-hook Jobs (preflight, prepare-data, wait-ready, verify,
# submit, status, helm test) and the source of the pure-Python package that the convert Job's init
# container copies into the miles image.
#
# Build from the repository root:
#   docker build -f images/hooks.Dockerfile -t miles-hooks:0.1.0 .
#
# Runs as UID/GID 10001 and works with a read-only root file system: nothing writes outside /tmp
# (an emptyDir in the chart); byte code is compiled at build time.

# The Python base, pinned by digest (the multi-arch index of python:3.12-slim as published in August 2026;
# no image registry is reachable from the machines this repo is developed on, so re-resolve it with
# `docker buildx imagetools inspect python:3.12-slim` when bumping). Override with --build-arg PYTHON_IMAGE.
ARG PYTHON_IMAGE=python:3.12-slim@sha256:78387bc3881b8273120a12ebe6c1ab22b018ccc2c9adf565ae1ac9b536e184ea

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
# every file checked against its sha256 in the lock (make lock); nothing else is fetched, the
# package's own build included (setuptools comes from the lock)
COPY images/hooks-requirements.lock ./
RUN python -m venv /opt/miles-hooks/venv \
 && /opt/miles-hooks/venv/bin/pip install --no-cache-dir --require-hashes --no-deps -r hooks-requirements.lock
COPY hooks/ ./hooks/
RUN /opt/miles-hooks/venv/bin/pip install --no-cache-dir --no-deps --no-index --no-build-isolation ./hooks \
 && mkdir -p /opt/miles-hooks/pkg \
 && cp -r hooks/src/miles_hooks /opt/miles-hooks/pkg/miles_hooks \
 && find /opt/miles-hooks/pkg -name '__pycache__' -type d -prune -exec rm -rf {} + \
 && /opt/miles-hooks/venv/bin/python -m compileall -q /opt/miles-hooks/venv

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="miles-hooks" \
      org.opencontainers.image.description="Helm-hook steps for miles RL post-training on Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 miles \
 && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin miles
COPY --from=build /opt/miles-hooks /opt/miles-hooks
ENV PATH=/opt/miles-hooks/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    HF_HOME=/tmp/huggingface \
    RAY_USAGE_STATS_ENABLED=0
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["miles-hooks"]
CMD ["--help"]
