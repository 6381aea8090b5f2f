#!/usr/bin/env python3
"""Expected values for tests/test_quant.c, computed by llama.cpp's own code.

Runs inside the oracle chroot (see make_expected.sh), which has Debian's
python3-gguf 0.7.0 (gguf-py) and libggml-base 0.27.0 (ggml's C reference
(de)quantizers, called through ctypes).  Nothing here comes from tutti.

Usage: make_expected.py IN_DIR OUT_DIR
  IN_DIR  holds copies of ../shared/ref/arch/llama-*.gguf
  OUT_DIR receives:
    manifest.txt   one case per line (format below)
    deq_<type>.f32 gguf.quants.dequantize of the first N_DEQ elements of a
                   tensor of that type (little-endian float32); the script
                   checks that ggml's dequantize_row_* gives the same bits
    quant_input.f32  synthetic rows (edge cases, see synthetic_input)
    q_<type>.dat   ggml's quantize_row_<type>_ref of quant_input.f32; for the
                   types gguf-py can quantize, the script checks it agrees

manifest.txt lines (space separated; paths relative to ../shared):
  dequant TYPE TYPE_ID GGUF TENSOR FILE_OFFSET N EXPECTED
      -> N elements at byte FILE_OFFSET of GGUF (the start of TENSOR's data)
         must dequantize to EXPECTED bit for bit
  quant_file TYPE TYPE_ID SRC_GGUF SRC_OFFSET DST_GGUF DST_OFFSET N TENSOR
      -> quantizing the N float32 of TENSOR in SRC_GGUF (at SRC_OFFSET) must
         give the bytes of the same tensor in DST_GGUF (made by llama-quantize
         from SRC_GGUF, see ../shared/oracle/make_refs.sh); the script checks
         those bytes equal ggml_quantize_chunk without an importance matrix
  quant TYPE TYPE_ID N EXPECTED [INPUT]
      -> quantizing the first N floats of INPUT (default quant_input.f32)
         must give EXPECTED
  dequant_raw TYPE TYPE_ID RAW N EXPECTED
      -> the blocks in RAW (random bytes with a finite scale, see
         random_blocks) must dequantize to EXPECTED: gguf-py's values, which
         the script checks against ggml's dequantize_row_*

The types llama-quantize needs a model and an importance matrix for (the
i-quants) are tested on real files by make_models.sh (models/).
"""
import ctypes
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

N_DEQ = 1024  # elements per dequantization case: 4 super-blocks / 32 blocks

IN, OUT = sys.argv[1], sys.argv[2]
os.makedirs(OUT, exist_ok=True)
ggml = ctypes.CDLL("libggml-base.so")

# (type, preferred files) for the dequantization cases
DEQ_CASES = [
    (T.F32, "llama-F32.gguf"), (T.F16, "llama-F16.gguf"), (T.BF16, "llama-BF16.gguf"),
    (T.Q4_0, "llama-Q4_0.gguf"), (T.Q4_1, "llama-Q4_1.gguf"), (T.Q5_0, "llama-Q5_0.gguf"),
    (T.Q5_1, "llama-Q5_1.gguf"), (T.Q8_0, "llama-Q8_0.gguf"), (T.Q2_K, "llama-Q2_K.gguf"),
    (T.Q3_K, "llama-Q3_K_M.gguf"), (T.Q4_K, "llama-Q4_K_M.gguf"), (T.Q5_K, "llama-Q5_K_M.gguf"),
    (T.Q6_K, "llama-Q6_K.gguf"), (T.IQ4_NL, "llama-IQ4_NL.gguf"), (T.IQ4_XS, "llama-IQ4_XS.gguf"),
]
# ggml symbol suffix of each type
GGML_NAME = {T.Q4_0: "q4_0", T.Q4_1: "q4_1", T.Q5_0: "q5_0", T.Q5_1: "q5_1", T.Q8_0: "q8_0",
             T.Q2_K: "q2_K", T.Q3_K: "q3_K", T.Q4_K: "q4_K", T.Q5_K: "q5_K", T.Q6_K: "q6_K",
             T.IQ4_NL: "iq4_nl", T.IQ4_XS: "iq4_xs", T.Q8_K: "q8_K", T.MXFP4: "mxfp4",
             T.IQ2_XXS: "iq2_xxs", T.IQ2_XS: "iq2_xs", T.IQ2_S: "iq2_s", T.IQ3_XXS: "iq3_xxs",
             T.IQ3_S: "iq3_s", T.IQ1_S: "iq1_s", T.IQ1_M: "iq1_m"}

