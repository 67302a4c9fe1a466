#!/usr/bin/env bash
# Issue 13's cluster benchmark on one machine: network namespaces, one veth pair per topology link, each direction
# shaped with `tc ... tbf` to the link's capacity (docs/cluster-topology.toml: a client, a core relay, two edge
# relays, six data nodes, 200 Mbit/s links). Every relay runs `permafrost relay serve`, every data node
# `permafrost relay node` storing into its own archive (a data directory opened in-process for each object).
#
# Measured in one run, by the link byte counters (/sys/class/net/*/statistics) and wall time:
#   - writing one object with k copies through the replication tree vs client fan-out (the client sends each copy
#     itself; the same data nodes): the client's uplink bytes and the completion time;
#   - rebuilding onto n6 from a group of n (n-1 survivors n1.. holding their own pieces) through a parity tree vs
#     naive (n6 opens one stream per survivor): n6's downlink bytes and the rebuild time.
# Every stored copy is read back from its node's archive and compared (SHA-256) with the source; every rebuild
# with the XOR of the survivors' pieces. The script exits 1 when any check fails.
#
# With --failures, after that (issue 13's failure items, relay path), each on a write of k=3 copies:
#   - relay: `kill -9` the edge relay of the tree once it has received a quarter of the object: the write must
#     complete on another tree avoiding it (the client's uplink shows the resend), every copy byte-exact;
#   - node: `kill -9` a data node of the tree likewise: the write completes with the copy moved to another node;
#     the killed node, restarted, holds nothing of the object (no half-visible copy: the copy streams into the
#     archive as it arrives, and an unfinished put is never visible);
#   - node-exact: the same with `--to` naming the killed node: the write is not acknowledged (exit 1), the two
#     other copies are whole, the killed node holds nothing.
#
# Usage: bench/cluster.sh [--quick] [--object-mib M] [--copies 3,4,5] [--groups 3,4,5] [--rounds R]
#                         [--failures] [--failure-mib M] [--topology FILE] [--out DIR] [--scratch DIR]
#   defaults: 64 MiB object, copies 3,4,5, groups 3,4,5, 1 round, docs/cluster-topology.toml; failure
#   scenarios off (--failure-mib 64); --copies "" / --groups "" skip the writes / rebuilds
#   --quick   16 MiB object (about a minute)
# Needs root and `ip netns` (iproute2) with tbf. Environment: PERMAFROST_BIN (default: target/release/permafrost
# of this checkout, built if missing). Results: DIR/results.json (one record per run) and DIR/summary.txt
# (default DIR: bench/out/cluster-<UTC time>/). Every namespace it made is deleted on exit, also on failure.
set -euo pipefail

OBJECT_MIB=64
COPIES=3,4,5
GROUP_SIZES=3,4,5
ROUNDS=1
FAILURES=0
FAILURE_MIB=64
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TOPOLOGY="$ROOT/docs/cluster-topology.toml"
OUT=""
SCRATCH=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --quick) OBJECT_MIB=16 ;;
        --object-mib) OBJECT_MIB="$2"; shift ;;
        --copies) COPIES="$2"; shift ;;
        --groups) GROUP_SIZES="$2"; shift ;;
        --rounds) ROUNDS="$2"; shift ;;
        --topology) TOPOLOGY="$2"; shift ;;
        --out) OUT="$2"; shift ;;
        --scratch) SCRATCH="$2"; shift ;;
        --failures) FAILURES=1 ;;
        --failure-mib) FAILURE_MIB="$2"; shift ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 64 ;;
    esac
    shift
done

if [[ $(id -u) != 0 ]]; then
    echo "bench/cluster.sh: needs root (network namespaces)" >&2
    exit 77
fi
if ! ip netns list >/dev/null 2>&1; then
    echo "bench/cluster.sh: \`ip netns\` does not work here" >&2
    exit 77
fi

