# emq-worker: the worker daemon in a container.
#
#   docker build -t emq-worker .
#   docker network create emq
#   docker run -d --name valkey --network emq valkey/valkey:8
#   docker run --init --network emq -e EMQ_REDIS_URL=redis://valkey:6379/0 emq-worker
#   docker stop -t 40 <container>
#
# Stage 1 builds the project's wheel and installs it (with the `fast` extra: orjson, uvloop; and
# `dashboard`: Starlette, uvicorn, Jinja2, which the worker never imports) into a virtualenv;
# stage 2 is a clean slim Python with only that virtualenv, run as a non-root user.
# Both stages use the same base image, so the venv's interpreter link resolves in the final one.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY emq_worker ./emq_worker
RUN python -m venv /opt/emq-worker \
    && python -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
    && /opt/emq-worker/bin/pip install --no-cache-dir "$(ls /wheels/emq_worker-*.whl)[fast,dashboard]"

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="emq-worker" \
      org.opencontainers.image.description="asyncio worker daemon for EchoMQ queues on Valkey/Redis" \
      org.opencontainers.image.licenses="MIT"
RUN groupadd --system --gid 10001 emq \
    && useradd --system --no-log-init --uid 10001 --gid emq --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin emq
COPY --from=builder /opt/emq-worker /opt/emq-worker
# EMQ_GRACE_MS: on SIGTERM, running jobs get this long to finish; then their outcomes are written
# (up to 10 s) and what is still held is handed back (up to 5 s). The container runtime must
# wait longer than all of that, 35 s, before its SIGKILL: `docker stop -t 40`, or
# `stop_grace_period: 40s` in compose (Docker's default is only 10 s).
# The app and its queues are variables, not CMD flags: a flag beats its variable, so an
# `-e EMQ_APP=...` (or an image built FROM this one setting ENV EMQ_APP) would be ignored.
ENV PATH="/opt/emq-worker/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    EMQ_GRACE_MS=20000 \
    EMQ_HTTP=127.0.0.1:9464 \
    EMQ_APP=emq_worker.examples.orders:app \
    EMQ_QUEUES=orders
# --app-dir defaults to the working directory: an image built FROM this one copies its package
# here (COPY myapp/ /srv/emq-worker/myapp/) and sets ENV EMQ_APP=myapp.tasks:app.
WORKDIR /srv/emq-worker
USER 10001:10001
# EMQ_HTTP serves /metrics, /healthz and /readyz on the container's loopback (publish it with
# EMQ_HTTP=0.0.0.0:9464 to scrape from outside). The check asks the worker whether its beat ran
# within the last three beats; a draining worker stays healthy.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s \
    CMD ["emq-worker", "health", "--http", "127.0.0.1:9464"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["emq-worker"]
CMD ["run"]
