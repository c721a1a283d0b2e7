"""hf_io.py — a Hugging Face checkpoint directory without the transformers / safetensors packages:
safetensors files (8-byte little-endian header length, a JSON header, the raw tensors) and config.json.
Writes F32 / F16 / BF16, reads the same. Used by train.py (save), export_logits.py and gguf_to_hf.py (which
runs without torch: numpy arrays are written directly)."""
import json
import os
import struct

import numpy as np


def _raw(t):
    """(dtype name, shape, bytes) of a numpy array (F32 / F16) or a torch tensor (F32 / F16 / BF16)."""
    if isinstance(t, np.ndarray):
        t = np.ascontiguousarray(t)
        return {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}[t.dtype], list(t.shape), t.tobytes()
    import torch
    t = t.detach().contiguous().cpu()
    name = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}[t.dtype]
    return name, list(t.shape), (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()


def save_safetensors(path, tensors):
    """tensors: name → numpy array or torch tensor; written in name order, as the safetensors package does."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dt, shape, b = _raw(tensors[name])
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    import torch
    buf = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", buf, 0)
    header = json.loads(buf[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = np.frombuffer(buf, np.uint8, e - b, 8 + n + b)
        if info["dtype"] == "F32":
            t = torch.from_numpy(raw.view(np.float32).copy())
        elif info["dtype"] == "F16":
            t = torch.from_numpy(raw.view(np.float16).copy())
        elif info["dtype"] == "BF16":
            t = torch.from_numpy(raw.view(np.int16).copy()).view(torch.bfloat16)
        else:
            raise ValueError(f"{path}: {name}: dtype {info['dtype']} not handled here")
        out[name] = t.reshape(info["shape"])
    return out


def save_checkpoint(out_dir, model, config, tokenizer_dir=None):
    """config.json + model.safetensors (tied head: no lm_head.weight) + the tokenizer files."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    sd = {k: v for k, v in model.state_dict().items()}
    save_safetensors(os.path.join(out_dir, "model.safetensors"), sd)
    if tokenizer_dir:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            with open(os.path.join(tokenizer_dir, name), "rb") as src, open(os.path.join(out_dir, name), "wb") as dst:
                dst.write(src.read())


def load_checkpoint(hf_dir):
    """→ (model, config) from a directory written by save_checkpoint (or the same layout)."""
    import model as qm
    config = json.load(open(os.path.join(hf_dir, "config.json")))
    m = qm.Qwen35(config)
    sd = {}
    for name in sorted(os.listdir(hf_dir)):
        if name.endswith(".safetensors"):
            sd.update(load_safetensors(os.path.join(hf_dir, name)))
    sd = {k: v.float() for k, v in sd.items() if k != "lm_head.weight"}
    m.load_state_dict(sd)
    return m.eval(), config
