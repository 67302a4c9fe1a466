#!/usr/bin/env bash
# Benchmarks of issue 2 (the archive engine), each next to its baseline measured in the same run:
#   1. IDR encode / check-on-read GB/s per core vs memcpy          (cargo bench -p permafrost-idr --bench idr)
#   2. read promise of a file-backed bucket vs O_DIRECT dd of the same disk file   (permafrost grid read)
#   3. write throughput + I/O amplification per mode vs raw O_DIRECT write          (engine_io bench)
#   4. rebuild of one disk (fail + replace + rebuild) vs O_DIRECT dd copy of the same bytes
#
# Usage: bench/run.sh [--quick] [--scratch DIR] [--repeat N]
#   --quick     small sizes (256 MiB bucket data, 64 MiB writes), short criterion runs: a few minutes
#   --scratch   where grids and copies go (default /tmp/permafrost-bench); must allow O_DIRECT (ext4, xfs)
#   --repeat    read / dd pairs measured (default 3; the median is reported)
#   --skip-idr  skip benchmark 1 (the IDR compute bench)
#   --s3        run the benchmarks of issue 3 instead (the S3 service: bench/s3.py, with --quick its quick
#               variant; further arguments after `--` go to bench/s3.py)
# Benchmark 4 alone, repeated, with a degraded read next to a healthy one: bench/rebuild.sh.
# The simulators of issue 4 (sim energy, sim cache on a 10 M-request trace) have their own script: bench/sim.sh.
# Environment: CARGO_TARGET_DIR (default /work/target-bench); PERMAFROST_BIN=path uses that binary instead of
# building `permafrost` in release mode.
# Raw numbers go to bench/out/<UTC timestamp>/ (gitignored); the summary is printed and saved as summary.txt.
# Results are ratios measured in the same run: this machine is shared and absolute times swing.
set -euo pipefail

QUICK=0
SCRATCH=/tmp/permafrost-bench
REPEAT=3
SKIP_IDR=0
S3=0
S3_ARGS=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --quick) QUICK=1 ;;
        --scratch) SCRATCH="$2"; shift ;;
        --repeat) REPEAT="$2"; shift ;;
        --skip-idr) SKIP_IDR=1 ;;
        --s3) S3=1 ;;
        --) shift; S3_ARGS=("$@"); break ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 64 ;;
    esac
    shift
done

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/work/target-bench}"
if [[ $S3 == 1 ]]; then
    S3_FLAGS=()
    [[ $QUICK == 1 ]] && S3_FLAGS+=(--quick)
    [[ -n ${PERMAFROST_BIN:-} ]] && S3_FLAGS+=(--bin "$PERMAFROST_BIN")
    exec "$ROOT/.venv/bin/python" "$ROOT/bench/s3.py" "${S3_FLAGS[@]}" "${S3_ARGS[@]}"
fi
OUT="$ROOT/bench/out/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$OUT" "$SCRATCH"
SUMMARY="$OUT/summary.txt"
BIN="${PERMAFROST_BIN:-}"   # a prebuilt binary skips the release build

if [[ $QUICK == 1 ]]; then
    DATA_MIB=256; DISK_SIZE=512MiB; CRITERION=(--warm-up-time 0.1 --measurement-time 0.3)
else
    DATA_MIB=1024; DISK_SIZE=2GiB; CRITERION=()
fi
DATA_BYTES=$((DATA_MIB << 20))

source "$ROOT/bench/common.sh"

{
    echo "date (UTC):   $(date -u '+%Y-%m-%d %H:%M:%S')"
    echo "host:         $(machine)"
    echo "kernel:       $(uname -sr)"
    echo "file system:  $(df -T "$SCRATCH" | awk 'NR == 2 { print $2 " on " $1 }') (scratch $SCRATCH)"
    echo "git:          $(commit_measured "$ROOT")"
    echo "mode:         $([[ $QUICK == 1 ]] && echo quick || echo full), bucket data $DATA_MIB MiB, disks $DISK_SIZE"
    echo "load average: $(loadavg) (start)"
} | tee "$SUMMARY"
lscpu > "$OUT/lscpu.txt"

# ---- 1. IDR compute -------------------------------------------------------------------------------------------
if [[ $SKIP_IDR == 0 ]]; then
    say ""
    say "== 1. IDR encode and check-on-read, one core, vs memcpy of the same buffers (load $(loadavg))"
    cargo bench -q -p permafrost-idr --bench idr -- "${CRITERION[@]}" > "$OUT/idr.txt" 2> "$OUT/idr.stderr"
    sed -n '/operation (one core)/,$p' "$OUT/idr.txt" | tee -a "$SUMMARY"
fi

# ---- build the CLI ---------------------------------------------------------------------------------------------
if [[ -z $BIN ]]; then
    cargo build -q --release -p permafrost 2> "$OUT/build.stderr" || { cat "$OUT/build.stderr" >&2; exit 1; }
    BIN="$CARGO_TARGET_DIR/release/permafrost"
