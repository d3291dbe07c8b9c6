# One image for every ToyMB process: `toymb serve` (a node), `toymb journal run` (Spark), `toymb consume`.
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless curl procps maven \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY broker broker
COPY driver driver
COPY journal_spark journal_spark
COPY bench bench
RUN pip install --no-cache-dir '.[journal]'
# The journal table's Delta Lake jars, fetched from Maven Central at build time by the project's script.
COPY services/lib.sh services/spark.sh services/
RUN TOYMB_SERVICES_DIR=/opt/toymb bash services/spark.sh install && rm -rf /root/.m2
ENV TOYMB_DELTA_JARS=/opt/toymb/spark/delta-4.4.0

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
