#!/bin/sh
# Entrypoint of the dispersion image: run the given command (`dispersion ...`), after filling the sandbox client's
# credentials from the files `dispersion sandbox init` wrote into $DISPERSION_BANK_DIR (the bank-init service), for
# every variable that is not already set. Nothing is printed: these values are secrets.
set -eu
bank_dir="${DISPERSION_BANK_DIR:-/var/lib/dispersion/bank}"
if [ -r "$bank_dir/clients.json" ] && [ -r "$bank_dir/signing-key.pem" ]; then
  client_field() {
    python -c 'import json, sys; print(json.load(open(sys.argv[1]))["clients"][0][sys.argv[2]])' \
      "$bank_dir/clients.json" "$1"
  }
  if [ -z "${DISPERSION_SANDBOX_CLIENT_SECRET:-}" ]; then
    DISPERSION_SANDBOX_CLIENT_SECRET="$(client_field client_secret)"
    export DISPERSION_SANDBOX_CLIENT_SECRET
  fi
  if [ -z "${DISPERSION_SANDBOX_KID:-}" ]; then
    DISPERSION_SANDBOX_KID="$(client_field kid)"
    export DISPERSION_SANDBOX_KID
  fi
  if [ -z "${DISPERSION_SANDBOX_SIGNING_KEY:-}" ]; then
    DISPERSION_SANDBOX_SIGNING_KEY="$(cat "$bank_dir/signing-key.pem")"
    export DISPERSION_SANDBOX_SIGNING_KEY
  fi
fi
exec "$@"
