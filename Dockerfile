# syntax=docker/dockerfile:1
# The hami image: `hami scheduler` (extender, webhook, metrics), `hami certs` (the chart's certificate Jobs)
# and the other hami commands.
#
#   docker build -t hami:0.1.0 .
#
# Stage 1 builds wheels for hami and its pinned dependencies and installs them into a virtual environment.
# Stage 2 is the same slim Python with only that environment: no compiler, no pip, no build backend, no
# sources; it runs as an unprivileged user (10001, the chart's runAsUser).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY src ./src
RUN python -m pip wheel --constraint constraints.txt --wheel-dir /wheels . \
 && python -m venv /opt/hami \
 && /opt/hami/bin/pip install --no-index --find-links /wheels --constraint constraints.txt hami \
 && /opt/hami/bin/pip uninstall --yes pip \
 && find /opt/hami -name '__pycache__' -prune -exec rm -rf {} + \
 && /opt/hami/bin/python -m compileall -q /opt/hami/lib

FROM ${PYTHON_IMAGE}
RUN python -m pip uninstall --yes pip setuptools wheel 2>/dev/null || true \
 && groupadd --system --gid 10001 hami \
 && useradd --system --uid 10001 --gid hami --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin hami
COPY --from=build /opt/hami /opt/hami
ENV PATH=/opt/hami/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
ENTRYPOINT ["hami"]
CMD ["--help"]
