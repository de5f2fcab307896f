# syntax=docker/dockerfile:1
# The hami image: `hami scheduler` (extender, webhook, metrics), `hami device-plugin`, `hami monitor`,
# `hami certs` (the chart's certificate Jobs) and the other hami commands.
#
#   docker build -t hami:0.1.0 --build-arg HAMI_BUILD_COMMIT=$(git rev-parse HEAD) .
#
# (`hami version` prints that commit and the build date; without the argument the commit reads "unknown".)
#
# `make image` (scripts/build-image) builds the same image without Docker: Debian bookworm's python3.11, the
# virtual environment /opt/hami with hami and its pinned dependencies, user 10001:10001, entrypoint `hami`, the
# same environment. tests/unit/test_build_image_script.py checks that this file and the script agree.
#
# Stage 1 builds wheels for hami (its build backend, src/hami_build.py, generates the gRPC stubs and records the
# commit and build date) and its pinned dependencies and installs them into a virtual environment. Stage 2 is Debian with only python3.11 (and the C++ runtime grpcio needs) and that
# environment: no compiler, no pip, no build backend, no sources; it runs as an unprivileged user (10001, the
# chart's runAsUser).

ARG DEBIAN_IMAGE=debian:bookworm-slim

FROM ${DEBIAN_IMAGE} AS build
ARG HAMI_BUILD_COMMIT=unknown
ARG SOURCE_DATE_EPOCH
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY src ./src
RUN python3.11 -m venv /tools \
 && find src -name _generated -type d -prune -exec rm -rf {} + \
 && rm -f src/hami/_build.py
RUN /tools/bin/pip wheel --constraint constraints.txt --wheel-dir /wheels . \
 && python3.11 -m venv /opt/hami \
 && /opt/hami/bin/pip install --no-index --find-links /wheels --constraint constraints.txt hami \
 && /opt/hami/bin/pip uninstall --yes pip setuptools \
 && find /opt/hami -name '__pycache__' -prune -exec rm -rf {} + \
 && /opt/hami/bin/python -m compileall -q --invalidation-mode unchecked-hash /opt/hami/lib

FROM ${DEBIAN_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 libstdc++6 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 hami \
 && useradd --system --uid 10001 --gid hami --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin hami
COPY --from=build /opt/hami /opt/hami
ENV PATH=/opt/hami/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
ENTRYPOINT ["hami"]
CMD ["--help"]
