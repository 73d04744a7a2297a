#!/usr/bin/env bash
# Start Debian's PostgreSQL cluster and create the test role and database (idempotent).
# Prints the DSN to use as DISPERSION_TEST_POSTGRES_DSN.
set -euo pipefail
if ! command -v pg_lsclusters >/dev/null 2>&1; then
  echo "PostgreSQL is not installed (apt-get install postgresql)" >&2
  exit 1
fi
ver=$(pg_lsclusters -h | awk 'NR==1{print $1}')
if [ -z "$ver" ]; then
  ver=$(ls /usr/lib/postgresql | sort -n | tail -1)
  pg_createcluster "$ver" main >&2
fi
if ! pg_lsclusters -h | awk '$2=="main"{print $4}' | grep -q online; then
  # pg_ctlcluster may print notes (e.g. "Removed stale pid file.") on stdout; stdout carries only the DSN.
  pg_ctlcluster "$ver" main start >&2
fi
for _ in $(seq 1 50); do
  runuser -u postgres -- pg_isready -q -h 127.0.0.1 && break
  sleep 0.2
done
psql_su() { runuser -u postgres -- psql -v ON_ERROR_STOP=1 -qtA "$@"; }
if [ "$(psql_su -c "SELECT 1 FROM pg_roles WHERE rolname='dispersion'")" != "1" ]; then
  psql_su -c "CREATE ROLE dispersion LOGIN SUPERUSER PASSWORD 'dispersion'" >/dev/null
fi
if [ "$(psql_su -c "SELECT 1 FROM pg_database WHERE datname='dispersion_test'")" != "1" ]; then
  psql_su -c "CREATE DATABASE dispersion_test OWNER dispersion" >/dev/null
fi
echo "postgresql://dispersion:dispersion@127.0.0.1:5432/dispersion_test"
