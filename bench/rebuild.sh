#!/usr/bin/env bash
# Benchmark 4 of BENCHMARKS.md on its own, repeated: rebuild of one data disk (fail + replace + rebuild) next to an
# O_DIRECT dd copy of the same physical bytes, and a degraded read of the failed disk's bucket next to a healthy
# read of it, every pair measured in the same round.
#
# Usage: bench/rebuild.sh [--rounds N] [--data-mib M] [--disk-size SIZE] [--scratch DIR] [--same-input]
#   defaults: 3 rounds, 256 MiB on each data disk of bucket 0's hPG, 512MiB disks, /tmp/permafrost-rebuild
#   --same-input  write the same bytes to every bucket, as bench/run.sh did before 2026-11-24: the hP of the four
#                 equal data disks is then all zeros, which makes every read of it scrub each stripe (an all-zero
#                 block in a written stripe is checked, see docs/engine.md) and costs one more read of the hP
# Environment: PERMAFROST_BIN (default: target/release/permafrost of this checkout, built if missing).
# Raw numbers go to bench/out/rebuild-<UTC time>/ (gitignored); the summary is printed and saved as summary.txt.
set -euo pipefail

ROUNDS=3
DATA_MIB=256
DISK_SIZE=512MiB
SCRATCH=/tmp/permafrost-rebuild
SAME_INPUT=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift ;;
        --data-mib) DATA_MIB="$2"; shift ;;
        --disk-size) DISK_SIZE="$2"; shift ;;
        --scratch) SCRATCH="$2"; shift ;;
        --same-input) SAME_INPUT=1 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 64 ;;
    esac
    shift
done

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${PERMAFROST_BIN:-}"
if [[ -z $BIN ]]; then
    cargo build -q --release -p permafrost --manifest-path "$ROOT/Cargo.toml"
    BIN="$ROOT/target/release/permafrost"
fi
OUT="$ROOT/bench/out/rebuild-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$OUT" "$SCRATCH"
SUMMARY="$OUT/summary.txt"
source "$ROOT/bench/common.sh"

{
    echo "date (UTC):   $(date -u '+%Y-%m-%d %H:%M:%S')"
    echo "host:         $(machine)"
    echo "binary:       $BIN"
    echo "git:          $(commit_measured "$ROOT")"
    echo "data:         $DATA_MIB MiB on each data disk of bucket 0's hPG, disks $DISK_SIZE, $ROUNDS rounds, same input $SAME_INPUT"
    echo "load average: $(loadavg) (start)"
} | tee "$SUMMARY"
lscpu > "$OUT/lscpu.txt"

GRID="$SCRATCH/grid"
rm -rf "$GRID"
"$BIN" grid init --dir "$GRID" --layout 8x6:4+1 --disk-size "$DISK_SIZE" --spin-up-ms 0 \
    --idle-timeout-ms 3600000 --spinning-max 48 --json > "$OUT/init.json"
sed -i 's/^scrub_slice_bytes = .*/scrub_slice_bytes = 0/' "$GRID/grid.toml"
INPUT="$SCRATCH/input.bin"
OTHER="$SCRATCH/other.bin"
dd if=/dev/urandom of="$INPUT" bs=4M count=$((DATA_MIB / 4)) status=none
"$BIN" grid status --dir "$GRID" --json > "$OUT/status-empty.json"
# Data disk of bucket 0, the other disks of its hPG (the rebuild's sources) and their buckets.
read -r DISK0 SOURCES HPG_BUCKETS < <(python3 - "$OUT/status-empty.json" <<'EOF'
import json, sys
disks = json.load(open(sys.argv[1]))["disks"]
data = {d["role"]["data"]["bucket"]: d["index"] for d in disks if "data" in d["role"]}
group = []
for d in disks[data[0]:]:
    group.append(d)
    if "data" not in d["role"]:
        break  # the group's hP
sources = ",".join(str(d["index"]) for d in group[1:])
print(data[0], sources, " ".join(str(d["role"]["data"]["bucket"]) for d in group[1:-1]))
EOF
)
DISK_FILE="$GRID/disks/disk-$(printf %02d "$DISK0").img"
"$BIN" grid write --dir "$GRID" --bucket 0 --offset 0 --input "$INPUT" --mode serialized --json >> "$OUT/write.json"
for b in $HPG_BUCKETS; do
    [[ $SAME_INPUT == 1 ]] || dd if=/dev/urandom of="$OTHER" bs=4M count=$((DATA_MIB / 4)) status=none
    "$BIN" grid write --dir "$GRID" --bucket "$b" --offset 0 --input "$([[ $SAME_INPUT == 1 ]] && echo "$INPUT" || echo "$OTHER")" \
        --mode serialized --json >> "$OUT/write.json"
