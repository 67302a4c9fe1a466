#!/usr/bin/env bash
# The recorder's benchmark (issue 9), one command: bench/record.sh
#
#   A. the floor: a plain recvmmsg-to-file loop (`permafrost record floor`) at the main rate, its CPU per Gbit/s;
#      and the disk: 4 GiB written in 1 MiB writes and fdatasync'd (dd) into BENCH_DIR, its MB/s — what the
#      cache can take for long (a faster stream is held in the recorder's ring while it lasts);
#   B. the main run: MAIN_SECONDS (60) of 8,032-byte VDIF frames (udps) at MAIN_RATE (2Gbps) over loopback into
#      `permafrost serve`: frames lost by sequence, kernel drops, the scan re-read and compared byte for byte
#      (`record check`), the recorder's CPU per Gbit/s next to the floor's;
#   C. the ladder: LADDER_SECONDS (10) at each of LADDER_RATES (1 2 4 8 Gbit/s): the highest lossless rate;
#   D. the stress run: STRESS_SECONDS (60) at STRESS_RATE (1Gbps) with one grid disk failed, a reader following
#      the scan (ranged GETs of what is new, every second) and the cache draining to the grid all along.
#
# NICE=-10 runs the floor, the sender and the server at that nice value (root only): on a machine shared with
# compilers, the receiving threads otherwise get too little CPU and the kernel drops datagrams (a recorder is
# given its CPU in the field). STRESS_CACHE_BYTES (12 GB) is the cache of part D, more than its scan: the cache
# drains to the grid all along, and a full cache would measure persistence (crates/store), not the recorder.
#
# Results go to target/bench-results/record-<date>.txt (RESULTS=DIR to change) with the machine, commit and load (`uptime`) of each part; the
# machine is shared, so re-run when it is quieter. Data lives in BENCH_DIR (default target/bench-record), deleted
# at the end. Needs about MAIN_SECONDS x MAIN_RATE / 8 bytes free (15 GB for the defaults): checked first.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/bench/common.sh"
MAIN_RATE=${MAIN_RATE:-2Gbps}
MAIN_SECONDS=${MAIN_SECONDS:-60}
FLOOR_SECONDS=${FLOOR_SECONDS:-20}
LADDER_RATES=${LADDER_RATES:-"1 2 4 8"}
LADDER_SECONDS=${LADDER_SECONDS:-10}
STRESS_RATE=${STRESS_RATE:-1Gbps}
STRESS_SECONDS=${STRESS_SECONDS:-60}
STRESS_CACHE_BYTES=${STRESS_CACHE_BYTES:-12000000000}
NICE=${NICE:-0}
PARTS=${PARTS:-"A B C D"}
BENCH_DIR=${BENCH_DIR:-$root/target/bench-record}
RESULTS=${RESULTS:-$root/target/bench-results}
mkdir -p "$RESULTS"
SUMMARY="$RESULTS/record-$(date +%Y%m%d-%H%M%S).txt"
bin="$root/target/release/permafrost"
export PERMAFROST_ROOT_USER=bench PERMAFROST_ROOT_PASSWORD=bench-recorder-secret
port_base=$((52000 + RANDOM % 5000))

