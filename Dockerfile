# The one image of every deployable: `dispersion processor` (role all or api), `dispersion sandbox`, and the CLI
# (`topics`, `submit`, `status`, `sandbox init`). Used by docker-compose.yml; see docs/operations.md.
# PYTHON_IMAGE: the base, python:3.11-slim; docker-compose.offline.yml names a stand-in built from Debian's Python.
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# constraints.txt pins every run-time dependency to the version the tests ran with (deploy/constraints.py). They are
# installed in a layer of their own, so a code change rebuilds only the layers below.
COPY constraints.txt ./
RUN pip install -r constraints.txt
COPY pyproject.toml README.md constraints.txt ./
COPY processor ./processor
COPY sandbox ./sandbox
COPY consumers ./consumers
COPY producers ./producers
COPY schemas ./schemas
RUN pip install -c constraints.txt . && rm -rf /src

COPY deploy/entrypoint.sh /usr/local/bin/dispersion-entrypoint
RUN chmod 0755 /usr/local/bin/dispersion-entrypoint \
    && useradd --system --uid 10001 --home-dir /var/lib/dispersion --shell /usr/sbin/nologin dispersion \
    && mkdir -p /var/lib/dispersion/bank /etc/dispersion \
    && chown -R dispersion:dispersion /var/lib/dispersion

USER dispersion
WORKDIR /var/lib/dispersion
EXPOSE 8600 8700
ENTRYPOINT ["/usr/local/bin/dispersion-entrypoint"]
CMD ["dispersion", "--help"]
