# miles-hooks: the image of the chart's Helm-hook Jobs (preflight, prepare-data, wait-ready, verify,
# submit, status, helm test) and the source of the pure-Python package that the convert Job's init
# container copies into the miles image.
#
# Build from the repository root:
#   docker build -f images/hooks.Dockerfile -t miles-hooks:0.1.0 .
#
# Runs as UID/GID 10001 and works with a read-only root file system: nothing writes outside /tmp
# (an emptyDir in the chart); byte code is compiled at build time.

FROM python:3.12-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY ci/requirements.lock hooks/requirements.txt ./
RUN python -m venv /opt/miles-hooks/venv \
 && /opt/miles-hooks/venv/bin/pip install --no-cache-dir -r requirements.txt -c requirements.lock
COPY hooks/ ./hooks/
RUN /opt/miles-hooks/venv/bin/pip install --no-cache-dir --no-deps ./hooks \
 && mkdir -p /opt/miles-hooks/pkg \
 && cp -r hooks/src/miles_hooks /opt/miles-hooks/pkg/miles_hooks \
 && find /opt/miles-hooks/pkg -name '__pycache__' -type d -prune -exec rm -rf {} + \
 && /opt/miles-hooks/venv/bin/python -m compileall -q /opt/miles-hooks/venv

FROM python:3.12-slim
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
