#!/usr/bin/env python3
"""Writes dequant_reference.json: ggml blocks and their dequantized values.

An independent cross-check of runtime/model/Quantization.cpp beside the
hand-computed blocks of QuantizationTest: pseudo-random blocks (fixed seed;
the f16 scales set to moderate values so results are finite) dequantized by
llama.cpp's gguf-py (quants.py). Needs numpy. Usage:
  make_dequant_reference.py OUT.json [GGUF_PY_DIR]
"""
import json, os, random, struct, sys

sys.path.insert(0, sys.argv[2] if len(sys.argv) > 2 else os.path.expanduser(
    "~/.cache/spanc/peers/llama.cpp/gguf-py"))
import numpy as np  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

random.seed(20261129)


def half(value):
    return struct.pack("<e", value)


def block(qtype):
    size = GGML_QUANT_SIZES[qtype][1]
    data = bytearray(random.getrandbits(8) for _ in range(size))
    scale = lambda: half(random.uniform(-0.05, 0.05))  # noqa: E731
    if qtype in (T.Q4_0, T.Q8_0):
        data[0:2] = scale()
    elif qtype == T.Q4_1:
        data[0:2] = scale()
        data[2:4] = half(random.uniform(-1, 1))
    elif qtype == T.Q4_K:
        data[0:2] = scale()
        data[2:4] = scale()
    elif qtype == T.Q6_K:
        data[208:210] = scale()
    elif qtype == T.F16:
        data[0:2] = half(random.uniform(-100, 100))
    elif qtype == T.BF16:
        data[0:2] = struct.pack("<f", random.uniform(-100, 100))[2:4]
    return bytes(data)


cases = []
for qtype in (T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q8_0, T.Q4_K, T.Q6_K):
    block_size = GGML_QUANT_SIZES[qtype][0]
    count = 3 if block_size > 1 else 64
    raw = b"".join(block(qtype) for _ in range(count))
    values = dequantize(np.frombuffer(raw, dtype=np.uint8), qtype)
    cases.append({"type": qtype.name, "type_id": int(qtype.value),
                  "elements": int(values.size), "bytes": raw.hex(),
                  "values": [float(v) for v in values.astype(np.float32)]})
with open(sys.argv[1], "w") as f:
    json.dump({"source": "llama.cpp gguf-py quants.dequantize "
                         "(llama-cpp-python 0.3.36 sdist)", "cases": cases},
              f, indent=None)
    f.write("\n")
