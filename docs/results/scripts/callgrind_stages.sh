#!/usr/bin/env bash
# Instructions per sample by stage of tidemark-server's write path (docs/results/ingest.md):
# runs `xtask peers` with the server under callgrind (one output file per thread) and sums
# each stage's inclusive count over the threads, divided by the unique samples.
#
#   docs/results/scripts/callgrind_stages.sh SERVER_BIN [tidemark|tidemark:rw] [OUT_DIR]
#
# Needs valgrind and a release build of xtask (target/release/xtask). Deterministic, so a
# busy machine does not move the counts; one run takes 1–2 minutes.
set -euo pipefail
server=$(realpath "$1")
system=${2:-tidemark}
out=$(realpath -m "${3:-/tmp/callgrind-stages}")
samples=1440000 # unique samples of `peers --dataset k8s` (the task checks it stores exactly these)
mkdir -p "$out"
rm -f "$out"/cg.*
wrapper="$out/server.sh"
cat > "$wrapper" <<WRAP
#!/bin/sh
exec valgrind --tool=callgrind --separate-threads=yes --dump-instr=no --callgrind-out-file=$out/cg.%p "$server" "\$@"
WRAP
chmod +x "$wrapper"
target/release/xtask peers --dataset k8s --systems "$system" --tidemark-bin "$wrapper" | grep -E "stored samples"
stage() {
  local total=0 v f
  for f in "$out"/cg.*-*; do
    v=$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null | grep -E "^ *[0-9,]+ \(" | grep -m1 -- "$2" | awk '{gsub(",","",$1); print $1}' || true)
    total=$((total + ${v:-0}))
  done
  printf "%-28s %6d instructions/sample\n" "$1" $((total / samples))
}
stage "parse, line protocol" "metrics::influx_lines"
stage "parse, remote write" "remote_write::for_each_series"
stage "writer thread" "registry::Writer::run"
stage "  check, log, append" "Engine>::append_samples "
stage "  refresh" "Engine>::refresh "
stage "merge thread" "registry::merge_loop"
