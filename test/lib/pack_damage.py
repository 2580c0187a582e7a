#!/usr/bin/env python3
# pack_damage.py: damage a store's packs as a careless disk would, one
# flipped byte in the middle of a chunk's stored bytes (its middle: past any
# header, so that only the chunk's hash can tell).  For the end-to-end tests
# of a damaged snapshot (e2e_fallback, e2e_heal, e2e_statuses).
#
#   pack_damage.py flip STORE SNAP [TWIN] [MODE]
#       chunks of snapshot SNAP ("sha256:<hex>", its manifest in STORE),
#       chosen among those snapshot TWIN's manifest names too (a snapshot of
#       the same state made apart: a chunk a boot reproduces) where there
#       are some, the largest first.  MODE "one" (default): one chunk;
#       "every": one in each pack SNAP uses; "two": two in the pack holding
#       most of TWIN's.  TWIN "" or absent: none.
#   pack_damage.py flip-pack PACK
#       the largest chunk of one pack (PACK: its path without .pack/.idx).
#   pack_damage.py indexed STORE CHUNK
#       exit 0 when a pack's index holds CHUNK, 1 when none does.
#   pack_damage.py chunks STORE SNAP
#       the ids (hex) of the chunks SNAP's manifest names, a line each.
#
# flip and flip-pack print each damaged chunk's id ("sha256:<hex>"), a line
# each.  A pack's index (store/pack_index.h): a 24-byte header whose second
# 8 bytes are the count, then 48-byte entries (hash, offset, stored, raw).
import json
import os
import struct
import sys


def index(path):
    """The entries of a pack's index: (hash hex, offset, stored bytes)."""
    idx = open(path, "rb").read()
    for i in range(struct.unpack_from("<Q", idx, 8)[0]):
        h, off, stored, _raw = struct.unpack_from("<32sQII", idx, 24 + 48 * i)
        yield h.hex(), off, stored


def chunks(store, snap):
    """The chunk ids (hex) snapshot snap's manifest names; none for ""."""
    if not snap:
        return set()
    m = json.load(open(os.path.join(store, "manifests", snap.split(":")[1])))
    return {(c.get("hash") or c.get("id")).split(":")[-1] for f in m["files"]
            for c in f.get("chunks", []) if c.get("hash") or c.get("id")}


def flip_at(pack, off, stored, h):
    os.chmod(pack, 0o644)
    with open(pack, "r+b") as f:
        f.seek(off + stored // 2)
        b = f.read(1)
        f.seek(off + stored // 2)
        f.write(bytes([b[0] ^ 0x40]))
    print("sha256:" + h)


def flip(store, snap, twin="", mode="one"):
    mine, theirs = chunks(store, snap), chunks(store, twin)
    pd = os.path.join(store, "packs")
    packs = {}  # pack -> [(in the twin, stored, off, hash)] of SNAP's chunks
    for n in sorted(os.listdir(pd)):
        if n.endswith(".idx"):
            for h, off, stored in index(os.path.join(pd, n)):
                if h in mine:
                    packs.setdefault(n[:-4], []).append((h in theirs, stored, off, h))
    if mode == "every":
        pick = [(name, max(v)) for name, v in packs.items()]
    elif mode == "two":
        name = max(packs, key=lambda p: sum(x[0] for x in packs[p]))
        pick = [(name, x) for x in sorted(packs[name], reverse=True)[:2]]
    else:
        pick = [max(((name, x) for name, v in packs.items() for x in v),
                    key=lambda e: e[1])]
    for name, (_, stored, off, h) in pick:
        flip_at(os.path.join(pd, name + ".pack"), off, stored, h)


def main(argv):
    if len(argv) >= 3 and argv[0] == "flip":
        flip(*argv[1:5])
    elif len(argv) == 2 and argv[0] == "flip-pack":
        h, off, stored = max(index(argv[1] + ".idx"), key=lambda e: e[2])
        flip_at(argv[1] + ".pack", off, stored, h)
    elif len(argv) == 3 and argv[0] == "chunks":
        for h in sorted(chunks(argv[1], argv[2])):
            print(h)
    elif len(argv) == 3 and argv[0] == "indexed":
        pd, want = os.path.join(argv[1], "packs"), argv[2].split(":")[-1]
        return 0 if any(h == want for n in os.listdir(pd) if n.endswith(".idx")
                        for h, _, _ in index(os.path.join(pd, n))) else 1
    else:
        print("usage: see the comment at the top of " + sys.argv[0], file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