rate_bits() { python3 -c "import re,sys; t=sys.argv[1].lower().replace('bps',''); m={'k':1e3,'m':1e6,'g':1e9}; print(int(float(t[:-1])*m[t[-1]]) if t[-1] in m else int(float(t)))" "$1"; }
gbits() { python3 -c "print(f'{$1/1e9:.3f}')"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1], {}, {'d': d}))" "$1"; }
cleanup() {
    [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
    rm -rf "$BENCH_DIR"
}
trap cleanup EXIT

need_bytes=$(python3 -c "print(int($(rate_bits "$MAIN_RATE") * $MAIN_SECONDS / 8 * 1.1) + (2 << 30))")
free_bytes=$(df --output=avail -B1 "$(dirname "$BENCH_DIR")" | tail -1)
if [ "$free_bytes" -lt "$need_bytes" ]; then
    echo "bench/record.sh: needs $((need_bytes >> 30)) GiB free in $(dirname "$BENCH_DIR"), has $((free_bytes >> 30)) GiB; lower MAIN_SECONDS or free space" >&2
    exit 1
fi
if [ "$(cat /proc/sys/net/core/rmem_max)" -lt 268435456 ]; then
    echo "bench/record.sh: net.core.rmem_max is $(cat /proc/sys/net/core/rmem_max): run scripts/setup-deps.sh as root (or sysctl -w net.core.rmem_max=268435456)" >&2
    exit 1
fi

(cd "$root" && cargo build --release -q -p permafrost)
say "# bench/record.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "machine: $(machine); commit $(commit_measured "$root"); rmem_max $(cat /proc/sys/net/core/rmem_max); nice $NICE"

# A server on BENCH_DIR with a cache of $1 bytes and watchdog settings $2 (TOML lines of [store.watchdog]).
start_server() {
    rm -rf "$BENCH_DIR"; mkdir -p "$BENCH_DIR"
    cat > "$BENCH_DIR/permafrost.toml" <<EOF
[store]
cache_bytes_max = $1
cache_wait_ms_max = 30000

[store.grid]
layout = "4x4:2+1"
disk_capacity_bytes = 17179869184

[store.watchdog]
$2

[record]
seal_interval_ms = 2000
EOF
    nice -n "$NICE" "$bin" serve --data-dir "$BENCH_DIR" --listen 127.0.0.1:0 --simulated-spin-up-ms 200 2> "$BENCH_DIR/serve.log" &
    server_pid=$!
    for _ in $(seq 600); do
        endpoint=$(sed -n 's/.*S3 endpoint \(http[^ ]*\).*/\1/p' "$BENCH_DIR/serve.log" | head -1)
        [ -n "$endpoint" ] && break
        sleep 0.1
    done
    [ -n "$endpoint" ] || { cat "$BENCH_DIR/serve.log"; exit 1; }
    export PERMAFROST_ENDPOINT=$endpoint
}
stop_server() { kill "$server_pid"; wait "$server_pid" || true; server_pid=""; }
# A signed request to the server's own endpoints: admin METHOD PATH.
admin() { curl -sf -X "$1" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" --aws-sigv4 "aws:amz:us-east-1:s3" -u "$PERMAFROST_ROOT_USER:$PERMAFROST_ROOT_PASSWORD" "$endpoint$2"; }
hold='interval_ms = 1000
max_age_ms = 100000000000
start_off_disk_above_bytes = 100000000000000
persist_spinning_above_bytes = 100000000000000
pressure_fill_percent = 100.0
persist_under_pressure_above_bytes = 100000000000000'

# CPU seconds (user + system) of process $1 and every thread it had.
process_cpu() { python3 -c "import os; f=open('/proc/$1/stat').read().rsplit(')',1)[1].split(); print((int(f[11])+int(f[12]))/os.sysconf('SC_CLK_TCK'))"; }
# Record `$1` (scan name) at rate $2 for $3 s; sets status (JSON), send_report (JSON), cpu_rec (the scan's
# threads, as the recorder counts them), cpu_server (the whole server process in the same time).
record_run() {
    local name=$1 rate=$2 seconds=$3 port=$((port_base++))
    "$bin" record start "bench/Pf/$name" --listen "127.0.0.1:$port" --udps > /dev/null
    local s0; s0=$(process_cpu "$server_pid")
    send_report=$(nice -n "$NICE" "$bin" record send --to "127.0.0.1:$port" --rate "$rate" --seconds "$seconds" --udps --json)
    sleep 2
    status=$("$bin" record stop "bench/Pf/$name" --json)
    cpu_rec=$(echo "$status" | json "f\"{sum(d['cpu_seconds'].values()):.2f}\"")
    cpu_threads=$(echo "$status" | json "', '.join(f'{k} {v:.2f} s' for k, v in d['cpu_seconds'].items())")
    cpu_server=$(python3 -c "print(f'{$(process_cpu "$server_pid") - $s0:.2f}')")
}
# Frames sent and not stored (the kernel's drops, the ring's, and any after the last frame stored).
lost_of() { python3 -c "print($(echo "$send_report" | json "d['frames_sent']") - $(echo "$status" | json "d['writer']['loss']['frames_received']"))"; }

if [[ " $PARTS " == *" A "* ]]; then
    say ""
    say "## A. floor: recvmmsg to a file, $MAIN_RATE for $FLOOR_SECONDS s (uptime: $(uptime | sed 's/.*load/load/'))"
    port=$((port_base++)); mkdir -p "$BENCH_DIR"
    frames=$(python3 -c "print(int($(rate_bits "$MAIN_RATE") / (8 * 8032) * $FLOOR_SECONDS))")
    nice -n "$NICE" "$bin" record floor --listen "127.0.0.1:$port" --datagram-bytes 8040 --out "$BENCH_DIR/floor.bin" --datagrams "$frames" > "$BENCH_DIR/floor.json" &
    floor_pid=$!; sleep 0.5
    nice -n "$NICE" "$bin" record send --to "127.0.0.1:$port" --rate "$MAIN_RATE" --seconds "$FLOOR_SECONDS" --udps --json > "$BENCH_DIR/floor-send.json"
    wait $floor_pid
    floor=$(cat "$BENCH_DIR/floor.json"); rm -f "$BENCH_DIR/floor.bin"
    floor_cpu_per_gbit=$(echo "$floor" | json "d['cpu_seconds'] / (d['bytes'] * 8 / 1e9)")
    disk=$(dd if=/dev/zero of="$BENCH_DIR/dd.bin" bs=1M count=4096 conv=fdatasync 2>&1 | tail -1); rm -f "$BENCH_DIR/dd.bin"
    say "disk: $disk"
    say "floor: $(echo "$floor" | json "d['datagrams']") datagrams, kernel drops $(echo "$floor" | json "d['kernel_drops']"), $(echo "$floor" | json "f\"{d['bytes']*8/d['seconds']/1e9:.3f}\"") Gbit/s received, CPU $(echo "$floor" | json "d['cpu_seconds']") s = $(python3 -c "print(f'{$floor_cpu_per_gbit:.4f}')") CPU-s per Gbit"
fi

if [[ " $PARTS " == *" B "* ]]; then
    say ""
    say "## B. main: $MAIN_SECONDS s at $MAIN_RATE, 8,032-byte frames, udps (uptime: $(uptime | sed 's/.*load/load/'))"
    start_server 40000000000 "$hold"
    record_run main "$MAIN_RATE" "$MAIN_SECONDS"
    sent=$(echo "$send_report" | json "d['frames_sent']")
    bytes=$(echo "$status" | json "d['writer']['bytes_written']")
    say "sender: $sent frames at $(echo "$send_report" | json "f\"{d['rate_bits_per_second']/1e9:.3f}\"") Gbit/s, at worst $(echo "$send_report" | json "f\"{d['behind_ms_max']:.0f}\"") ms behind"
    say "recorder: $(echo "$status" | json "d['writer']['loss']['frames_received']") frames stored, missing by sequence $(echo "$status" | json "d['writer']['loss']['frames_missing']"), kernel drops $(echo "$status" | json "d['kernel_drops']") (snmp RcvbufErrors $(echo "$status" | json "d['udp_rcvbuf_errors_system']")), dropped with the writer behind $(echo "$status" | json "d['ring_dropped_frames']"), state $(echo "$status" | json "d['state']")"
    say "ring: $(echo "$status" | json "d['ring_bytes_allocated'] >> 20") MiB allocated, at most $(echo "$status" | json "d['ring_bytes_used_max'] >> 20") MiB waiting for the writer"
    t0=$(now)
    check=$("$bin" record check vlbi/bench/Pf/main.vdif --rate "$MAIN_RATE" --seconds "$MAIN_SECONDS" --udps 2>&1) \
        || check="$check; less what the scan lists as missing: $("$bin" record check vlbi/bench/Pf/main.vdif --rate "$MAIN_RATE" --seconds "$MAIN_SECONDS" --udps --gaps-from-scan 2>&1)"
    say "re-read: $check ($(elapsed "$t0" "$(now)") s)"
    rec_cpu_per_gbit=$(python3 -c "print($cpu_rec / ($bytes * 8 / 1e9))")
    say "CPU: recorder threads $cpu_rec s ($cpu_threads), whole server $cpu_server s for $(gbits $((bytes * 8))) Gbit = $(python3 -c "print(f'{$rec_cpu_per_gbit:.4f}')") CPU-s per Gbit (server $(python3 -c "print(f'{$cpu_server / ($bytes * 8 / 1e9):.4f}')"))"
    if [ -n "${floor_cpu_per_gbit:-}" ]; then
        say "ratio recorder / floor CPU per Gbit: $(ratio "$rec_cpu_per_gbit" "$floor_cpu_per_gbit")x (whole server: $(ratio "$cpu_server / ($bytes * 8 / 1e9)" "$floor_cpu_per_gbit")x)"
    fi
    stop_server