done
# Physical bytes of the data: whole IDR stripes of (2 + 16*17) 4 KiB blocks per MiB, after the 1 MiB header.
RAW_BYTES=$((DATA_MIB * (2 + 16 * 17) * 4096))
DATA_BYTES=$((DATA_MIB << 20))
say "setup: buckets 0 $HPG_BUCKETS hold $DATA_MIB MiB each; disk $DISK0 = bucket 0 ($RAW_BYTES physical bytes)"

rebuild_in=(); rebuild_wall=(); copy_s=(); sources_s=(); healthy_s=(); degraded_s=()
for i in $(seq "$ROUNDS"); do
    "$BIN" grid read --dir "$GRID" --bucket 0 --offset 0 --length "$DATA_BYTES" --output /dev/null --json > "$OUT/read-healthy-$i.json"
    healthy_s+=("$(jq -r .seconds "$OUT/read-healthy-$i.json")")
    t0=$(now)
    "$BIN" grid fail --dir "$GRID" --disk "$DISK0" 2> /dev/null
    "$BIN" grid read --dir "$GRID" --bucket 0 --offset 0 --length "$DATA_BYTES" --output /dev/null --json > "$OUT/read-degraded-$i.json"
    t1=$(now)
    degraded_s+=("$(jq -r .seconds "$OUT/read-degraded-$i.json")")
    "$BIN" grid replace --dir "$GRID" --disk "$DISK0" 2> /dev/null
    "$BIN" grid rebuild --dir "$GRID" --disk "$DISK0" --json > "$OUT/rebuild-$i.json"
    t2=$(now)
    rebuild_in+=("$(jq -r .seconds "$OUT/rebuild-$i.json")")
    # Wall: fail + replace + rebuild processes, without the degraded read between them.
    rebuild_wall+=("$(python3 -c "print(f'{$t2 - $t0 - ${degraded_s[-1]}:.3f}')")")
    COPY="$SCRATCH/copy.img"
    rm -f "$COPY"
    dd if="$DISK_FILE" of="$COPY" bs=4M iflag=direct,skip_bytes,count_bytes oflag=direct skip=$((1 << 20)) \
        count="$RAW_BYTES" conv=fsync 2> "$OUT/dd-copy-$i.txt"
    copy_s+=("$(dd_seconds "$OUT/dd-copy-$i.txt")")
    rm -f "$COPY"
    # What the rebuild must read at least: the same range of each source disk, one after another.
    t0=$(now)
    for d in ${SOURCES//,/ }; do
        dd if="$GRID/disks/disk-$(printf %02d "$d").img" of=/dev/null bs=4M iflag=direct,skip_bytes,count_bytes \
            skip=$((1 << 20)) count="$RAW_BYTES" status=none
    done
    sources_s+=("$(elapsed "$t0" "$(now)")")
    say "round $i: rebuild $(jq -r '[.report.bytes_recovered, .report.bytes_recovered_concurrently // 0] | map(tostring) | join(" + ")' "$OUT/rebuild-$i.json") bytes in ${rebuild_in[-1]} s inside (${rebuild_wall[-1]} s wall fail+replace+rebuild), dd copy ${copy_s[-1]} s -> $(ratio "${rebuild_in[-1]}" "${copy_s[-1]}")x, dd read of the sources ${sources_s[-1]} s; read healthy ${healthy_s[-1]} s, degraded ${degraded_s[-1]} s -> $(ratio "${degraded_s[-1]}" "${healthy_s[-1]}")x (load $(loadavg))"
done
RI=$(median "${rebuild_in[@]}"); RW=$(median "${rebuild_wall[@]}"); CS=$(median "${copy_s[@]}"); SS=$(median "${sources_s[@]}")
HS=$(median "${healthy_s[@]}"); DS=$(median "${degraded_s[@]}")
say "median: rebuild $RI s inside, $RW s wall; dd copy $CS s; ratio inside $(ratio "$RI" "$CS"), wall $(ratio "$RW" "$CS") (model 2.5)"
say "median: dd read of the sources (disks $SOURCES) one after another $SS s; rebuild inside ÷ that $(ratio "$RI" "$SS")"
say "median: healthy read $HS s, degraded read $DS s; ratio $(ratio "$DS" "$HS") (model: 4 disks read instead of 1)"
"$BIN" grid read --dir "$GRID" --bucket 0 --offset 0 --length "$DATA_BYTES" --output "$SCRATCH/readback.bin" --json > /dev/null
cmp "$SCRATCH/readback.bin" "$INPUT" && say "bucket 0 reads back identical to its input after the rebuilds"
"$BIN" grid verify-parity --dir "$GRID" --json > "$OUT/verify-parity.json" || say "verify-parity reported mismatches!"
say "verify-parity: $(jq -c '{mismatches: (.mismatches | length), bytes_checked}' "$OUT/verify-parity.json")"
say "load average: $(loadavg) (end)"
rm -rf "$GRID" "$INPUT" "$OTHER" "$SCRATCH/readback.bin"
echo "raw numbers: $OUT"
