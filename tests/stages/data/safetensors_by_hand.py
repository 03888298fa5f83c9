#!/usr/bin/python3
"""The safetensors format written and read by hand in Python, with neither the `safetensors`
nor the `torch` package, following the format's spec (github.com/huggingface/safetensors,
README "Format"): N as an 8-byte little-endian unsigned integer, N bytes of JSON header
({name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {str: str}}, padded
with spaces), then the tensors' raw little-endian bytes, offsets counted from the end of
the header. tests/stages/safetensors_test.cpp holds the same tensors (pythonTensors()).

  /usr/bin/python3 tests/stages/data/safetensors_by_hand.py write tests/stages/data/from_python.safetensors
  /usr/bin/python3 tests/stages/data/safetensors_by_hand.py check tests/stages/data/from_cpp.safetensors
"""
import json
import struct
import sys

# name: (dtype, shape, values), in the order of the data; the names are not sorted.
TENSORS = {
    "step": ("I64", [], [1234567890123]),
    "embed.weight": ("F32", [2, 3], [0.5, -1.0, 2.25, 3.0, -0.125, 100.0]),
    "ids": ("I32", [3], [-7, 0, 2147483647]),
    "ln.bias": ("F16", [4], [1.0, -2.0, 0.5, 65504.0]),
    "ln.weight": ("BF16", [2], [1.5, -3.0]),
    "small": ("I8", [2, 2], [-128, 127, 0, -1]),
    "mask": ("U8", [3], [0, 1, 255]),
    "empty": ("F32", [0, 4], []),
}
METADATA = {"format": "pt", "writer": "python"}

# dtype: (struct code, bytes per element); BF16 is the high half of a float32.
CODES = {"F32": ("f", 4), "F16": ("e", 2), "I64": ("q", 8), "I32": ("i", 4), "I8": ("b", 1), "U8": ("B", 1)}


def pack(dtype, values):
    if dtype == "BF16":
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    return struct.pack("<%d%s" % (len(values), CODES[dtype][0]), *values)


def unpack(dtype, raw):
    if dtype == "BF16":
        return [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
    return list(struct.unpack("<%d%s" % (len(raw) // CODES[dtype][1], CODES[dtype][0]), raw))


def write(path):
    header, data = {"__metadata__": METADATA}, b""
    for name, (dtype, shape, values) in TENSORS.items():
        raw = pack(dtype, values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def check(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0, "header length %d is not a multiple of 8" % n
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    assert header.pop("__metadata__") == METADATA
    assert set(header) == set(TENSORS), sorted(header)
    end = 0
    for name, entry in sorted(header.items(), key=lambda item: item[1]["data_offsets"]):
        dtype, shape, values = TENSORS[name]
        begin, stop = entry["data_offsets"]
        assert (entry["dtype"], entry["shape"], begin) == (dtype, shape, end), (name, entry)
        assert unpack(dtype, data[begin:stop]) == values, (name, unpack(dtype, data[begin:stop]))
        end = stop
    assert end == len(data), "%d bytes after the last tensor" % (len(data) - end)
    print("%s: %d tensors and the metadata as expected" % (path, len(header)))


if __name__ == "__main__":
    {"write": write, "check": check}[sys.argv[1]](sys.argv[2])
