#!/usr/bin/env bash
# Check that the data volume is writable, start a Ray head that sees every GPU of
# this node (so Ray runs one job per GPU and workers from other nodes can join with
# `ray start --address`), then run the service, which connects to it through
# RAY_ADDRESS=auto.
set -euo pipefail

# A bind-mounted host folder that Docker created is owned by root: say how to fix it
# instead of failing later with a traceback.
for dir in "${LCTX_HOME:-/data}" ${LCTX_RESULTS_DIR:+"$LCTX_RESULTS_DIR"}; do
  mkdir -p "$dir" 2>/dev/null || true
  if [ ! -w "$dir" ]; then
    echo "lctx: cannot write $dir as uid $(id -u); on the host run" \
         "'sudo chown -R $(id -u):$(id -g) <the folder mounted at $dir>' (LCTX_DATA_HOST_DIR in docker/.env)" >&2
    exit 1
  fi
done

if [ "${LCTX_RAY_HEAD:-1}" = "1" ] && [ -z "${RAY_ADDRESS:-}" ]; then
  # The dashboard accepts job submissions: keep it on loopback (the cluster file shares
  # the host's network).
  ray start --head --port="${LCTX_RAY_PORT:-6379}" --dashboard-host=127.0.0.1 --disable-usage-stats
  export RAY_ADDRESS=auto  # the head just started (its address as Ray recorded it, node IP included)
fi
exec "$@"
