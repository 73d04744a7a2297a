# Stand-in for apache/kafka:4.3.1: the same Apache Kafka release, from its Maven Central jars (the cache that
# `dispersion dev kafka` fills), on Debian bookworm's OpenJDK 17 (see README.md in this folder). The build context is
# assembled by build-images: libs/ (the broker), tools/ (kafka-tools for the health check's command),
# server.properties (the KRaft settings of `dispersion dev kafka`) and the scripts of this folder.
ARG BASE_IMAGE=localhost/dispersion-offline/bookworm:12
FROM ${BASE_IMAGE}
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 1000 --create-home --shell /bin/sh appuser \
    && mkdir -p /var/lib/kafka/data /opt/kafka/config \
    && chown -R appuser:appuser /var/lib/kafka /opt/kafka/config
COPY libs/ /opt/kafka/libs/
COPY tools/ /opt/kafka/tools/
COPY server.properties log4j2.properties /opt/kafka/config/
COPY kafka-run.sh /opt/kafka/bin/kafka-run
COPY kafka-broker-api-versions.sh /opt/kafka/bin/kafka-broker-api-versions.sh
ENV PATH=/opt/kafka/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8
USER appuser
WORKDIR /opt/kafka
VOLUME /var/lib/kafka/data
EXPOSE 9092
ENTRYPOINT ["/opt/kafka/bin/kafka-run"]
