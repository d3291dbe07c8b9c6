# ToyMB's images, from one base: `--target node` (`toymb serve`, no Java) and `--target journal`
# (`toymb journal run`: Spark, Java, the Kafka and JMS bridges).
# BASE is any Debian image: python:3.11-slim (the default, for users with a registry) or the offline
# base `services/docker.sh start` builds with debootstrap (toymb/debian:bookworm), where Python
# comes from Debian. Build with the host's network when the engine runs without iptables:
#   docker build --network host --build-arg BASE=toymb/debian:bookworm --target node -t toymb-node .
ARG BASE=python:3.11-slim

# The runtime every stage shares: a Python 3.11+ and the non-root user.
FROM ${BASE} AS runtime
RUN set -e; if ! command -v python3 >/dev/null; then \
      apt-get update -q && apt-get install -y -q --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*; fi; \
    useradd --system --uid 10001 --user-group --home-dir /data toymb && mkdir -p /data && chown toymb:toymb /data

# The virtualenv, built apart: pip, wheels and caches stay out of the final images. Dependencies
# first, in layers of their own, so a change of code reuses them; every one ships as a wheel (no compiler).
FROM runtime AS deps
RUN set -e; if ! python3 -c 'import ensurepip' 2>/dev/null; then \
      apt-get update -q && apt-get install -y -q --no-install-recommends python3-venv && rm -rf /var/lib/apt/lists/*; fi; \
    python3 -m venv /opt/toymb
COPY pyproject.toml deploy/requirements.py /src/
RUN /opt/toymb/bin/python /src/requirements.py /src/pyproject.toml >/src/requirements.txt \
 && /opt/toymb/bin/pip install -q --no-cache-dir --only-binary=:all: -r /src/requirements.txt
# The project itself is not pip-installed: its packages are copied into /opt/toymb/app in each
# image's last layers, which this .pth file puts on the path, and `toymb` is the script pip would
# write. A change of code then rebuilds those few small layers only; installed by pip, it rebuilt a
# copy of the whole virtualenv (Spark's included) in the journal's image: 84 s against 12 s for
# both images on the 2-core machine.
RUN printf '/opt/toymb/app\n' >"$(/opt/toymb/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/toymb-app.pth" \
 && printf '#!/opt/toymb/bin/python\nimport sys\nfrom broker.cli import main\nsys.exit(main())\n' >/opt/toymb/bin/toymb \
 && chmod 755 /opt/toymb/bin/toymb

# The node's virtualenv as it ships: no pip.
FROM deps AS venv-node
RUN /opt/toymb/bin/pip uninstall -q -y pip setuptools

# The project's packages, compiled: what both images copy last.
FROM runtime AS app
COPY broker /opt/toymb/app/broker
COPY driver /opt/toymb/app/driver
COPY journal_spark /opt/toymb/app/journal_spark
COPY bench /opt/toymb/app/bench
RUN python3 -m compileall -q /opt/toymb/app

# A node: `docker run toymb-node serve --help`. (The classic builder builds every stage before its
# target: the node's come first.)
FROM runtime AS node
COPY --from=venv-node /opt/toymb /opt/toymb
COPY --from=app /opt/toymb/app /opt/toymb/app
ENV PATH=/opt/toymb/bin:$PATH TOYMB_DATA_DIR=/data TOYMB_PORT=8080 PYTHONDONTWRITEBYTECODE=1
USER toymb
WORKDIR /data
VOLUME /data
EXPOSE 8080
HEALTHCHECK --interval=5s --timeout=3s --start-period=30s --retries=6 \
  CMD ["python3", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/health' % os.environ.get('TOYMB_PORT', '8080'), timeout=2)"]
ENTRYPOINT ["toymb"]
CMD ["serve"]

FROM deps AS deps-journal
# pyspark is published as a source archive only: pip builds its (pure Python) wheel.
RUN /opt/toymb/bin/python /src/requirements.py /src/pyproject.toml --no-core journal >/src/journal.txt \
 && /opt/toymb/bin/pip install -q --no-cache-dir --use-pep517 -r /src/journal.txt

FROM deps-journal AS venv-journal
RUN /opt/toymb/bin/pip uninstall -q -y pip setuptools

# The journal table's Delta Lake jars and the stores' JDBC drivers, fetched from Maven Central by
# the project's own script, which also compiles the journal's Java functions against PySpark's jars
# (hence this stage starts from the journal's dependencies);
# Maven and its JDK stay in this stage.
FROM deps-journal AS delta-jars
USER root
RUN apt-get update -q && apt-get install -y -q --no-install-recommends maven openjdk-17-jdk-headless bash \
 && rm -rf /var/lib/apt/lists/*
COPY services/lib.sh services/spark.sh /src/services/
COPY journal_spark/java /src/journal_spark/java
RUN TOYMB_SERVICES_DIR=/opt/toymb-services TOYMB_PYTHON=/opt/toymb/bin/python bash /src/services/spark.sh install \
 && mv /opt/toymb-services/spark/delta-* /opt/delta-jars

# The journal: Java for Spark, the same virtualenv with the journal extras.
FROM runtime AS journal
USER root
RUN apt-get update -q && apt-get install -y -q --no-install-recommends default-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
COPY --from=venv-journal /opt/toymb /opt/toymb
COPY --from=delta-jars /opt/delta-jars /opt/delta-jars
COPY --from=app /opt/toymb/app /opt/toymb/app
ENV TOYMB_DELTA_JARS=/opt/delta-jars
ENV PATH=/opt/toymb/bin:$PATH TOYMB_DATA_DIR=/data PYSPARK_PYTHON=/opt/toymb/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/toymb/bin/python PYTHONDONTWRITEBYTECODE=1
USER toymb
WORKDIR /data
VOLUME /data
HEALTHCHECK --interval=10s --timeout=5s --start-period=120s --retries=6 \
  CMD ["python3", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/metrics' % os.environ.get('TOYMB_JOURNAL_METRICS_PORT', '9464'), timeout=4)"]
ENTRYPOINT ["toymb"]
CMD ["journal", "run"]
