#!/usr/bin/env bash
# Per-thread CPU of a process while it runs: waits for a process named NAME (its
# executable's name, as `pgrep -x` matches it: the first 15 characters), samples /proc/<pid>/task/*/stat every 0.2 s until it exits, then
# prints CPU seconds per thread name (threads of one name summed, with their count)
# over the process's life, its wall time, and the machine's busy share over the same
# window from /proc/stat (both cores: 200% is the whole 2-core machine).
#   bash docs/results/scripts/thread_cpu.sh NAME [TIMEOUT_SECONDS]
set -euo pipefail
PAT=${1:?usage: thread_cpu.sh NAME [TIMEOUT_SECONDS]}
LIMIT=${2:-600}
HZ=$(getconf CLK_TCK)
pid=""
for _ in $(seq $((LIMIT * 10))); do
  pid=$(pgrep -n -x -- "${PAT:0:15}" || true)
  [ -n "$pid" ] && break
  sleep 0.1
done
[ -n "$pid" ] || { echo "no process matches $PAT" >&2; exit 1; }
busy() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8}' /proc/stat; }
read -r b0 t0 < <(busy); start=$(date +%s.%N)
# Every sample, kept: a thread's figure is its largest (threads that end before the
# process, and the process's last moments, would otherwise lose theirs).
snaps=$(mktemp); trap 'rm -f "$snaps"' EXIT
while [ -d "/proc/$pid" ]; do
  # tid, name (may hold spaces: between the parentheses), utime + stime
  s=$(for f in /proc/"$pid"/task/*/stat; do
        sed -E 's/^([0-9]+) \((.*)\) [A-Za-z] (.*)$/\1|\2|\3/' "$f" 2>/dev/null \
          | awk -F'|' '{split($3, a, " "); print $1 "|" $2 "|" a[11] + a[12]}'
      done 2>/dev/null || true)
  [ -n "$s" ] && echo "$s" >>"$snaps"
  read -r b1 t1 < <(busy); end=$(date +%s.%N)
  sleep 0.2
done
wall=$(echo "$end - $start" | bc)
echo "process $pid ($PAT): ${wall} s wall; machine busy $(echo "scale=0; 200 * ($b1 - $b0) / ($t1 - $t0)" | bc)% of 200%"
awk -F'|' '{ if (!($1 in c) || $3 > c[$1]) c[$1] = $3; name[$1] = $2 }
  END { for (t in c) print t "|" name[t] "|" c[t] }' "$snaps" \
  | awk -F'|' -v hz="$HZ" -v wall="$wall" '
  { n = $2; sub(/-[0-9]+$/, "", n); sub(/[0-9]+$/, "", n); cpu[n] += $3 / hz; cnt[n]++; tot += $3 / hz }
  END {
    for (n in cpu) printf "%8.2f cpu-s %6.1f%% of a core  %-20s %3d threads\n", cpu[n], 100 * cpu[n] / wall, n, cnt[n]
    printf "%8.2f cpu-s %6.1f%% of a core  %-20s\n", tot, 100 * tot / wall, "total"
  }' | sort -nr
