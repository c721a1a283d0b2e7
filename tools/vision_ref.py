#!/usr/bin/env python3
"""vision_ref.py - float64 numpy reference of the qwen3vl_merger vision tower (Qwen3-VL / Qwen3.5 mmproj).

An independent, slow, transparent oracle for src/vision/encoder.c's exact mode, written from the model's
definition (docs/VISION.md), not from the C code:

  vision_ref.py MMPROJ.gguf PIXELS.f32 NX NY OUT.f32

PIXELS.f32: the pre-processed image, float32 [3][NY][NX] (planar, normalised). OUT.f32: float32
[tokens][P * (1 + deepstack layers)], tokens in raster order of the merged (NY/2p) x (NX/2p) grid.
Reads F32 and F16 tensors only (what the synthetic test files hold).

  patches  x[y, x] = W0 . patch + W1 . patch + b + pos(y, x)   (pos: the learned grid, bilinearly resized,
           corners aligned)
  blocks   x += out(attn(rope2d(qkv(LN1 x))))  ;  x += down(gelu(up(LN2 x)))
           rope2d: head of d, pairs (k, k + d/2), freq_k = 10000^(-4k/d) for k < d/4 (angle row * freq_k),
                   and freq_{k - d/4} for k >= d/4 (angle col * freq)
  merger   LN_post per patch, the four patches of each 2x2 group concatenated (dy outer, dx inner),
           mm2(gelu(mm0(.))); deepstack layers: fc2(gelu(fc1(LN_ds(group of the layer's output))))
  gelu     the tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
"""
import struct
import sys

import numpy as np

T_STRING, T_ARRAY = 8, 9
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
FMT = {4: "<I", 5: "<i", 6: "<f", 7: "<B", 0: "<B", 1: "<b", 2: "<H", 3: "<h", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf(path):
    buf = open(path, "rb").read()
    assert buf[:4] == b"GGUF", "not a GGUF file"
    p = 8
    n_t, n_kv = struct.unpack_from("<QQ", buf, p)
    p += 16

    def rstr(p):
        n = struct.unpack_from("<Q", buf, p)[0]
        return buf[p + 8:p + 8 + n].decode("utf-8", "replace"), p + 8 + n

    def rval(p, t):
        if t == T_STRING:
            return rstr(p)
        if t == T_ARRAY:
            at, n = struct.unpack_from("<IQ", buf, p)
            p += 12
            out = []
            for _ in range(n):
                v, p = rval(p, at)
                out.append(v)
            return out, p
        return struct.unpack_from(FMT[t], buf, p)[0], p + SCALAR[t]

    kv = {}
    for _ in range(n_kv):
        k, p = rstr(p)
        t = struct.unpack_from("<I", buf, p)[0]
        kv[k], p = rval(p + 4, t)
    infos = []
    for _ in range(n_t):
        name, p = rstr(p)
        nd = struct.unpack_from("<I", buf, p)[0]
        ne = struct.unpack_from("<%dQ" % nd, buf, p + 4)
        typ, off = struct.unpack_from("<IQ", buf, p + 4 + 8 * nd)
        p += 4 + 8 * nd + 12
        infos.append((name, ne, typ, off))
    align = kv.get("general.alignment", 32)
    base = (p + align - 1) // align * align
    tensors = {}
    for name, ne, typ, off in infos:
        n = int(np.prod(ne))
        if typ == 0:
            a = np.frombuffer(buf, np.float32, n, base + off)
        elif typ == 1:
            a = np.frombuffer(buf, np.float16, n, base + off)
        else:
            raise SystemExit("vision_ref.py: tensor %s has type %d (only f32/f16 are read)" % (name, typ))
        tensors[name] = a.astype(np.float64).reshape(tuple(reversed(ne)))
    return kv, tensors


def layernorm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def resize_pos(table, side, px, py):
    """table [side*side][E] -> [py][px][E], bilinear with aligned corners (output i at input
    i * (side - 1) / (n_out - 1): the grid's corners map onto each other, as torch.linspace(0, side - 1, n)
    in the Hugging Face model and ggml_interpolate's ALIGN_CORNERS flag in llama.cpp)"""
    g = table.reshape(side, side, -1)
    if px == side and py == side:
        return g
    def axis(n_out):
        f = np.arange(n_out) * ((side - 1) / (n_out - 1) if n_out > 1 and side > 1 else side / n_out)
        i0 = np.clip(np.floor(f).astype(int), 0, side - 1)
        a = np.clip(f - i0, 0.0, 1.0)
        return i0, np.clip(i0 + 1, 0, side - 1), a
    y0, y1, ay = axis(py)
    x0, x1, ax = axis(px)
    ax = ax[None, :, None]
    ay = ay[:, None, None]
    top = g[y0][:, x0] * (1 - ax) + g[y0][:, x1] * ax
    bot = g[y1][:, x0] * (1 - ax) + g[y1][:, x1] * ax
    return top * (1 - ay) + bot * ay


def rope2d(v, rows, cols, d):
    """v [T][H][d]; rows, cols [T]"""
    q = d // 4
    freq = 10000.0 ** (-4.0 * np.arange(q) / d)
    ang = np.concatenate([rows[:, None] * freq[None, :], cols[:, None] * freq[None, :]], axis=1)  # [T][d/2]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x0, x1 = v[..., :d // 2], v[..., d // 2:]
    return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)


