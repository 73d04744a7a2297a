# Stand-in for python:3.11-slim, from Debian bookworm's own Python 3.11 (see README.md in this folder).
ARG BASE_IMAGE=localhost/dispersion-offline/bookworm:12
FROM ${BASE_IMAGE}
# A virtual environment stands in for the official image's /usr/local Python: `python`, `pip` first on the PATH,
# and pip may install there (Debian's system Python refuses, PEP 668).
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/python \
    && printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > /etc/pip.conf
ENV PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8
CMD ["python3"]
