#!/usr/bin/env bash
# Benchmark of issue 4's simulators: events per second of `permafrost sim energy` and `permafrost sim cache`
# on one generated trace, next to a baseline measured in the same run: `permafrost trace stats` reading the
# same file (the cost of merely parsing and iterating the trace, with a per-object table).
#
# Usage: bench/sim.sh [--requests N] [--profile P] [--scratch DIR] [--keep]
#   --requests  trace length (default 10000000: the issue's "a 10-million-request trace takes minutes")
#   --profile   trace generator profile (default ecfs)
#   --disk-tb   disk size for sim energy (default 40: room for all that 10 M ECFS requests write)
#   --scratch   where the trace goes (default /tmp/permafrost-bench-sim; ~470 MB for 10 M ecfs requests)
#   --keep      keep the trace afterwards (it is deleted by default)
# Environment: CARGO_TARGET_DIR (default: the workspace's target/); PERMAFROST_BIN=path uses that binary
# instead of `cargo build --release -p permafrost`.
# Output: bench/out/sim-<UTC time>/ (gitignored): each command's JSON, /usr/bin/time -v output, summary.txt.
# The machine this runs on may be shared: compare the ratios (each simulator's records per second ÷ the
# trace stats baseline's, and per CPU-second), not absolute rates.
set -euo pipefail

REQUESTS=10000000
PROFILE=ecfs
DISK_TB=40
SCRATCH=/tmp/permafrost-bench-sim
KEEP=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --requests) REQUESTS="$2"; shift ;;
        --profile) PROFILE="$2"; shift ;;
        --disk-tb) DISK_TB="$2"; shift ;;
        --scratch) SCRATCH="$2"; shift ;;
        --keep) KEEP=1 ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 64 ;;
    esac
    shift
done

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$ROOT/bench/out/sim-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$OUT" "$SCRATCH"
SUMMARY="$OUT/summary.txt"
BIN="${PERMAFROST_BIN:-}"
if [[ -z $BIN ]]; then
    (cd "$ROOT" && cargo build --release -p permafrost)
    BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/permafrost"
fi
TRACE="$SCRATCH/$PROFILE-$REQUESTS.pft"

source "$ROOT/bench/common.sh"

# run NAME CMD...: runs CMD under /usr/bin/time -v, stdout to NAME.json, stderr to NAME.err; sets WALL, CPU,
# RSS_MB.
run() {
    local name="$1"; shift
    /usr/bin/time -v -o "$OUT/$name.time" "$@" > "$OUT/$name.json" 2> "$OUT/$name.err"
    WALL=$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, t, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + t[i]; print s}' "$OUT/$name.time")
    CPU=$(awk -F': ' '/User time/ {u = $2} /System time/ {s = $2} END {print u + s}' "$OUT/$name.time")
    RSS_MB=$(awk -F': ' '/Maximum resident/ {printf "%.0f", $2 / 1024}' "$OUT/$name.time")
}

# field FILE EXPR: one number out of a JSON file.
field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

say "permafrost simulator benchmark: $PROFILE, $REQUESTS requests; $(date -u +%FT%TZ)"
say "commit $(commit_measured "$ROOT"); binary $BIN"
say "machine: $(machine)"
say "load average at start: $(loadavg)"
say ""

run gen "$BIN" trace gen --profile "$PROFILE" --requests "$REQUESTS" --seed 7 -o "$TRACE"
GEN_WALL=$WALL; GEN_CPU=$CPU; GEN_RSS=$RSS_MB
run stats "$BIN" trace stats "$TRACE" --json
BASE_WALL=$WALL; BASE_CPU=$CPU