def encode(kv, t, pix, nx, ny):
    E = kv["clip.vision.embedding_length"]
    H = kv["clip.vision.attention.head_count"]
    L = kv["clip.vision.block_count"]
    p = kv["clip.vision.patch_size"]
    eps = kv["clip.vision.attention.layer_norm_epsilon"]
    d = E // H
    px, py = nx // p, ny // p
    # patch grid in raster order: [py][px][3*p*p] (channel, row, column within the patch)
    img = pix.reshape(3, py, p, px, p)
    patches = img.transpose(1, 3, 0, 2, 4).reshape(py, px, 3 * p * p)
    w0 = t["v.patch_embd.weight"].reshape(E, -1)
    w1 = t["v.patch_embd.weight.1"].reshape(E, -1)
    x = patches @ w0.T + patches @ w1.T + t["v.patch_embd.bias"]
    side = int(round(np.sqrt(t["v.position_embd.weight"].shape[0])))
    x = x + resize_pos(t["v.position_embd.weight"], side, px, py)
    # merge order: the four patches of each 2x2 group adjacent
    x = x.reshape(py // 2, 2, px // 2, 2, E).transpose(0, 2, 1, 3, 4).reshape(-1, E)
    rr, cc = np.meshgrid(np.arange(py), np.arange(px), indexing="ij")
    rows = rr.reshape(py // 2, 2, px // 2, 2).transpose(0, 2, 1, 3).reshape(-1).astype(np.float64)
    cols = cc.reshape(py // 2, 2, px // 2, 2).transpose(0, 2, 1, 3).reshape(-1).astype(np.float64)
    T = x.shape[0]
    deep = []
    for il in range(L):
        b = "v.blk.%d." % il
        h = layernorm(x, t[b + "ln1.weight"], t[b + "ln1.bias"], eps)
        qkv = h @ t[b + "attn_qkv.weight"].T + t[b + "attn_qkv.bias"]
        q = rope2d(qkv[:, :E].reshape(T, H, d), rows, cols, d)
        k = rope2d(qkv[:, E:2 * E].reshape(T, H, d), rows, cols, d)
        v = qkv[:, 2 * E:].reshape(T, H, d)
        s = np.einsum("thd,uhd->htu", q, k) / np.sqrt(d)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("htu,uhd->thd", s, v).reshape(T, E)
        x = x + o @ t[b + "attn_out.weight"].T + t[b + "attn_out.bias"]
        h = layernorm(x, t[b + "ln2.weight"], t[b + "ln2.bias"], eps)
        h = gelu(h @ t[b + "ffn_up.weight"].T + t[b + "ffn_up.bias"])
        x = x + h @ t[b + "ffn_down.weight"].T + t[b + "ffn_down.bias"]
        ds = "v.deepstack.%d." % il
        if ds + "fc1.weight" in t:
            g = layernorm(x.reshape(T // 4, 4 * E), t[ds + "norm.weight"], t[ds + "norm.bias"], eps)
            g = gelu(g @ t[ds + "fc1.weight"].T + t[ds + "fc1.bias"])
            deep.append(g @ t[ds + "fc2.weight"].T + t[ds + "fc2.bias"])
    h = layernorm(x, t["v.post_ln.weight"], t["v.post_ln.bias"], eps).reshape(T // 4, 4 * E)
    h = gelu(h @ t["mm.0.weight"].T + t["mm.0.bias"])
    out = h @ t["mm.2.weight"].T + t["mm.2.bias"]
    return np.concatenate([out] + deep, axis=1)


def main():
    if len(sys.argv) != 6:
        raise SystemExit(__doc__)
    kv, t = read_gguf(sys.argv[1])
    nx, ny = int(sys.argv[3]), int(sys.argv[4])
    pix = np.fromfile(sys.argv[2], np.float32).astype(np.float64)
    if pix.size != 3 * nx * ny:
        raise SystemExit("vision_ref.py: %s has %d floats, expected 3*%d*%d" % (sys.argv[2], pix.size, nx, ny))
    encode(kv, t, pix, nx, ny).astype(np.float32).tofile(sys.argv[5])


if __name__ == "__main__":
    main()