source "$ROOT/bench/common.sh"
BIN="${PERMAFROST_BIN:-}"
if [[ -z $BIN ]]; then
    nice -n 19 cargo build -q --release -p permafrost --manifest-path "$ROOT/Cargo.toml"
    BIN="$ROOT/target/release/permafrost"
fi
OUT="${OUT:-$ROOT/bench/out/cluster-$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
SCRATCH="${SCRATCH:-$(mktemp -d /tmp/permafrost-cluster.XXXXXX)}"
mkdir -p "$SCRATCH"
# The cluster secret every relay connection proves (docs/security.md "Cluster traffic"), one per run.
SECRET="$SCRATCH/cluster.secret"
(umask 077 && python3 -c 'import secrets; print(secrets.token_hex(32))' >"$SECRET")
SECRET_ARGS=(--secret-file "$SECRET")
SUMMARY="$OUT/summary.txt"
RESULTS="$OUT/results.json"
: >"$SUMMARY"
: >"$RESULTS.lines"
PORT=7400
TAG="pf$$"             # namespaces: $TAG-<node>; unique per run, so two runs never meet

NAMESPACES=()
PIDS=()
declare -A PID_OF      # node -> pid of its relay / data node process (ip netns exec and nice exec it)
cleanup() {
    local rc=$?
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
    rm -rf "$SCRATCH"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The topology as a tree from its client: "child parent capacity_mbit role" per line, parents before children.
python3 - "$TOPOLOGY" >"$OUT/tree.txt" <<'EOF'
import sys, tomllib
t = tomllib.load(open(sys.argv[1], "rb"))
role = {n["name"]: n["role"] for n in t["node"]}
clients = [n for n, r in role.items() if r == "client"]
if len(clients) != 1:
    sys.exit(f"{sys.argv[1]}: needs exactly one client, has {len(clients)}")
adj = {}
for l in t["link"]:
    a, b = l["between"]
    adj.setdefault(a, []).append((b, l["capacity_mbit"]))
    adj.setdefault(b, []).append((a, l["capacity_mbit"]))
seen, order, up = {clients[0]}, [clients[0]], {}
print(clients[0], "-", 0, "client")
for parent in order:
    for child, cap in adj.get(parent, []):
        if child == up.get(parent):
            continue
        if child in seen:
            sys.exit(f"{sys.argv[1]}: the links form a cycle at {child}; this script cables trees only")
        seen.add(child)
        up[child] = parent
        order.append(child)
        print(child, parent, cap, role[child])
if len(seen) != len(role):
    sys.exit(f"{sys.argv[1]}: nodes not connected to the client: {sorted(set(role) - seen)}")
EOF

declare -A PARENT CAP ROLE ADDR UPADDR LINK
NODES=()
i=0
while read -r name parent cap role; do
    NODES+=("$name")
    PARENT[$name]=$parent
    CAP[$name]=$cap
    ROLE[$name]=$role
    if [[ $parent != - ]]; then
        i=$((i + 1))
        LINK[$name]=$i
        ADDR[$name]="10.77.$i.2"      # a node's address: its end of the link to its parent
        UPADDR[$name]="10.77.$i.1"    # the parent's end of that link
    fi
done <"$OUT/tree.txt"
CLIENT="${NODES[0]}"
FIRST_CHILD=""
for n in "${NODES[@]}"; do [[ ${PARENT[$n]} == "$CLIENT" ]] && FIRST_CHILD=$n && break; done
ADDR[$CLIENT]="${UPADDR[$FIRST_CHILD]}"

# The nodes below $1 (not $1 itself).
descendants() {
    local n
    for n in "${NODES[@]}"; do
        local p=${PARENT[$n]}
        while [[ $p != - ]]; do
            if [[ $p == "$1" ]]; then echo "$n"; break; fi
            p=${PARENT[$p]}
        done
    done
}

for n in "${NODES[@]}"; do
    ip netns add "$TAG-$n"
    NAMESPACES+=("$TAG-$n")
    ip -n "$TAG-$n" link set lo up
    ip netns exec "$TAG-$n" sysctl -qw net.ipv4.ip_forward=1
done
for n in "${NODES[@]}"; do
    p=${PARENT[$n]}
    [[ $p == - ]] && continue
    l=${LINK[$n]}
    ip link add "${TAG}a$l" type veth peer name "${TAG}b$l"
    ip link set "${TAG}a$l" netns "$TAG-$p"
    ip link set "${TAG}b$l" netns "$TAG-$n"
    ip -n "$TAG-$p" link set "${TAG}a$l" name "d-$n"
    ip -n "$TAG-$n" link set "${TAG}b$l" name uplink
    ip -n "$TAG-$p" addr add "${UPADDR[$n]}/30" dev "d-$n"
    ip -n "$TAG-$n" addr add "${ADDR[$n]}/30" dev uplink
    ip -n "$TAG-$p" link set dev "d-$n" up
    ip -n "$TAG-$n" link set dev uplink up
    # Each direction shaped to the link's capacity (tbf on each end's egress).
    tc -n "$TAG-$p" qdisc add dev "d-$n" root tbf rate "${CAP[$n]}mbit" burst 256kb latency 100ms
    tc -n "$TAG-$n" qdisc add dev uplink root tbf rate "${CAP[$n]}mbit" burst 256kb latency 100ms
    ip -n "$TAG-$n" route add default via "${UPADDR[$n]}"
done
# Routes down the tree: every node reaches each node below a child through that child.
for p in "${NODES[@]}"; do
    for c in "${NODES[@]}"; do
        [[ ${PARENT[$c]} == "$p" ]] || continue
        for d in $(descendants "$c"); do
            ip -n "$TAG-$p" route add "${ADDR[$d]}/32" via "${ADDR[$c]}"
        done
    done
done

ADDR_ARGS=()
for n in "${NODES[@]}"; do
    [[ $n == "$CLIENT" ]] && continue
    ADDR_ARGS+=(--addr "$n=${ADDR[$n]}:$PORT")
done

# Start node $1's relay or data node (server side at nice -10, as every benchmark here).
start_node() {
    local n=$1
    case ${ROLE[$n]} in
        relay)
            ip netns exec "$TAG-$n" nice -n -10 "$BIN" relay serve --name "$n" --listen "${ADDR[$n]}:$PORT" "${SECRET_ARGS[@]}" \
                2>>"$OUT/$n.log" &
            ;;
        node)
            mkdir -p "$SCRATCH/$n"
            [[ -f $SCRATCH/$n/permafrost.toml ]] || cat >"$SCRATCH/$n/permafrost.toml" <<'EOF'
