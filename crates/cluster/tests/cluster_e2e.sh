#!/usr/bin/env bash
# End-to-end test of the cluster with real components on 127.0.0.1 (docs/cluster.md):
# 3 nats-server with JetStream clustered (streams with 3 replicas) and 1 etcd (Debian's,
# installed when missing), 3 shard owners (`tidemark serve --cluster`, shards 0-85,
# 86-170 and 171-255), 2 routers, and a single-node `tidemark serve` as the reference.
# A load of Prometheus remote write and Influx line protocol goes through both routers
# for SECONDS (default 45), each batch retried until acknowledged, 10% of acknowledged
# batches re-sent through the other router, and every acknowledged batch written to the
# reference too. During the load owner 1 is SIGKILLed (a third of the way in) and
# restarted 2 s later, then router 1, then NATS server 2 (each SIGKILLed and restarted
# 2 s later). Then:
# - every owner's samples are read back: the samples stored must equal the distinct
#   (series, timestamp) pairs sent, none stored twice, no series on two owners;
# - PromQL (instant and range queries, aggregations, rates, quantiles) and the
#   metadata endpoints through either router must answer what the reference answers;
# - `_cluster/health` must be green with 256 active shards on 3 nodes, `_cat/shards`
#   must list 256 started shards.
#
#   bash crates/cluster/tests/cluster_e2e.sh [SECONDS]
#
# BENCH=1 runs a throughput comparison on the same setup instead (release build, no
# kills): remote write through both routers into the 3 owners, then into the single
# node, each for SECONDS (default 20 then), with every process's CPU seconds
# (docs/cluster.md, "Throughput").
#
# Bounded in time: the load runs SECONDS, the check waits at most 90 s for the owners
# to catch up and 60 s for the health to turn green, every start waits at most 30 s.
set -euo pipefail
cd "$(dirname "$0")/../../.."
SECS="${1:-45}"
T="${CARGO_TARGET_DIR:-target}"

if ! command -v nats-server >/dev/null 2>&1 || ! command -v etcd >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server etcd-server >/dev/null
fi
ETCD_BIN="$(command -v etcd || echo /usr/bin/etcd)"

PROFILE=debug
if [ "${BENCH:-0}" = 1 ]; then PROFILE=release; SECS="${1:-20}"; fi
cargo build -q --profile "${PROFILE/debug/dev}" -p tidemark-cli --features cluster
cargo build -q --profile "${PROFILE/debug/dev}" -p tidemark-cluster --features jetstream --example cluster_load
BIN="$T/$PROFILE/tidemark"
LOAD="$T/$PROFILE/examples/cluster_load"

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

ETCD_PORT=$(free_port); PEER_PORT=$(free_port)
NATS_PORT=(); ROUTE_PORT=(); MON_PORT=()
for n in 1 2 3; do NATS_PORT[$n]=$(free_port); ROUTE_PORT[$n]=$(free_port); MON_PORT[$n]=$(free_port); done
for n in 1 2 3; do
  routes=""
  for m in 1 2 3; do
    [ "$m" = "$n" ] || routes="$routes${routes:+, }nats-route://127.0.0.1:${ROUTE_PORT[$m]}"
  done
  cat >"$W/nats$n.conf" <<CONF
server_name: n$n
listen: 127.0.0.1:${NATS_PORT[$n]}
http: 127.0.0.1:${MON_PORT[$n]}
jetstream { store_dir: "$W/nats$n" }
cluster { name: tidemark-e2e, listen: 127.0.0.1:${ROUTE_PORT[$n]}, routes: [$routes] }
CONF
done
NATS_PID=()
start_nats() { # n
  nats-server -c "$W/nats$1.conf" >>"$W/nats$1.log" 2>&1 &
  NATS_PID[$1]=$!
  PIDS+=($!)
  wait_port "127.0.0.1:${NATS_PORT[$1]}"
}
nats_ready() { # every server's JetStream healthy (meta leader elected, streams current)
  for _ in $(seq 300); do
    local ok=1
    for n in 1 2 3; do
      curl -sf "http://127.0.0.1:${MON_PORT[$n]}/healthz" >/dev/null || ok=0
    done
    [ "$ok" = 1 ] && return 0
    sleep 0.1
  done
  echo "JetStream not ready in 30 s" >&2; tail -n 20 "$W"/nats*.log >&2; return 1
}
for n in 1 2 3; do start_nats $n; done
nats_ready
"$ETCD_BIN" --name e2e --data-dir "$W/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
  --initial-cluster "e2e=http://127.0.0.1:$PEER_PORT" >"$W/etcd.log" 2>&1 &
PIDS+=($!)
wait_port "127.0.0.1:$ETCD_PORT"

common() {
  cat <<TOML
nats = ["nats://127.0.0.1:${NATS_PORT[1]}", "nats://127.0.0.1:${NATS_PORT[2]}", "nats://127.0.0.1:${NATS_PORT[3]}"]
etcd = ["http://127.0.0.1:$ETCD_PORT"]
prefix = "e2e"
replicas = 3
lease_ttl_secs = 6
TOML
}
{ common; echo 'node = "owner-1"'; echo 'shards = "0-85"'; } >"$W/o1.toml"
{ common; echo 'node = "owner-2"'; echo 'shards = "86-170"'; } >"$W/o2.toml"
{ common; echo 'node = "owner-3"'; echo 'shards = "171-255"'; } >"$W/o3.toml"
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
start_owner 3
TIDEMARK_LOG=info "$BIN" serve --data "$W/ref" --listen 127.0.0.1:0 --port-file "$W/ref.port" >>"$W/ref.log" 2>&1 &
PIDS+=($!)
wait_file "$W/ref.port"
REF="http://$(cat "$W/ref.port")"
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
echo "nats :${NATS_PORT[*]}, etcd :$ETCD_PORT, owners $(cat "$W/o1.port") $(cat "$W/o2.port") $(cat "$W/o3.port"), routers $R1 $R2, reference $REF"

