"""An independent reader and writer of the token files skytrain reads, from the published
layouts: nanoGPT's flat train.bin (numpy's tofile of uint16 ids) and Megatron-LM's indexed
dataset (.bin of tokens, .idx: b"MMIDIDX\\0\\0", <Q version 1, <B dtype code, <Q sequences,
<Q documents, int32 lengths, int64 byte pointers, int64 document starts).

  token_reference.py write DIR          a Megatron dataset and a flat file of known ids
  token_reference.py check DIR TEXT     what `skytrain data prepare --split line` wrote from
                                        TEXT: every document, in order, is a line's bytes
Run with Debian's python3 (numpy)."""
import json
import struct
import sys

import numpy as np

CODES = {1: np.uint8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}


def write_megatron(prefix, documents, dtype=np.uint16, code=8):
    lengths = np.array([len(d) for d in documents], dtype=np.int32)
    pointers = np.zeros(len(documents), dtype=np.int64)
    pointers[1:] = np.cumsum(lengths[:-1].astype(np.int64) * np.dtype(dtype).itemsize)
    with open(prefix + ".bin", "wb") as f:
        for d in documents:
            f.write(np.array(d, dtype=dtype).tobytes(order="C"))
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(documents)))
        f.write(struct.pack("<Q", len(documents) + 1))
        f.write(lengths.tobytes(order="C"))
        f.write(pointers.tobytes(order="C"))
        f.write(np.arange(len(documents) + 1, dtype=np.int64).tobytes(order="C"))


def read_megatron(prefix):
    with open(prefix + ".idx", "rb") as f:
        assert f.read(9) == b"MMIDIDX\x00\x00", "magic"
        (version,) = struct.unpack("<Q", f.read(8))
        assert version == 1
        (code,) = struct.unpack("<B", f.read(1))
        (sequences,) = struct.unpack("<Q", f.read(8))
        (documents,) = struct.unpack("<Q", f.read(8))
        offset = f.tell()
    buffer = np.memmap(prefix + ".idx", mode="r", order="C")
    lengths = np.frombuffer(buffer, dtype=np.int32, count=sequences, offset=offset)
    pointers = np.frombuffer(buffer, dtype=np.int64, count=sequences, offset=offset + lengths.nbytes)
    starts = np.frombuffer(buffer, dtype=np.int64, count=documents, offset=offset + lengths.nbytes + pointers.nbytes)
    data = np.memmap(prefix + ".bin", mode="r", order="C")
    dtype = CODES[code]
    return [np.frombuffer(data, dtype=dtype, count=int(n), offset=int(p)) for n, p in zip(lengths, pointers)], starts


def splitmix64(x):
    m = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def write(out):
    rng = np.random.default_rng(11)
    docs = [rng.integers(0, 60000, size=int(rng.integers(1, 300))).tolist() for _ in range(50)]
    write_megatron(out + "/megatron", docs)
    write_megatron(out + "/megatron32", docs, np.int32, 4)
    flat = np.concatenate([np.array(d, dtype=np.uint16) for d in docs])
    flat.tofile(out + "/flat16.bin")
    flat.astype(np.uint32).tofile(out + "/flat32.dat")
    with open(out + "/expected.txt", "w") as f:
        f.write(" ".join(str(int(t)) for t in flat))


def check(out, text):
    manifest = json.load(open(out + "/skytrain-tokens.json"))
    assert manifest["layout"] == "indexed" and manifest["tokenizer"] == "byte", manifest
    lines = [l + b"\n" for l in open(text, "rb").read().split(b"\n") if l]
    seen = []
    for split in ("train", "validation"):
        for name in manifest[split]:
            docs, starts = read_megatron(out + "/" + name[: -len(".bin")])
            assert starts[0] == 0 and starts[-1] == len(docs), "document starts"
            seen += [(split, bytes(d.astype(np.uint8))) for d in docs]
    assert len(seen) == len(lines) == manifest["documents"], (len(seen), len(lines))
    # Document i is held out when splitmix64(i ^ 0xda7a) / 2^64 < the validation share (0.001).
    held = [splitmix64(i ^ 0xDA7A) >> 11 < 0.001 * 2**53 for i in range(len(lines))]
    want = [("train", l) for l, h in zip(lines, held) if not h] + [("validation", l) for l, h in zip(lines, held) if h]
    assert seen == want, "documents differ from the lines, or are out of order"
    print(f"ok: {len(seen)} documents, {sum(len(d) for _, d in seen)} tokens read back as Megatron would")


if __name__ == "__main__":
    {"write": lambda: write(sys.argv[2]), "check": lambda: check(sys.argv[2], sys.argv[3])}[sys.argv[1]]()