fi

if [[ " $PARTS " == *" C "* ]]; then
    say ""
    say "## C. ladder: $LADDER_SECONDS s at each of $LADDER_RATES Gbit/s (uptime: $(uptime | sed 's/.*load/load/'))"
    start_server 40000000000 "$hold"
    highest=none
    for g in $LADDER_RATES; do
        record_run "ladder-$g" "${g}Gbps" "$LADDER_SECONDS"
        lost=$(lost_of)
        achieved=$(echo "$send_report" | json "d['rate_bits_per_second']/1e9")
        bytes=$(echo "$status" | json "d['writer']['bytes_written']")
        verdict=lossy
        if [ "$lost" = 0 ] && python3 -c "import sys; sys.exit(0 if $achieved >= 0.95 * $g else 1)"; then verdict=lossless; highest="$g Gbit/s"; fi
        if python3 -c "import sys; sys.exit(0 if $achieved < 0.95 * $g else 1)"; then verdict="$verdict (the sender reached only $(printf %.2f "$achieved") Gbit/s)"; fi
        say "$g Gbit/s: sent $(printf %.3f "$achieved") Gbit/s, lost $lost (missing $(echo "$status" | json "d['writer']['loss']['frames_missing']"), kernel $(echo "$status" | json "d['kernel_drops']"), writer behind $(echo "$status" | json "d['ring_dropped_frames']"), ring at most $(echo "$status" | json "d['ring_bytes_used_max'] >> 20") MiB), recorder CPU $(python3 -c "print(f'{$cpu_rec / max($bytes * 8 / 1e9, 1e-9):.4f}')") s/Gbit: $verdict"
        "$bin" rm "vlbi/bench/Pf/ladder-$g.vdif" > /dev/null
        admin POST "/_permafrost/gc?ignore_grace=true" > /dev/null || say "(gc failed: the ladder's scans stay in the cache)"
    done
    say "highest lossless rate: $highest"
    stop_server