if [ "${BENCH:-0}" = 1 ]; then
  declare -A WHO
  for n in 1 2 3; do WHO["nats$n"]=${NATS_PID[$n]}; WHO["owner$n"]=${OWNER_PID[$n]}; done
  WHO[router1]=${ROUTER_PID[1]}; WHO[router2]=${ROUTER_PID[2]}; WHO[single]=$(pgrep -f "serve --data $W/ref" | head -1)
  cpu() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
  snap() { for k in "${!WHO[@]}"; do echo "$k $(cpu "${WHO[$k]}")"; done | sort; }
  report() { # before-file after-file seconds
    join "$1" "$2" | awk -v s="$3" -v hz="$(getconf CLK_TCK)" '{d = ($3 - $2) / hz; if (d > 0) printf "  %-8s %6.1f cpu-s %5.0f%% of a core\n", $1, d, 100 * d / s}'
  }
  pending() { curl -s "$R1/_cat/shards?format=json" | python3 -c 'import json,sys; print(sum(int(r["pending"]) + int(r["ack_pending"]) for r in json.load(sys.stdin) if r["pending"] != "-"))'; }
  THREADS="${THREADS:-4}"; SERIES="${SERIES:-500}"
  echo "bench: $SECS s, $THREADS clients, requests of $SERIES series x 10 samples"
  snap >"$W/cpu0"; t0=$(date +%s.%N)
  "$LOAD" bench "$R1,$R2" "$SECS" "$THREADS" "$SERIES"
  t1=$(date +%s.%N)
  for _ in $(seq 600); do [ "$(pending)" = 0 ] && break; sleep 0.2; done
  t2=$(date +%s.%N); snap >"$W/cpu1"
  echo "cluster (2 routers, 3 owners, 3 NATS with replicas 3): owners caught up $(echo "$t2 - $t1" | bc) s after the load ended; CPU over $(echo "$t2 - $t0" | bc) s:"
  report "$W/cpu0" "$W/cpu1" "$(echo "$t2 - $t0" | bc)"
  t0=$(date +%s.%N)
  "$LOAD" bench "$REF" "$SECS" "$THREADS" "$SERIES"
  t1=$(date +%s.%N); snap >"$W/cpu2"
  echo "single node: CPU over $(echo "$t1 - $t0" | bc) s:"
  report "$W/cpu1" "$W/cpu2" "$(echo "$t1 - $t0" | bc)"
  exit 0
fi

"$LOAD" load "$R1,$R2" "$SECS" "$W/sent.txt" "$REF" &
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
# One of the three NATS servers killed: every stream keeps a quorum of its 3
# replicas; streams it led elect another leader (seconds of 503s, retried); clients
# connected to it reconnect to the others.
echo "SIGKILL nats-server n2 (pid ${NATS_PID[2]})"
kill -9 "${NATS_PID[2]}"
sleep 2
start_nats 2
echo "nats-server n2 restarted"
wait "$LOAD_PID"

O1="http://$(cat "$W/o1.port")"; O2="http://$(cat "$W/o2.port")"; O3="http://$(cat "$W/o3.port")"
"$LOAD" verify "$W/sent.txt" "$O1,$O2,$O3" 90
"$LOAD" compare "$W/sent.txt" "$R1,$R2" "$REF"

# The cluster's state: green once NATS server 2 has caught up.
status=""
for _ in $(seq 120); do
  status=$(curl -s "$R2/_cluster/health" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])' || true)
  [ "$status" = green ] && break
  sleep 0.5
done
curl -s "$R2/_cluster/health" | python3 -c '
import json, sys
h = json.load(sys.stdin)
print("health:", h["status"], "nodes", h["number_of_data_nodes"], "active shards", h["active_shards"],
      "streams current", sorted({s["current_replicas"] for s in h["tidemark"]["streams"]}))
assert h["status"] == "green", h
assert h["number_of_data_nodes"] == 3 and h["active_shards"] == 256 and h["unassigned_shards"] == 0, h
'
curl -s "$R1/_cat/shards?format=json" | python3 -c '
import json, sys
rows = json.load(sys.stdin)
nodes = {}
for r in rows:
    assert r["state"] == "STARTED", r
    nodes.setdefault(r["node"], []).append(int(r["shard"]))
assert len(rows) == 256 and len(nodes) == 3, nodes.keys()
print("cat shards: 256 started;", ", ".join(f"{n}: {min(s)}-{max(s)}" for n, s in sorted(nodes.items())),
      "; pending", sum(int(r["pending"]) for r in rows if r["pending"] != "-"))
'
for r in 1 2; do
  echo "router $r: $(curl -s "$([ $r = 1 ] && echo "$R1" || echo "$R2")/metrics" | grep -v '^#' | tr '\n' ' ')"
done
for o in 1 2 3; do
  echo "owner $o: $(grep -c 'owner applied' "$W/o$o.log" || true) progress lines; last: $(grep 'owner applied' "$W/o$o.log" | tail -1 | sed 's/.*owner/owner/')"
done
echo "cluster e2e: ok"
