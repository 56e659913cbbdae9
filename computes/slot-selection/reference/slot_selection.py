#!/usr/bin/env python3
"""A straightforward Python implementation of the BDS slot selection
(docs/protocol.md §2), written from the protocol text.

It is the independent check for the Rust crate (tests feed it inputs and
compare every field) and the baseline its benchmark compares against.

  slot_selection.py --cases FILE     read [{epoch_id, block_hash, total_slots, pools}]
                                     print [{epoch_id, seed, total_slots, selected}]
  slot_selection.py --bench          time one regular epoch and the genesis epoch
                                     (T = 10,000 slots, 100 pools)
"""

import hashlib
import json
import random
import sys
import time

SLOTS_PER_EPOCH = 1000


def seed_of(block_hash, epoch_id):
    raw = bytes.fromhex(block_hash[2:] if block_hash.lower().startswith("0x") else block_hash)
    assert len(raw) == 32, "block hash must be 32 bytes"
    return hashlib.sha256(raw + epoch_id.to_bytes(8, "big")).digest()


def select(epoch_id, block_hash, total_slots, pools):
    seed = seed_of(block_hash, epoch_id)
    pools = sorted(pools)
    selected = []
    if total_slots > 0:
        if epoch_id == 0:
            for slot in range(1, total_slots + 1):
                selected.append((slot, random.Random(slot).choice(pools)))
        else:
            items = list(range(1, total_slots + 1))
            n = total_slots
            for i in range(min(SLOTS_PER_EPOCH, total_slots)):
                r = hashlib.sha256(seed + i.to_bytes(4, "big")).digest()
                j = i + int.from_bytes(r[:8], "big") % (n - i)
                items[i], items[j] = items[j], items[i]
            for slot in items[: min(SLOTS_PER_EPOCH, total_slots)]:
                h = hashlib.sha256(seed + slot.to_bytes(4, "big")).digest()
                selected.append((slot, pools[int.from_bytes(h[:8], "big") % len(pools)]))
    selected.sort()
    return {
        "epoch_id": epoch_id,
        "seed": seed.hex(),
        "total_slots": total_slots,
        "selected": [{"slot_id": s, "pool": p} for s, p in selected],
    }


def bench():
    rng = random.Random(42)
    pools = ["0x%040x" % rng.getrandbits(160) for _ in range(100)]
    block_hash = "0x" + "%064x" % rng.getrandbits(256)

    def median_ms(fn, runs):
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1000)
        times.sort()
        return times[len(times) // 2]

    regular = median_ms(lambda: select(12345, block_hash, 10_000, pools), 31)
    genesis = median_ms(lambda: select(0, block_hash, 10_000, pools), 5)
    print(json.dumps({"regular_ms": regular, "genesis_ms": genesis}))


def main(argv):
    if argv[1:2] == ["--bench"]:
        bench()
    elif argv[1:2] == ["--cases"] and len(argv) == 3:
        with open(argv[2]) as f:
            cases = json.load(f)
        out = [select(c["epoch_id"], c["block_hash"], c["total_slots"], c["pools"]) for c in cases]
        json.dump(out, sys.stdout)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