[store]
cache_bytes_max = 4294967296

[store.grid]
disk_capacity_bytes = 1073741824
EOF
            ip netns exec "$TAG-$n" nice -n -10 "$BIN" relay node --name "$n" --listen "${ADDR[$n]}:$PORT" "${SECRET_ARGS[@]}" \
                --data-dir "$SCRATCH/$n" 2>>"$OUT/$n.log" &
            ;;
        *) return 0 ;;
    esac
    PIDS+=($!)
    PID_OF[$n]=$!
}
# Wait until node $1 accepts connections (from the client's namespace).
wait_node() {
    for _ in $(seq 100); do
        ip netns exec "$TAG-$CLIENT" python3 -c "import socket,sys; socket.create_connection(('${ADDR[$1]}', $PORT), 1)" \
            2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}
for n in "${NODES[@]}"; do start_node "$n"; done
for n in "${NODES[@]}"; do
    [[ ${ROLE[$n]} == client ]] && continue
    wait_node "$n" || true
done

counter() { ip netns exec "$TAG-$1" cat "/sys/class/net/$2/statistics/$3"; }
in_ns() { local ns=$1; shift; ip netns exec "$TAG-$ns" "$@"; }
record() { echo "$1" >>"$RESULTS.lines"; }
FAILED=0

OBJECT_BYTES=$((OBJECT_MIB << 20))
head -c "$OBJECT_BYTES" /dev/urandom >"$SCRATCH/object"
OBJECT_SHA=$(sha256sum "$SCRATCH/object" | cut -d' ' -f1)

