# keelwave server image. Used by compose.yaml; point it at any PostgreSQL or
# TimescaleDB with KEELWAVE_DATABASE_URL.
FROM python:3.12-slim

WORKDIR /src
COPY pyproject.toml README.md ./
COPY keelwave ./keelwave
COPY alembic ./alembic
# The server extra: the base distribution is the SDK alone (see README.md).
RUN pip install --no-cache-dir '.[server]' \
    && useradd --system --create-home --home-dir /data keelwave \
    && rm -rf /src

USER keelwave
WORKDIR /data
ENV KEELWAVE_HOST=0.0.0.0 \
    KEELWAVE_PORT=8080 \
    KEELWAVE_DATA_DIR=/data \
    PYTHONUNBUFFERED=1
EXPOSE 8080
# serve migrates on start; SIGTERM (docker stop) commits buffered data and exits 0.
CMD ["keelwave", "serve"]