fi

# ---- 2. read promise vs O_DIRECT dd -----------------------------------------------------------------------------
GRID="$SCRATCH/grid"
rm -rf "$GRID"
"$BIN" grid init --dir "$GRID" --disk-size "$DISK_SIZE" --spin-up-ms 0 --idle-timeout-ms 3600000 \
    --spinning-max 48 --json > "$OUT/init.json"
# The scrub of a slice on every spin-up would compete with the measured read; it is measured separately below.
sed -i 's/^scrub_slice_bytes = .*/scrub_slice_bytes = 0/' "$GRID/grid.toml"
INPUT="$SCRATCH/input.bin"
dd if=/dev/urandom of="$INPUT" bs=4M count=$((DATA_MIB / 4)) status=none
"$BIN" grid status --dir "$GRID" --json > "$OUT/status-empty.json"
# Data disk of bucket 0 and the other data disks of its hPG (same hP).
read -r DISK0 HPG_BUCKETS < <(python3 - "$OUT/status-empty.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
disks = s["disks"]
data = {d["role"]["data"]["bucket"]: d["index"] for d in disks if "data" in d["role"]}
# Groups are consecutive runs of hn data disks followed by their hP in grid order (docs/engine.md).
d0 = data[0]
group = []
for d in disks[d0:]:
    if "data" in d["role"]:
        group.append(d["role"]["data"]["bucket"])
    else:
        break
print(d0, " ".join(str(b) for b in group[1:]))
EOF
)
DISK_FILE="$GRID/disks/disk-$(printf %02d "$DISK0").img"

say ""
say "== 2. read promise of bucket 0 ($DATA_MIB MiB) vs O_DIRECT sequential read of its disk file"
t0=$(now)
"$BIN" grid write --dir "$GRID" --bucket 0 --offset 0 --input "$INPUT" --mode serialized --json > "$OUT/write-bucket0.json"
t1=$(now)
say "   (setup) CLI serialized write of bucket 0: $(jq -r '.mb_per_s | floor' "$OUT/write-bucket0.json") MB/s inside, $(elapsed "$t0" "$t1") s wall (load $(loadavg))"
# Physical bytes the read touches: the 1 MiB header, then whole IDR stripes of (2 + 16*17) 4 KiB blocks per MiB.
PHYS_PER_MIB=$(((2 + 16 * 17) * 4096))
RAW_BYTES=$((DATA_MIB * PHYS_PER_MIB))
RAW_BLOCKS=$((RAW_BYTES / 4096))
read_inside=(); read_wall=(); dd_s=()
for i in $(seq "$REPEAT"); do
    t0=$(now)
    "$BIN" grid read --dir "$GRID" --bucket 0 --offset 0 --length "$DATA_BYTES" --output /dev/null --json > "$OUT/read-$i.json"
    t1=$(now)
    read_inside+=("$(jq -r .seconds "$OUT/read-$i.json")")
    read_wall+=("$(elapsed "$t0" "$t1")")
    dd if="$DISK_FILE" of=/dev/null bs=4M iflag=direct,skip_bytes,count_bytes skip=$((1 << 20)) count="$RAW_BYTES" 2> "$OUT/dd-read-$i.txt"
    dd_s+=("$(dd_seconds "$OUT/dd-read-$i.txt")")
    echo "   run $i: read promise ${read_inside[-1]} s inside, ${read_wall[-1]} s wall; dd ${dd_s[-1]} s (load $(loadavg))" | tee -a "$SUMMARY"
done
RI=$(median "${read_inside[@]}"); RW=$(median "${read_wall[@]}"); RD=$(median "${dd_s[@]}")
say "   read promise: $(python3 -c "print(f'{$DATA_BYTES / $RI / 1e6:.0f}')") MB/s of user data inside, $(python3 -c "print(f'{$DATA_BYTES / $RW / 1e6:.0f}')") MB/s wall (process start to exit)"
say "   O_DIRECT dd of the same $RAW_BYTES physical bytes: $(python3 -c "print(f'{$RAW_BYTES / $RD / 1e6:.0f}')") MB/s"
say "   ratio (user bytes/s ÷ raw bytes/s):        inside $(ratio "$RD * $DATA_BYTES" "$RI * $RAW_BYTES"), wall $(ratio "$RD * $DATA_BYTES" "$RW * $RAW_BYTES")"
say "   ratio (time of dd ÷ time of read promise): inside $(ratio "$RD" "$RI"), wall $(ratio "$RD" "$RW")   [goal >= 0.95]"
say "   (the two differ by the IDR overhead: $RAW_BYTES physical bytes hold $DATA_BYTES user bytes, x$(ratio "$RAW_BYTES" "$DATA_BYTES"))"
# The same read with the default scrub-on-spin-up slice (64 MiB of the disk verified in the background).
sed -i 's/^scrub_slice_bytes = .*/scrub_slice_bytes = 67108864/' "$GRID/grid.toml"
"$BIN" grid read --dir "$GRID" --bucket 0 --offset 0 --length "$DATA_BYTES" --output /dev/null --json > "$OUT/read-with-scrub.json"
sed -i 's/^scrub_slice_bytes = .*/scrub_slice_bytes = 0/' "$GRID/grid.toml"
say "   with the default 64 MiB scrub slice on spin-up: $(jq -r '.mb_per_s | floor' "$OUT/read-with-scrub.json") MB/s inside"

