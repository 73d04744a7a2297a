#!/bin/sh
# Entrypoint of the Kafka stand-in. Like the official image, every KAFKA_* variable is a broker setting
# (KAFKA_LOG_DIRS -> log.dirs; `__` -> `_`, `___` -> `-`), laid over the defaults in server.properties (the KRaft
# settings of `dispersion dev kafka`). The storage is formatted on first start (CLUSTER_ID, else a new random id,
# which the volume keeps), then the broker runs in the foreground, logging to the console.
set -eu
home=/opt/kafka
run="$home/config/run.properties"
overrides="$(env | awk -F= '/^KAFKA_[A-Z0-9_]+=/ {
  name = substr($1, 7)
  if (name ~ /^(HEAP_OPTS|OPTS|JVM_PERFORMANCE_OPTS|LOG4J_OPTS)$/) next
  value = substr($0, length($1) + 2)
  gsub(/___/, "-", name); gsub(/__/, "@", name); gsub(/_/, ".", name); gsub(/@/, "_", name)
  print tolower(name) "=" value
}')"
{
  echo "# Written by kafka-run at start: server.properties overlaid with the KAFKA_* environment."
  printf '%s\n' "$overrides" | grep -v '^$' || true
  # A static voter set (KAFKA_CONTROLLER_QUORUM_VOTERS) replaces the dynamic quorum of the defaults.
  grep -v '^#' "$home/config/server.properties" | while IFS= read -r line; do
    key="${line%%=*}"
    if printf '%s\n' "$overrides" | grep -q "^$key="; then continue; fi
    if [ "$key" = controller.quorum.bootstrap.servers ] && printf '%s\n' "$overrides" | grep -q '^controller.quorum.voters='; then
      continue
    fi
    echo "$line"
  done
} > "$run"

java_cmd() {
  # shellcheck disable=SC2086 # KAFKA_HEAP_OPTS holds several options
  exec java ${KAFKA_HEAP_OPTS:--Xmx512m -Xms64m} -XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$home/config/log4j2.properties" \
    -cp "$home/libs/*" "$@"
}

log_dir="$(sed -n 's/^log\.dirs=//p' "$run" | head -n 1 | cut -d, -f1)"
if [ ! -f "$log_dir/meta.properties" ]; then
  cluster_id="${CLUSTER_ID:-}"
  while [ -z "$cluster_id" ] || [ "${cluster_id#-}" != "$cluster_id" ]; do
    cluster_id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
  done
  standalone="--standalone"
  if grep -q '^controller.quorum.voters=' "$run"; then standalone=""; fi
  (java_cmd kafka.tools.StorageTool format -t "$cluster_id" -c "$run" $standalone)
fi
java_cmd kafka.Kafka "$run"