readers = {}


def reader(name):
    if name not in readers:
        readers[name] = gguf.GGUFReader(os.path.join(IN, name))
    return readers[name]


def first_tensor(fname, qtype):
    for t in reader(fname).tensors:
        if t.tensor_type == qtype:
            return t
    raise SystemExit(f"{fname}: no tensor of type {qtype.name}")


def raw_bytes(fname, offset, nbytes):
    with open(os.path.join(IN, fname), "rb") as f:
        f.seek(offset)
        b = f.read(nbytes)
    assert len(b) == nbytes
    return b


def row_bytes(qtype, n):
    bs, ts = gguf.GGML_QUANT_SIZES[qtype]
    assert n % bs == 0
    return n // bs * ts


def ggml_dequant(qtype, raw, n):
    out = np.zeros(n, dtype=np.float32)
    if qtype in GGML_NAME:
        fn = getattr(ggml, "dequantize_row_" + GGML_NAME[qtype])
        fn(ctypes.c_char_p(raw), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(n))
    elif qtype == T.F16:
        ggml.ggml_fp16_to_fp32_row(ctypes.c_char_p(raw), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(n))
    elif qtype == T.BF16:
        ggml.ggml_bf16_to_fp32_row(ctypes.c_char_p(raw), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(n))
    else:  # F32
        out[:] = np.frombuffer(raw, dtype=np.float32)
    return out