fi

if [[ " $PARTS " == *" D "* ]]; then
    say ""
    say "## D. stress: $STRESS_SECONDS s at $STRESS_RATE with grid disk 0 failed, cache $STRESS_CACHE_BYTES bytes, a reader following the scan, the cache draining (uptime: $(uptime | sed 's/.*load/load/'))"
    start_server "$STRESS_CACHE_BYTES" 'interval_ms = 500
max_age_ms = 1000
start_off_disk_above_bytes = 1
persist_spinning_above_bytes = 1'
    admin POST /_permafrost/api/v1/disks/0/fail > /dev/null \
        && say "grid disk 0 failed through the admin API" || say "could not fail grid disk 0 (admin API missing?)"
    port=$((port_base++))
    "$bin" record start bench/Pf/stress --listen "127.0.0.1:$port" --udps > /dev/null
    nice -n "$NICE" "$bin" record send --to "127.0.0.1:$port" --rate "$STRESS_RATE" --seconds "$STRESS_SECONDS" --udps --json > "$BENCH_DIR/stress-send.json" &
    sender=$!
    read_bytes=0; reads=0; read_errors=0; offset=0; lag_max=0
    while kill -0 $sender 2>/dev/null; do
        size=$("$bin" stat vlbi/bench/Pf/stress.vdif --json | json "d['size_bytes']")
        if [ "$size" -gt "$offset" ]; then
            if n=$("$bin" get vlbi/bench/Pf/stress.vdif - --range "$offset-$((size - 1))" | wc -c); then
                read_bytes=$((read_bytes + n)); reads=$((reads + 1)); offset=$size
            else
                read_errors=$((read_errors + 1))
            fi
        fi
        sleep 1
    done
    wait $sender
    sleep 2
    status=$("$bin" record stop bench/Pf/stress --json)
    send_report=$(cat "$BENCH_DIR/stress-send.json")
    cpu_rec=$(echo "$status" | json "f\"{sum(d['cpu_seconds'].values()):.2f}\"")
    say "recorder: $(echo "$status" | json "d['writer']['loss']['frames_received']") frames stored of $(python3 -c "import json; print(json.load(open('$BENCH_DIR/stress-send.json'))['frames_sent'])") sent, lost $(lost_of) (kernel $(echo "$status" | json "d['kernel_drops']"), writer behind $(echo "$status" | json "d['ring_dropped_frames']"), ring at most $(echo "$status" | json "d['ring_bytes_used_max'] >> 20") MiB), state $(echo "$status" | json "d['state']"), error $(echo "$status" | json "d['error']")"
    say "reader: $reads ranged reads, $read_bytes bytes, $read_errors failed reads"
    check=$("$bin" record check vlbi/bench/Pf/stress.vdif --rate "$STRESS_RATE" --seconds "$STRESS_SECONDS" --udps --gaps-from-scan 2>&1) || true
    say "re-read: $check"
    say "recorder CPU: $cpu_rec s; cache/grid at the end: $("$bin" status 2>/dev/null | grep -iE 'cache|waiting|persisted' | head -4 | tr '\n' ';')"
    stop_server
fi
say ""
say "results: $SUMMARY"
