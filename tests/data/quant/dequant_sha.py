#!/usr/bin/env python3
"""dequant.sha256 for tests/data/quant/models (see make_models.sh): one line
per quantized tensor of every DIR/*.gguf,
    FILE TENSOR TYPE N_ELEMENTS SHA256
where SHA256 is that of gguf.quants.dequantize's little-endian float32 values
of the whole tensor.  Each is checked against ggml's dequantize_row_* (ctypes,
libggml-base) first: the two references must agree bit for bit.
Usage: dequant_sha.py DIR"""
import ctypes
import glob
import hashlib
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

ggml = ctypes.CDLL("libggml-base.so")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.gguf"))):
    for t in gguf.GGUFReader(path).tensors:
        if t.tensor_type in (T.F32, T.F16, T.BF16):
            continue
        raw = np.ascontiguousarray(np.asarray(t.data).reshape(-1).view(np.uint8))
        ref = gguf.quants.dequantize(raw, t.tensor_type).astype("<f4").reshape(-1)
        n = int(t.n_elements)
        assert ref.size == n, (path, t.name)
        other = np.zeros(n, dtype=np.float32)
        fn = getattr(ggml, "dequantize_row_" + t.tensor_type.name.lower().replace("_k", "_K"))
        fn(ctypes.c_char_p(raw.tobytes()), other.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(n))
        if ref.view(np.uint32).tolist() != other.view(np.uint32).tolist():
            raise SystemExit(f"{path} {t.name}: gguf-py and ggml dequantize disagree")
        print(os.path.basename(path), t.name, t.tensor_type.name, n, hashlib.sha256(ref.tobytes()).hexdigest())
