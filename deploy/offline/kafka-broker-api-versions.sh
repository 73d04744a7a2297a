#!/bin/sh
# The official image's bin/kafka-broker-api-versions.sh (docker-compose.yml's health check runs it), from the same
# release's kafka-tools jar. A small heap and the quick JIT: it runs every few seconds.
exec java -Xmx96m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dlog4j2.level=warn \
  -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties \
  -cp "/opt/kafka/libs/*:/opt/kafka/tools/*" org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