def ggml_quant_ref(qtype, x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = ctypes.create_string_buffer(row_bytes(qtype, x.size))
    fn = getattr(ggml, "quantize_row_" + GGML_NAME[qtype] + "_ref")
    fn(x.ctypes.data_as(ctypes.c_void_p), out, ctypes.c_int64(x.size))
    return out.raw


manifest = []

# ---- dequantization of real tensors ----------------------------------------
for qtype, fname in DEQ_CASES:
    t = first_tensor(fname, qtype)
    nb = row_bytes(qtype, N_DEQ)
    raw = raw_bytes(fname, int(t.data_offset), nb)
    assert raw == bytes(np.asarray(t.data).reshape(-1).view(np.uint8)[:nb]), "offset check"
    ref = gguf.quants.dequantize(np.frombuffer(raw, dtype=np.uint8), qtype).astype(np.float32).reshape(-1)
    assert ref.size == N_DEQ
    other = ggml_dequant(qtype, raw, N_DEQ)
    if ref.view(np.uint32).tolist() != other.view(np.uint32).tolist():
        raise SystemExit(f"{qtype.name}: gguf-py and ggml dequantize disagree")
    out = f"deq_{qtype.name}.f32"
    ref.astype("<f4").tofile(os.path.join(OUT, out))
    manifest.append(f"dequant {qtype.name} {int(qtype)} ref/arch/{fname} {t.name} {int(t.data_offset)} {N_DEQ} {out}")

# ---- quantization of real tensors: the files llama-quantize wrote ------------
QFILE_CASES = [(T.Q8_0, "llama-Q8_0.gguf"), (T.Q4_0, "llama-Q4_0.gguf"), (T.Q4_1, "llama-Q4_1.gguf"),
               (T.Q5_0, "llama-Q5_0.gguf"), (T.Q5_1, "llama-Q5_1.gguf"), (T.Q4_K, "llama-Q4_K_M.gguf"),
               (T.Q5_K, "llama-Q5_K_M.gguf"), (T.Q6_K, "llama-Q6_K.gguf")]
ggml.ggml_quantize_chunk.restype = ctypes.c_size_t
for qtype, fname in QFILE_CASES:
    t = first_tensor(fname, qtype)
    src = next(s for s in reader("llama-F32.gguf").tensors if s.name == t.name)
    n = int(src.n_elements)
    x = np.frombuffer(raw_bytes("llama-F32.gguf", int(src.data_offset), 4 * n), dtype="<f4")
    dst = raw_bytes(fname, int(t.data_offset), row_bytes(qtype, n))
    n_per_row = int(src.shape[0])
    buf = ctypes.create_string_buffer(len(dst))
    ggml.ggml_quantize_chunk(ctypes.c_int(int(qtype)), x.ctypes.data_as(ctypes.c_void_p), buf,
                             ctypes.c_int64(0), ctypes.c_int64(n // n_per_row), ctypes.c_int64(n_per_row),
                             ctypes.c_void_p(0))
    if buf.raw != dst:
        raise SystemExit(f"{fname} {t.name}: file bytes differ from ggml_quantize_chunk")
    if buf.raw != ggml_quant_ref(qtype, x):
        raise SystemExit(f"{qtype.name}: ggml_quantize_chunk differs from quantize_row_*_ref")
    manifest.append(f"quant_file {qtype.name} {int(qtype)} ref/arch/llama-F32.gguf {int(src.data_offset)} "
                    f"ref/arch/{fname} {int(t.data_offset)} {n} {t.name}")


# ---- quantization of synthetic edge cases ------------------------------------
def synthetic_input():
    """8 super-blocks of 256 floats, each testing one hazard."""
    rng = np.random.default_rng(20240611)
    b = []
    b.append(rng.standard_normal(256) * 0.02)                    # 0 typical weights
    b.append(np.zeros(256))                                      # 1 all zero
    b.append(np.full(256, 0.5))                                  # 2 constant (max == min)
    b.append(rng.uniform(0.1, 1.0, 256))                         # 3 all positive (min > 0)
    b.append(rng.standard_normal(256) * 1e-6)                    # 4 tiny: f16 scales subnormal
    b.append(rng.standard_normal(256) * 3e3)                     # 5 large
    z = np.zeros(256); z[5] = -7.0; z[9] = 7.0; z[100] = 7.0; z[200] = -3.5
    z[40:48] = rng.standard_normal(8)                             # 6 sparse, tied |max| of both signs
    b.append(z)
    # 7 rounding ties: every 32-block holds 127 (Q8_0 d == 1, Q8_K iscale == -1)
    #   and halves k + 0.5, where roundf (away from 0) and ties-to-even differ
    h = np.array([((j * 37) % 254 - 127) / 2.0 for j in range(256)])
    h[::32] = 127.0
    b.append(h)
    return np.concatenate(b).astype(np.float32)


def fp4_input():
    """32 blocks of 32 floats probing MXFP4's scale choice (e = floor(log2f(amax))
    - 2 + 127) and its nearest-level search."""
    rng = np.random.default_rng(39)
    b = []
    for k in (-3, 0, 1, 7):                                      # amax just below, at, above 2^k
        for a in (np.nextafter(np.float32(2.0 ** k), np.float32(0)), np.float32(2.0 ** k),
                  np.nextafter(np.float32(2.0 ** k), np.float32(np.inf))):
            v = rng.standard_normal(32) * 0.3 * a
            v[int(rng.integers(32))] = -a if k % 2 else a
            b.append(v)
    d = 2.0 ** -3                                                # ties: halfway between two levels
    lv = np.array([0, 1, 2, 3, 4, 6, 8, 12]) * d
    t = np.concatenate([(lv[:-1] + lv[1:]) / 2, -(lv[:-1] + lv[1:]) / 2, lv, -lv, [12 * d, -0.0, 0.0, 5 * d]])
    b.append(t[:32]); b.append(np.concatenate([t[32:], np.full(64 - len(t), 7 * d)]))
    for a in (1e-38, 2.0 ** -125, 2.0 ** -126, 3e-39, 1e-45):    # exponent below 0: ggml keeps the low byte
        v = rng.standard_normal(32) * a / 4; v[3] = a; b.append(v)
    b.append(rng.standard_normal(32) * 1e37); b[-1][0] = 3e38      # near the top of float32
    b.append(np.zeros(32))
    while len(b) < 32:
        b.append(rng.standard_normal(32) * 10.0 ** rng.uniform(-4, 4))
    return np.concatenate(b).astype(np.float32)


x = synthetic_input()
x.astype("<f4").tofile(os.path.join(OUT, "quant_input.f32"))
x4 = fp4_input()
x4.astype("<f4").tofile(os.path.join(OUT, "quant_input_fp4.f32"))
for qtype, xin, xname in [(q, x, None) for q in (T.Q8_0, T.Q8_K, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q4_K, T.Q5_K,
                                                 T.Q6_K, T.MXFP4)] + [(T.MXFP4, x4, "quant_input_fp4.f32")]:
    x = xin
    ref = ggml_quant_ref(qtype, x)
    try:
        py = bytes(gguf.quants.quantize(x.reshape(-1, 256), qtype).reshape(-1).view(np.uint8))
    except NotImplementedError:
        py = None
    if py is not None and py != ref:
        raise SystemExit(f"{qtype.name}: gguf-py quantize differs from ggml quantize_row_*_ref")
    out = f"q_{qtype.name}.dat" if xname is None else f"q_{qtype.name}_{xname.split('_')[-1][:-4]}.dat"
    with open(os.path.join(OUT, out), "wb") as f:
        f.write(ref)
    manifest.append(f"quant {qtype.name} {int(qtype)} {x.size} {out}" + ("" if xname is None else f" {xname}")
                    + ("" if py is None else "  # gguf-py agrees"))


# ---- dequantization of random blocks -------------------------------------------
def random_blocks(qtype, n_blocks, rng):
    """Random bytes, except that f16 scales are set to finite values of
    varied magnitude (a random one could be inf or NaN, whose payload gguf-py
    and ggml need not agree on); MXFP4's E8M0 byte stays random: every value
    is a finite power of two, and the top ones overflow to inf in both."""
    bs, ts = gguf.GGML_QUANT_SIZES[qtype]
    b = rng.integers(0, 256, (n_blocks, ts), dtype=np.uint8)
    d = (rng.uniform(0.5, 2, n_blocks) * 10.0 ** rng.uniform(-5, 1, n_blocks)).astype(np.float16)
    d[::7] *= -1  # negative scales are legal too
    dh = d.view(np.uint16)
    if qtype == T.IQ1_M:  # the f16 scale is the top nibble of each of the 4 u16 scale words
        for k in range(4):
            w = b[:, 48 + 2 * k].astype(np.uint16) | (b[:, 49 + 2 * k].astype(np.uint16) << 8)
            w = (w & 0x0FFF) | (((dh >> (4 * k)) & 0xF) << 12)
            b[:, 48 + 2 * k], b[:, 49 + 2 * k] = w & 0xFF, w >> 8
    elif qtype != T.MXFP4:  # f16 d first
        b[:, 0], b[:, 1] = dh & 0xFF, dh >> 8
    return b.reshape(-1)


rng = np.random.default_rng(20250523)
for qtype in (T.MXFP4, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S, T.IQ1_S, T.IQ1_M):
    bs, ts = gguf.GGML_QUANT_SIZES[qtype]
    n = 4096
    raw = random_blocks(qtype, n // bs, rng)
    with np.errstate(over="ignore"):
        ref = gguf.quants.dequantize(raw, qtype).astype("<f4").reshape(-1)
    other = ggml_dequant(qtype, raw.tobytes(), n)
    if ref.view(np.uint32).tolist() != other.view(np.uint32).tolist():
        raise SystemExit(f"{qtype.name}: gguf-py and ggml dequantize disagree on random blocks")
    raw.tofile(os.path.join(OUT, f"rand_{qtype.name}.dat"))
    ref.tofile(os.path.join(OUT, f"deq_rand_{qtype.name}.f32"))
    manifest.append(f"dequant_raw {qtype.name} {int(qtype)} rand_{qtype.name}.dat {n} deq_rand_{qtype.name}.f32")

with open(os.path.join(OUT, "manifest.txt"), "w") as f:
    f.write("# generated by make_expected.py (llama.cpp 0.7.0 / ggml 0.27.0 in the oracle chroot)\n")
    f.write("\n".join(manifest) + "\n")
print("\n".join(manifest))
