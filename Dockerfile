# One image for every ToyMB process: `toymb serve` (a node), `toymb journal run` (Spark), `toymb consume`.
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless curl procps \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY broker broker
COPY driver driver
COPY journal_spark journal_spark
COPY bench bench
RUN pip install --no-cache-dir '.[journal]'

RUN useradd --system --uid 10001 --home /data toymb && mkdir -p /data && chown toymb /data
USER toymb
ENV TOYMB_DATA_DIR=/data \
    PYSPARK_PYTHON=/usr/local/bin/python \
    PYSPARK_DRIVER_PYTHON=/usr/local/bin/python
VOLUME /data
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --retries=5 \
  CMD curl -fs "http://127.0.0.1:${TOYMB_PORT:-8080}/health" || exit 1
ENTRYPOINT ["toymb"]
CMD ["serve"]