say "# bench/cluster.sh $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(commit_measured "$ROOT"), $(machine)"
say "# topology $TOPOLOGY: $(for n in "${NODES[@]}"; do [[ ${PARENT[$n]} != - ]] && printf '%s-%s ' "${PARENT[$n]}" "$n"; done)"
say "# namespaces $TAG-<node>, removed on exit"
say "# links shaped with tbf to capacity (${CAP[$FIRST_CHILD]} Mbit/s at the client); object $OBJECT_MIB MiB$( ((FAILURES)) && echo ", failure scenarios $FAILURE_MIB MiB"); load $(loadavg)"

# Read bucket/key back from node $1's archive and compare it with sha256 $3.
check_copy() {
    local node=$1 key=$2 want=$3 got
    got=$("$BIN" get --data-dir "$SCRATCH/$node" "relay/$key" - 2>>"$OUT/check.log" | sha256sum | cut -d' ' -f1)
    if [[ $got == "$want" ]]; then echo true; else echo false; fi
}

write_once() {   # round, k, mode (tree|fan-out)
    local round=$1 k=$2 mode=$3 key="obj-r$1-k$2-$3" extra=()
    [[ $mode == fan-out ]] && extra=(--fan-out)
    local tx0 rx0 t0 t1 tx1 json
    tx0=$(counter "$CLIENT" "d-$FIRST_CHILD" tx_bytes)
    t0=$(now)
    json=$(in_ns "$CLIENT" nice -n -10 "$BIN" relay send --topology "$TOPOLOGY" "${ADDR_ARGS[@]}" "${SECRET_ARGS[@]}" --copies "$k" \
        "${extra[@]}" --key "$key" --json "$SCRATCH/object" 2>>"$OUT/client.log") || FAILED=1
    t1=$(now)
    tx1=$(counter "$CLIENT" "d-$FIRST_CHILD" tx_bytes)
    local nodes exact=true
    nodes=$(python3 -c 'import json,sys; d = json.loads(sys.argv[1] or "null") or {}; print(" ".join(a["node"] for a in d.get("acks", []) if a["ok"]))' "$json")
    local count=0
    for n in $nodes; do
        count=$((count + 1))
        [[ $(check_copy "$n" "$key" "$OBJECT_SHA") == true ]] || { exact=false; FAILED=1; }
    done
    [[ $count == "$k" ]] || { exact=false; FAILED=1; }
    local wall up net
    wall=$(elapsed "$t0" "$t1")
    up=$((tx1 - tx0))
    # The transfer alone: the latest "last piece at" of this key in the data nodes' logs (each counted from
    # the node's first byte, which follows the client's start by a round trip); the rest is the store.
    net=$(cat "$OUT"/n*.log 2>/dev/null | python3 -c 'import re,sys; t=[float(m.group(1)) for m in re.finditer(r"stored relay/"+re.escape(sys.argv[1])+r" .*?\(last piece at ([0-9.]+) s\)", sys.stdin.read())]; print(f"{max(t):.3f}" if t else "null")' "$key")
    record "{\"what\": \"write\", \"round\": $round, \"k\": $k, \"mode\": \"$mode\", \"object_bytes\": $OBJECT_BYTES, \"client_uplink_bytes\": $up, \"seconds\": $wall, \"transfer_seconds\": $net, \"copies_ok\": $count, \"byte_exact\": $exact, \"nodes\": \"$nodes\", \"send\": ${json:-null}}"
    say "write k=$k $(printf '%-8s' "$mode") client uplink $(ratio "$up" "$OBJECT_BYTES") x object, $wall s (last piece at the leaves $net s), copies $count/$k on [$nodes] byte-exact $exact"
}

REBUILD_ONTO="${NODES[${#NODES[@]}-1]}"     # the last data node (n6 in the example)
SURVIVORS=()
for n in "${NODES[@]}"; do [[ ${ROLE[$n]} == node && $n != "$REBUILD_ONTO" ]] && SURVIVORS+=("$n"); done