# ---- 3. writes and I/O amplification ------------------------------------------------------------------------------
say ""
say "== 3. write throughput and I/O amplification per mode vs raw O_DIRECT write (load $(loadavg))"
QUICK_FLAG=(); [[ $QUICK == 1 ]] && QUICK_FLAG=(--quick)
cargo bench -q -p permafrost-engine --bench engine_io -- "${QUICK_FLAG[@]}" --dir "$SCRATCH/engine-io" \
    --json "$OUT/engine_io.json" > "$OUT/engine_io.txt" 2> "$OUT/engine_io.stderr"
sed -n '/write throughput and I\/O amplification/,$p' "$OUT/engine_io.txt" | tee -a "$SUMMARY"

# ---- 4. rebuild of one disk vs O_DIRECT copy --------------------------------------------------------------------
say ""
say "== 4. rebuild of disk $DISK0 (bucket 0) vs O_DIRECT copy of the same bytes"
# Fill the other data disks of bucket 0's hPG too, so the rebuild reads real data from every member. Each with its
# own bytes: with the same input on all four, their hP is all zeros, which costs a scrub read of every hP stripe
# (all-zero blocks in written stripes are checked, docs/engine.md) and is not what a rebuild normally reads.
for b in $HPG_BUCKETS; do
    dd if=/dev/urandom of="$SCRATCH/other.bin" bs=4M count=$((DATA_MIB / 4)) status=none
    "$BIN" grid write --dir "$GRID" --bucket "$b" --offset 0 --input "$SCRATCH/other.bin" --mode delayed --json >> "$OUT/write-hpg.json"
done
rm -f "$SCRATCH/other.bin"
"$BIN" grid flush --dir "$GRID"
say "   (setup) buckets 0 $HPG_BUCKETS hold $DATA_MIB MiB each (load $(loadavg))"
t0=$(now)
"$BIN" grid fail --dir "$GRID" --disk "$DISK0" 2> /dev/null
"$BIN" grid replace --dir "$GRID" --disk "$DISK0" 2> /dev/null
"$BIN" grid rebuild --dir "$GRID" --disk "$DISK0" --json > "$OUT/rebuild.json"
t1=$(now)
REBUILD_INSIDE=$(jq -r .seconds "$OUT/rebuild.json")
REBUILD_WALL=$(elapsed "$t0" "$t1")
COPY="$SCRATCH/copy.img"
rm -f "$COPY"
dd if="$DISK_FILE" of="$COPY" bs=4M iflag=direct,skip_bytes,count_bytes oflag=direct skip=$((1 << 20)) \
    count="$RAW_BYTES" conv=fsync 2> "$OUT/dd-copy.txt"
COPY_S=$(dd_seconds "$OUT/dd-copy.txt")
rm -f "$COPY"
say "   rebuild: $(jq -r '"\(.report.bytes_recovered) (+ \(.report.bytes_recovered_concurrently // 0) by the background task meanwhile)"' "$OUT/rebuild.json") bytes recovered in $REBUILD_INSIDE s inside, $REBUILD_WALL s wall (fail + replace + rebuild)"
say "   O_DIRECT dd copy of $RAW_BYTES bytes (fsync): $COPY_S s (load $(loadavg))"
say "   ratio (rebuild time ÷ copy time): inside $(ratio "$REBUILD_INSIDE" "$COPY_S"), wall $(ratio "$REBUILD_WALL" "$COPY_S")"
say "   (I/O model on one shared device: rebuild reads hn = 4 members and writes 1 disk, a copy reads 1 and writes 1: 2.5x)"
"$BIN" grid verify-parity --dir "$GRID" --json > "$OUT/verify-parity.json" || { say "   verify-parity reported mismatches!"; }
say "   verify-parity after the rebuild: $(jq -c '{mismatches: (.mismatches | length), bytes_checked}' "$OUT/verify-parity.json" 2>/dev/null || cat "$OUT/verify-parity.json")"

say ""
say "load average: $(loadavg) (end)"
rm -rf "$GRID" "$INPUT" "$SCRATCH/engine-io"
echo "raw numbers: $OUT"
