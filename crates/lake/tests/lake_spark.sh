#!/usr/bin/env bash
# Spark reads the Parquet lake: a standalone master and two workers on 127.0.0.1 read
# the files `tidemark export` wrote (the live ones, listed from the Delta log), with
# the same row count, distinct `_id`s and per-shard counts as Tidemark's export report,
# and a lookup of an absent `_id` (inside its row group's min/max statistics) scans 0
# rows with Parquet's bloom filters on (`parquet.filter.bloom.enabled`, the default) and
# more than 0 with them off.
#
# Not part of .ci/run: it installs pyspark from PyPI (about 435 MiB) when missing and
# starts five JVMs. docs/lake.md says how to run it; docs/results/lake.md has a run.
#
# Usage: crates/lake/tests/lake_spark.sh TARGET_DIR/{debug,release}/tidemark
#        (tidemark-export beside it; Java 17 on PATH or in JAVA_HOME)
set -euo pipefail

if [ $# -ne 1 ]; then
  sed -n '2,13p' "$0" >&2
  exit 2
fi
TIDEMARK=$(realpath "$1")
HERE=$(cd "$(dirname "$0")" && pwd)

if ! python3 -c "import pyspark" >/dev/null 2>&1; then
  echo "installing pyspark from PyPI (about 435 MiB)" >&2
  python3 -m pip install --user --quiet --no-cache-dir pyspark \
    || python3 -m pip install --user --quiet --no-cache-dir --break-system-packages pyspark
fi
SPARK_HOME=$(python3 -c "import os, pyspark; print(os.path.dirname(pyspark.__file__))")
export SPARK_HOME
if [ -z "${JAVA_HOME:-}" ]; then
  JAVA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")
  export JAVA_HOME
fi
export SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_DIRS
TMP=$(mktemp -d "${TMPDIR:-/tmp}/tidemark-spark-XXXXXX")
SPARK_LOCAL_DIRS="$TMP/spark-local"
PIDS=()
cleanup() {
  # The JVMs this script started, by process id.
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT

# A free port on 127.0.0.1 for the master.
PORT=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
MASTER="spark://127.0.0.1:$PORT"
"$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
  --host 127.0.0.1 --port "$PORT" --webui-port 0 >"$TMP/master.log" 2>&1 &
PIDS+=($!)
for i in 1 2; do
  mkdir -p "$TMP/worker$i"
  "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
    --host 127.0.0.1 --cores 1 --memory 1g --webui-port 0 --work-dir "$TMP/worker$i" \
    "$MASTER" >"$TMP/worker$i.log" 2>&1 &
  PIDS+=($!)
done
# Wait for both workers to register.
for _ in $(seq 1 120); do
  if [ "$(grep -c "Registering worker" "$TMP/master.log" 2>/dev/null || true)" -ge 2 ]; then break; fi
  sleep 0.5
done
if [ "$(grep -c "Registering worker" "$TMP/master.log" 2>/dev/null || true)" -lt 2 ]; then
  echo "the Spark master did not see two workers:" >&2
  tail -20 "$TMP/master.log" "$TMP"/worker*.log >&2
  exit 1
fi

python3 "$HERE/lake_spark.py" "$TIDEMARK" "$MASTER" "$TMP"