rebuild_once() {   # round, group n, mode (tree|naive)
    local round=$1 group=$2 mode=$3 extra=()
    [[ $mode == naive ]] && extra=(--naive)
    local from=("${SURVIVORS[@]:0:group-1}")
    local csv
    csv=$(IFS=,; echo "${from[*]}")
    local rx0 rx1 t0 t1 json out="$SCRATCH/rebuilt-$round-$group-$mode"
    rx0=$(counter "$REBUILD_ONTO" uplink rx_bytes)
    t0=$(now)
    json=$(in_ns "$REBUILD_ONTO" nice -n -10 "$BIN" relay rebuild --topology "$TOPOLOGY" "${ADDR_ARGS[@]}" "${SECRET_ARGS[@]}" \
        --onto "$REBUILD_ONTO" --from "$csv" --key piece --bytes "$OBJECT_BYTES" "${extra[@]}" --out "$out" \
        --json 2>>"$OUT/rebuild.log") || FAILED=1
    t1=$(now)
    rx1=$(counter "$REBUILD_ONTO" uplink rx_bytes)
    local want got exact
    want=$(python3 - "$SCRATCH" "${from[@]}" <<'EOF'
import hashlib, sys
acc = None
for n in sys.argv[2:]:
    b = int.from_bytes(open(f"{sys.argv[1]}/piece-{n}", "rb").read(), "little")
    acc = b if acc is None else acc ^ b
size = len(open(f"{sys.argv[1]}/piece-{sys.argv[2]}", "rb").read())
print(hashlib.sha256(acc.to_bytes(size, "little")).hexdigest())
EOF
)
    got=$(sha256sum "$out" 2>/dev/null | cut -d' ' -f1 || true)
    exact=false
    [[ $got == "$want" ]] && exact=true || FAILED=1
    rm -f "$out"
    local wall down
    wall=$(elapsed "$t0" "$t1")
    down=$((rx1 - rx0))
    record "{\"what\": \"rebuild\", \"round\": $round, \"group\": $group, \"mode\": \"$mode\", \"object_bytes\": $OBJECT_BYTES, \"root_downlink_bytes\": $down, \"seconds\": $wall, \"byte_exact\": $exact, \"survivors\": \"${from[*]}\", \"rebuild\": ${json:-null}}"
    say "rebuild group $group $(printf '%-6s' "$mode") $REBUILD_ONTO downlink $(ratio "$down" "$OBJECT_BYTES") x object, $wall s, from [${from[*]}] exact $exact"
}

# Warm-up, not measured: every data node creates its archive (grid, catalog) on its first object.
head -c 4096 /dev/urandom >"$SCRATCH/warm-up"
DATA_NODES=0
for n in "${NODES[@]}"; do [[ ${ROLE[$n]} == node ]] && DATA_NODES=$((DATA_NODES + 1)); done
in_ns "$CLIENT" "$BIN" relay send --topology "$TOPOLOGY" "${ADDR_ARGS[@]}" "${SECRET_ARGS[@]}" --copies "$DATA_NODES" --key warm-up \
    "$SCRATCH/warm-up" >>"$OUT/client.log" 2>&1 || { say "# FAILED: the warm-up write to every data node"; exit 1; }

