"""A short run of bench/soak.py against the debug server: 8 clients for 30 s of mixed operations, SIGKILLs every
15 s (the first restart with a wiped grid disk), persist and evict every 8 s, then the read-back. With --plant the
soak deletes one acknowledged object and overwrites another behind its model's back before the read-back: the
check must report exactly those two (1 lost, 1 wrong) and nothing else, so both the server's durability under the
faults and the soak's own check are tested."""
import json
import subprocess
import sys
from pathlib import Path

from conftest import binary

REPO = Path(__file__).resolve().parents[2]


def test_short_soak_loses_nothing_and_its_check_finds_planted_damage(tmp_path):
    out = tmp_path / "out"
    r = subprocess.run(
        [sys.executable, str(REPO / "bench" / "soak.py"), "--minutes", "0.5", "--clients", "8", "--kill-every", "15",
         "--evict-every", "8", "--plant", "--bin", str(binary()), "--scratch", str(tmp_path / "scratch"),
         "--out", str(out)],
        capture_output=True, text=True, timeout=300)
    print(r.stdout[-4000:], r.stderr[-4000:])
    res = json.loads((out / "results.json").read_text())
    planted = res["planted"]
    lost, wrong = res["verify"]["lost"], res["verify"]["wrong"]
    assert r.returncode == 1, "planted damage must make the soak fail"
    assert len(lost) == 1 and lost[0].startswith(planted["deleted"] + ":"), lost
    assert len(wrong) == 1 and wrong[0].startswith(planted["overwritten"] + ":"), wrong
    assert any("SIGKILL" in e and "wiped" in e for e in res["events"]), res["events"]
    assert sum("SIGKILL" in e for e in res["events"]) >= 1, res["events"]
    assert res["acked_writes"] > 100, res["acked_writes"]
    assert res["verify"]["keys"] > 0 and res["verify"]["versions"] > 0
    assert res["ops"]["put_locked"] > 0 and res["ops"]["multipart"] > 0
    # Every error is counted by a code; outside the fault windows there are none.
    outside = {k: v - res["errors_in_faults"].get(k, 0) for k, v in res["errors"].items()}
    assert all(v == 0 for v in outside.values()), outside
