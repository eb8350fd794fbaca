#!/usr/bin/env bash
# End-to-end test of the cluster with real components on 127.0.0.1 (docs/cluster.md):
# 1 nats-server with JetStream and 1 etcd (Debian's, installed when missing), 2 shard
# owners (`tidemark serve --cluster`, shards 0-127 and 128-255) and 2 routers. A load of
# Prometheus remote write and Influx line protocol goes through both routers for
# SECONDS (default 40), each batch retried until acknowledged and 10% of acknowledged
# batches re-sent through the other router; owner 1 is SIGKILLed a third of the way in
# and restarted 2 s later, then router 1, then the NATS server (each SIGKILLed and
# restarted 2 s later: the client's retries and the routers' 503s). Then every owner's samples are read back: the samples
# stored must equal the distinct (series, timestamp) pairs sent, none stored twice, no
# series on two owners.
#
#   bash crates/cluster/tests/cluster_e2e.sh [SECONDS]
#
# Bounded in time: the load runs SECONDS, the check waits at most 90 s for the owners
# to catch up, every start waits at most 30 s.
set -euo pipefail
cd "$(dirname "$0")/../../.."
SECS="${1:-40}"
T="${CARGO_TARGET_DIR:-target}"

if ! command -v nats-server >/dev/null 2>&1 || ! command -v etcd >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server etcd-server >/dev/null
fi
ETCD_BIN="$(command -v etcd || echo /usr/bin/etcd)"

cargo build -q -p tidemark-cli --features cluster
cargo build -q -p tidemark-cluster --features jetstream --example cluster_load
BIN="$T/debug/tidemark"
LOAD="$T/debug/examples/cluster_load"

W="$(mktemp -d)"
PIDS=()
cleanup() {
  # Routers and owners first (they log etcd and NATS going away otherwise).
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill "${PIDS[$i]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { # host:port
  for _ in $(seq 300); do
    if (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "nothing listens on $1" >&2; return 1
}
wait_file() {
  for _ in $(seq 300); do [ -s "$1" ] && return 0; sleep 0.1; done
  echo "no $1; logs:" >&2; tail -n 20 "$W"/*.log >&2; return 1
}

NATS_PORT=$(free_port); ETCD_PORT=$(free_port); PEER_PORT=$(free_port)
start_nats() {
  nats-server -js -a 127.0.0.1 -p "$NATS_PORT" -sd "$W/nats" >>"$W/nats.log" 2>&1 &
  NATS_PID=$!
  PIDS+=($!)
  wait_port "127.0.0.1:$NATS_PORT"
}
start_nats
"$ETCD_BIN" --name e2e --data-dir "$W/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
  --initial-cluster "e2e=http://127.0.0.1:$PEER_PORT" >"$W/etcd.log" 2>&1 &
PIDS+=($!)
wait_port "127.0.0.1:$ETCD_PORT"

common() {
  cat <<TOML
nats = ["nats://127.0.0.1:$NATS_PORT"]
etcd = ["http://127.0.0.1:$ETCD_PORT"]
prefix = "e2e"
lease_ttl_secs = 6
TOML
}
{ common; echo 'node = "owner-1"'; echo 'shards = "0-127"'; } >"$W/o1.toml"
{ common; echo 'node = "owner-2"'; echo 'shards = "128-255"'; } >"$W/o2.toml"
{ common; echo 'listen = "127.0.0.1:0"'; } >"$W/r.toml"

OWNER_PID=()
start_owner() { # n
  rm -f "$W/o$1.port"
  TIDEMARK_LOG=info "$BIN" serve --data "$W/o$1" --listen 127.0.0.1:0 --port-file "$W/o$1.port" \
    --cluster "$W/o$1.toml" >>"$W/o$1.log" 2>&1 &
  OWNER_PID[$1]=$!
  PIDS+=($!)
  wait_file "$W/o$1.port"
}
start_owner 1
start_owner 2
ROUTER_PID=()
start_router() { # n [address]
  rm -f "$W/r$1.port"
  "$BIN" router --config "$W/r.toml" --port-file "$W/r$1.port" ${2:+--listen "$2"} >>"$W/r$1.log" 2>&1 &
  ROUTER_PID[$1]=$!
  PIDS+=($!)
  wait_file "$W/r$1.port"
}
start_router 1
start_router 2
R1="http://$(cat "$W/r1.port")"; R2="http://$(cat "$W/r2.port")"
echo "nats :$NATS_PORT, etcd :$ETCD_PORT, owners $(cat "$W/o1.port") $(cat "$W/o2.port"), routers $R1 $R2"

"$LOAD" load "$R1,$R2" "$SECS" "$W/sent.txt" &
LOAD_PID=$!
sleep $((SECS / 3))
echo "SIGKILL owner 1 (pid ${OWNER_PID[1]})"
kill -9 "${OWNER_PID[1]}"
sleep 2
start_owner 1
echo "owner 1 restarted"
sleep $((SECS / 6))
# A router killed: the client's requests to it fail and are retried through the other.
echo "SIGKILL router 1 (pid ${ROUTER_PID[1]})"
kill -9 "${ROUTER_PID[1]}"
sleep 2
start_router 1 "${R1#http://}"
echo "router 1 restarted"
sleep $((SECS / 6))
# The NATS server killed (one server, replicas 1): every write gets 503 or no answer
# until it is back; the client retries; what JetStream acknowledged is on its disk.
echo "SIGKILL nats-server (pid $NATS_PID)"
kill -9 "$NATS_PID"
sleep 2
start_nats
echo "nats-server restarted"
wait "$LOAD_PID"

O1="http://$(cat "$W/o1.port")"; O2="http://$(cat "$W/o2.port")"
"$LOAD" verify "$W/sent.txt" "$O1,$O2" 90
for r in 1 2; do
  echo "router $r: $(curl -s "$([ $r = 1 ] && echo "$R1" || echo "$R2")/metrics" | grep -v '^#' | tr '\n' ' ')"
done
for o in 1 2; do
  echo "owner $o: $(grep -c 'owner applied' "$W/o$o.log" || true) progress lines; last: $(grep 'owner applied' "$W/o$o.log" | tail -1 | sed 's/.*owner/owner/')"
done
echo "cluster e2e: ok"