for round in $(seq "$ROUNDS"); do
    for k in ${COPIES//,/ }; do
        write_once "$round" "$k" tree
        write_once "$round" "$k" fan-out
    done
done

if [[ -n $GROUP_SIZES ]]; then
    # Every survivor holds its own piece (different bytes) under the key "piece", written through the tree.
    for n in "${SURVIVORS[@]}"; do
        head -c "$OBJECT_BYTES" /dev/urandom >"$SCRATCH/piece-$n"
        in_ns "$CLIENT" "$BIN" relay send --topology "$TOPOLOGY" "${ADDR_ARGS[@]}" "${SECRET_ARGS[@]}" --to "$n" --key piece \
            "$SCRATCH/piece-$n" >/dev/null 2>>"$OUT/client.log" || FAILED=1
    done
    for round in $(seq "$ROUNDS"); do
        for g in ${GROUP_SIZES//,/ }; do
            rebuild_once "$round" "$g" tree
            rebuild_once "$round" "$g" naive
        done
    done
fi
# --failures: kill a relay or data node mid-write (see the header).
FAIL_RELAY="${FAIL_RELAY:-edge1}"   # in the first k=3 tree of the example topology
FAIL_NODE="${FAIL_NODE:-n2}"

# Kill node $1 (kill -9) once the link from its parent has carried $2 more bytes than $4 (its rx counter
# before the write), unless process $3 (the write) ends first. Prints the bytes it had received (-1: the write
# ended first). Polls every 5 ms from one shell inside the node's namespace (no process per poll).
kill_when() {
    local n=$1 bytes=$2 pid=$3 rx0=$4 victim=${PID_OF[$1]}
    ip netns exec "$TAG-$n" bash -c '
        exec {tick}<> <(:)
        f=/sys/class/net/uplink/statistics/rx_bytes
        while kill -0 '"$pid"' 2>/dev/null; do
            read -r rx <"$f"
            if (( rx - '"$rx0"' >= '"$bytes"' )); then
                kill -9 '"$victim"'
                echo $((rx - '"$rx0"'))
                exit 0
            fi
            read -r -t 0.005 -u "$tick" _ || true
        done
        echo -1'
}

# True when node $1's archive has no object relay/$2 (a data node streams copies straight into its archive, so
# there is no spool file to check: an unfinished put is swept from the archive's cache at its next open).
nothing_visible() {
    local n=$1 key=$2
    if "$BIN" get --data-dir "$SCRATCH/$n" "relay/$key" - >/dev/null 2>>"$OUT/check.log"; then
        echo false; return
    fi
    echo true
}

fail_once() {   # scenario (relay|node|node-exact)
    local scenario=$1 victim target_args key="fail-$1" expect_rc=0
    case $scenario in
        relay) victim=$FAIL_RELAY; target_args=(--copies 3) ;;
        node) victim=$FAIL_NODE; target_args=(--copies 3) ;;
        node-exact)
            victim=$FAIL_NODE; expect_rc=1
            local to=() n
            for n in "${NODES[@]}"; do [[ ${ROLE[$n]} == node ]] && to+=("$n"); done
            target_args=(--to "$(IFS=,; echo "${to[*]:0:3}")") ;;
    esac
    local tx0 tx1 t0 t1 rc=0 spid got rx0
    tx0=$(counter "$CLIENT" "d-$FIRST_CHILD" tx_bytes)
    rx0=$(counter "$victim" uplink rx_bytes)
    t0=$(now)
    in_ns "$CLIENT" nice -n -10 "$BIN" relay send --topology "$TOPOLOGY" "${ADDR_ARGS[@]}" "${SECRET_ARGS[@]}" "${target_args[@]}" \
        --key "$key" --json "$SCRATCH/fail-object" >"$SCRATCH/fail.json" 2>>"$OUT/client.log" &
    spid=$!
    got=$(kill_when "$victim" $((FAIL_BYTES / 4)) "$spid" "$rx0")
    wait "$spid" || rc=$?
    wait "${PID_OF[$victim]}" 2>/dev/null || true
    t1=$(now)
    tx1=$(counter "$CLIENT" "d-$FIRST_CHILD" tx_bytes)
    # Bring the victim back; then check what it holds.
    start_node "$victim"
    wait_node "$victim" || say "# $victim did not come back"
    local json nodes count=0 exact=true ok=true hidden=true
    json=$(cat "$SCRATCH/fail.json")
    nodes=$(python3 -c 'import json,sys; d = json.loads(sys.argv[1] or "null") or {}; print(" ".join(a["node"] for a in d.get("acks", []) if a["ok"]))' "$json")
    for n in $nodes; do
        count=$((count + 1))
        [[ $(check_copy "$n" "$key" "$FAIL_SHA") == true ]] || exact=false
    done
    [[ ${ROLE[$victim]} == node ]] && hidden=$(nothing_visible "$victim" "$key")
    local attempts first_tree
    attempts=$(python3 -c 'import json,sys; d = json.loads(sys.argv[1] or "null") or {}; print(len(d.get("attempts", [])))' "$json")
    first_tree=$(python3 -c 'import json,sys; d = json.loads(sys.argv[1] or "null") or {}; print((d.get("attempts") or [{}])[0].get("tree", ""))' "$json")
    [[ $got != -1 ]] || ok=false                       # killed mid-transfer
    [[ $first_tree == *"$victim"* ]] || ok=false       # the victim was in the first tree
    [[ $rc == "$expect_rc" && $exact == true && $hidden == true ]] || ok=false
    if [[ $scenario == node-exact ]]; then
        [[ $count == 2 && $nodes != *"$victim"* ]] || ok=false
    else
        [[ $count == 3 && $attempts -ge 2 && $nodes != *"$victim"* ]] || ok=false
    fi
    [[ $ok == true ]] || FAILED=1
    local wall up
    wall=$(elapsed "$t0" "$t1")
    up=$((tx1 - tx0))
    record "{\"what\": \"failure\", \"scenario\": \"$scenario\", \"killed\": \"$victim\", \"killed_after_bytes\": $got, \"object_bytes\": $FAIL_BYTES, \"exit_code\": $rc, \"client_uplink_bytes\": $up, \"seconds\": $wall, \"copies_ok\": $count, \"nodes\": \"$nodes\", \"byte_exact\": $exact, \"nothing_visible_on_killed\": $hidden, \"attempts\": $attempts, \"as_expected\": $ok, \"send\": ${json:-null}}"
    say "failure $(printf '%-10s' "$scenario") kill -9 $victim after $got bytes: exit $rc, copies $count on [$nodes] byte-exact $exact, $attempts trees, client uplink $(ratio "$up" "$FAIL_BYTES") x object, $wall s, nothing visible on $victim $hidden: $( [[ $ok == true ]] && echo as expected || echo NOT AS EXPECTED)"
}