# row NAME WALL CPU RSS EVENTS: wall and CPU seconds, and both as multiples of the baseline's (the cost of
# the step in units of "parsing the trace once").
say "$(printf '%-36s %8s %8s %7s %12s %13s %14s %8s %8s' step wall_s cpu_s rss_MB records/s events events/CPU-s 'wall÷base' 'cpu÷base')"
row() {
    say "$(python3 - "$@" "$REQUESTS" "$BASE_WALL" "$BASE_CPU" <<'PY'
import sys
name, wall, cpu, rss, events, requests, base_wall, base_cpu = sys.argv[1:]
wall, cpu, events, requests = float(wall), float(cpu), float(events), float(requests)
print(f"{name:<36} {wall:8.1f} {cpu:8.1f} {rss:>7} {requests / wall:12.0f} {events:13.0f} {events / max(cpu, 1e-9):14.0f} "
      f"{wall / float(base_wall):8.2f} {cpu / float(base_cpu):8.2f}")
PY
)"
}
row "trace gen (writing the trace)" "$GEN_WALL" "$GEN_CPU" "$GEN_RSS" "$REQUESTS"
row "baseline: trace stats (parsing)" "$BASE_WALL" "$BASE_CPU" "$RSS_MB" "$REQUESTS"

# sim energy: the standard run (the grid, the grid with random placement, RAID 6, 12+4: every record is fed to
# all four), then the grid alone. Disks of $DISK_TB TB, so the default 8x6:4+1 grid (32 data disks) has room for
# everything 10 M ECFS requests write (~0.6 PB in 56 days): with 4 TB disks 40 % of the writes find no room,
# are dropped, and the run does less work than it reports.
run energy "$BIN" sim energy --trace "$TRACE" --disk-tb "$DISK_TB" --json
row "sim energy (grid + 3 baselines)" "$WALL" "$CPU" "$RSS_MB" "$(field "$OUT/energy.json" 'd["events"]')"
run energy1 "$BIN" sim energy --trace "$TRACE" --disk-tb "$DISK_TB" --json --no-baselines
row "sim energy --no-baselines (grid)" "$WALL" "$CPU" "$RSS_MB" "$(field "$OUT/energy1.json" 'd["events"]')"

# sim cache: one run (LRU at 1 % of the footprint, one thread), then the default sweep (8 capacities × LRU,
# MRU, FIFO, 5 × RANDOM, ARC, Bélády = 80 runs over the trace) on all cores.
run cache1 "$BIN" sim cache --trace "$TRACE" --json --policies lru --capacities 1% --threads 1
row "sim cache: 1 run (LRU, 1 %)" "$WALL" "$CPU" "$RSS_MB" "$(field "$OUT/cache1.json" 'd["events_simulated"]')"
run cache "$BIN" sim cache --trace "$TRACE" --json
row "sim cache: default sweep (80 runs)" "$WALL" "$CPU" "$RSS_MB" "$(field "$OUT/cache.json" 'd["events_simulated"]')"
say ""
say "trace file: $(du -m "$TRACE" | cut -f1) MB"
python3 - "$OUT" <<'PY' | tee -a "$SUMMARY"
import json, sys
out = sys.argv[1]
for name in ("energy", "energy1"):
    d = json.load(open(f"{out}/{name}.json"))
    print(f"sim energy {name}: {d['events']} events in {d['wall_seconds']:.1f} s inside the process "
          f"= {d['events_per_second'] / 1e6:.2f} M events/s; {d['records']} records over {d['duration_ms'] / 864e5:.1f} simulated days")
    for s in d["systems"]:
        a = s["activity"]
        print(f"  {s['label']:<34} events {a['events']:>11}  spin-ups {s['spin_ups']:>9}  kWh {s['kwh']:9.1f}  "
              f"writes without room {a['placement_failures']}")
for name in ("cache1", "cache"):
    d = json.load(open(f"{out}/{name}.json"))
    print(f"sim cache {name}: {d['events_simulated']} events in {d['seconds']:.1f} s of simulation (loading excluded) "
          f"= {d['events_per_second'] / 1e6:.2f} M events/s; {d['trace']['objects']} objects")
PY
say "events: sim energy = records plus internal events (I/O ends, jobs, watchdog ticks) summed over its systems;"
say "        sim cache = requests × runs; trace gen / stats = records. ÷base = multiple of the trace stats baseline."
say "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
say "raw output: $OUT"
if [[ $KEEP == 0 ]]; then rm -f "$TRACE"; fi
