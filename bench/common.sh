# Helpers shared by the bench scripts (sourced, not run). `say` appends to $SUMMARY, which the script sets.

say() { echo "$*" | tee -a "$SUMMARY"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
now() { date +%s.%N; }
# Seconds between two `now` stamps.
elapsed() { python3 -c "print(f'{$2 - $1:.3f}')"; }
ratio() { python3 -c "print(f'{($1) / ($2):.3f}')"; }
median() { python3 -c "import statistics,sys; print(f'{statistics.median(float(x) for x in sys.argv[1:]):.3f}')" "$@"; }
# Seconds of a dd run from its stderr summary line ("... copied, 1.23 s, 870 MB/s").
dd_seconds() { awk '/copied/ { for (i = 1; i <= NF; i++) if ($i == "s,") print $(i-1) }' "$1"; }
# The commit measured, marked when the work tree has uncommitted changes.
commit_measured() {
    local root="$1" dirty=""
    git -C "$root" diff --quiet HEAD 2>/dev/null || dirty=" (+ uncommitted changes)"
    echo "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$dirty"
}
# One line naming the machine.
machine() {
    echo "$(lscpu | awk -F: '/Model name/ { gsub(/^ +/, "", $2); print $2; exit }'), $(nproc) cores, $(free -g | awk '/Mem:/ { print $2 }') GiB RAM"
}