if [[ $FAILURES == 1 ]]; then
    FAIL_BYTES=$((FAILURE_MIB << 20))
    head -c "$FAIL_BYTES" /dev/urandom >"$SCRATCH/fail-object"
    FAIL_SHA=$(sha256sum "$SCRATCH/fail-object" | cut -d' ' -f1)
    fail_once relay
    fail_once node
    fail_once node-exact
fi
say "# load after $(loadavg)"

python3 - "$RESULTS.lines" "$RESULTS" <<'EOF'
import json, sys
text, rows, at, dec = open(sys.argv[1]).read(), [], 0, json.JSONDecoder()
while text[at:].strip():
    at += len(text[at:]) - len(text[at:].lstrip())
    row, at = dec.raw_decode(text, at)
    rows.append(row)
json.dump(rows, open(sys.argv[2], "w"), indent=1)
EOF
rm -f "$RESULTS.lines"
# A text chart of the completion times (one bar per row, 1 char = max/50).
python3 - "$RESULTS" <<'EOF' | tee -a "$SUMMARY"
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r["what"] in ("write", "rebuild") and r.get("round") == 1]
if rows:
    top = max(r["seconds"] for r in rows)
    for r in rows:
        what = f'write k={r["k"]}' if r["what"] == "write" else f'rebuild n={r["group"]}'
        print(f'{what:<12} {r["mode"]:<8} {"#" * max(1, round(50 * r["seconds"] / top)):<50} {r["seconds"]:7.2f} s')
EOF
say "# results: $RESULTS"
if [[ $FAILED != 0 ]]; then
    say "# FAILED: a copy or rebuild was missing or not byte-exact (logs in $OUT)"
    exit 1
fi
