"""Content addressing: the same 100 MB object PUT under 10 keys occupies its space once; deleting 9 keys keeps
it readable and occupied; deleting the last frees it once the grace period is over and the collector ran."""

import hashlib
import threading
import time

from admin import GC_PATH, admin_json, contents_by_state, dump, evict, sha, status, wait_persisted
from conftest import Server, client

SIZE_BYTES = 100_000_000
GC_GRACE_MS = 1000  # TEST_CONFIG
KEYS = [("dedup-a", f"copies/k{i}") for i in range(5)] + [("dedup-b", f"other/k{i}") for i in range(5, 10)]


def used_bytes(st: dict) -> int:
    return sum(g["bytes"] for g in st["used_bytes_per_grid_bucket"])


def test_same_100mb_under_10_keys_is_stored_once_and_freed_after_the_last_delete(tmp_path):
    body = hashlib.shake_256(b"dedup").digest(SIZE_BYTES)  # incompressible
    digest = sha(body)
    server = Server(tmp_path / "data")
    server.start()
    try:
        s3 = client(server.endpoint)
        for b in ("dedup-a", "dedup-b"):
            s3.create_bucket(Bucket=b)
        assert used_bytes(status(server.endpoint)) == 0
        # First upload alone, then 9 more from 3 threads at once (concurrent uploads of one content).
        s3.put_object(Bucket=KEYS[0][0], Key=KEYS[0][1], Body=body)
        clients = [client(server.endpoint) for _ in range(3)]
        errors = []

        def upload(t):
            try:
                for bucket, key in KEYS[1 + t::3]:
                    clients[t].put_object(Bucket=bucket, Key=key, Body=body)
            except Exception as e:
                errors.append(e)

        threads = [threading.Thread(target=upload, args=(t,)) for t in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors

        st = wait_persisted(server.endpoint, expect_contents=1)
        persisted, stored = contents_by_state(st)["persisted"]
        assert persisted == 1 and st["objects"] == 10, dump(st)
        assert SIZE_BYTES <= stored <= SIZE_BYTES * 1.01, f"one content of {stored} stored bytes"
        occupied = used_bytes(st)
        assert SIZE_BYTES <= occupied <= SIZE_BYTES * 1.01, f"{occupied} bytes used on the grid: {dump(st)}"
        assert len([g for g in st["used_bytes_per_grid_bucket"] if g["bytes"] > 0]) == 1, dump(st)

        # Delete 9: still one content, still occupied, still readable (from the grid).
        evict(server.endpoint)
        for bucket, key in KEYS[:9]:
            s3.delete_object(Bucket=bucket, Key=key)
        admin_json(server.endpoint, "POST", GC_PATH + "?ignore_grace=true")
        st = status(server.endpoint)
        assert contents_by_state(st)["persisted"] == (1, stored) and st["objects"] == 1, dump(st)
        assert used_bytes(st) == occupied, dump(st)
        last_bucket, last_key = KEYS[9]
        assert sha(s3.get_object(Bucket=last_bucket, Key=last_key)["Body"].read()) == digest

        # Delete the last: kept through the grace period, freed by the collector after it.
        s3.delete_object(Bucket=last_bucket, Key=last_key)
        admin_json(server.endpoint, "POST", GC_PATH)
        st = status(server.endpoint)
        assert used_bytes(st) == occupied and contents_by_state(st)["persisted"][0] == 1, (
            f"freed within the grace period: {dump(st)}")
        time.sleep(GC_GRACE_MS / 1000 * 1.2)
        admin_json(server.endpoint, "POST", GC_PATH)
        st = status(server.endpoint)
        assert sum(n for n, _ in contents_by_state(st).values()) == 0, dump(st)
        assert used_bytes(st) == 0, f"the grid still holds {used_bytes(st)} bytes: {dump(st)}"
        assert st["objects"] == 0
        assert server.stop() == 0, server.log_tail()
    except Exception:
        print(server.log_tail())
        raise
    finally:
        server.kill()
