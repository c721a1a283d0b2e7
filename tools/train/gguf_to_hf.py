"""gguf_to_hf.py — the export helper: a qwen35 GGUF (F32 / F16 / BF16 tensors) → a Hugging Face
checkpoint directory, undoing what the converter does (norm +1, ssm_a = −exp(A_log), conv squeeze, the
V-head reorder, MTP renaming), so that `deltallm convert` of the result gives the same tensor bytes.

Exactness: the reorders are permutations. The inverted arithmetic (w = s − 1, A_log = log(−ssm_a)) is
checked value by value against the converter's forward arithmetic in the tensor's precision, and nudged by
an ulp where a value would not come back bit for bit; the count of values that still differ is printed
(zero on our models). Tensor dtypes are kept: a BF16/F16 matrix stays BF16/F16, F32 stays F32.

usage: gguf_to_hf.py MODEL.gguf OUT_DIR [--tokenizer-dir DIR]   (tokenizer files copied from DIR)"""
import argparse
import json
import os
import shutil

import numpy as np
import torch

import gguf_io
import hf_io


def reorder_v(a, axis, nk, r, hd, inverse):
    """The converter's grouped → tiled V-head permutation (inverse: tiled → grouped) along axis."""
    shape = list(a.shape)
    a = np.moveaxis(a, axis, 0)
    rest = a.shape[1:]
    a = a.reshape((r, nk, hd) + rest) if inverse else a.reshape((nk, r, hd) + rest)
    a = np.swapaxes(a, 0, 1).reshape((nk * r * hd,) + rest)
    return np.moveaxis(a, 0, axis).reshape(shape)


def exact_inverse(target, inverse, forward, dtype):
    """x = inverse(target) in dtype, then fixed up so forward(x) == target bitwise where a neighbour does it."""
    x = inverse(target.astype(np.float64)).astype(dtype)
    bad = forward(x) != target
    for step in (1, -1, 2, -2):
        if not bad.any():
            break
        cand = x.copy()
        for _ in range(abs(step)):
            cand[bad] = np.nextafter(cand[bad], np.array(np.inf if step > 0 else -np.inf, dtype))
        fix = bad & (forward(cand) == target)
        x[fix] = cand[fix]
        bad &= ~fix
    return x, int(bad.sum())


def plus_one(x):
    # the converter adds 1 in the tensor's own precision (F16 stays F16; BF16 was widened to F32)
    return (x + np.array(1, x.dtype)).astype(x.dtype)


def neg_exp(x):
    return (-np.exp(x.astype(np.float64))).astype(x.dtype)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--tokenizer-dir")
    a = ap.parse_args()
    g = gguf_io.Gguf(a.gguf)
    arch = g.kv["general.architecture"]
    if arch != "qwen35":
        raise SystemExit(f"gguf_to_hf: {arch}: only qwen35 (dense) is handled by this helper")
    kv = lambda k, d=None: g.kv.get(f"{arch}.{k}", d)
    n_all, n_mtp = kv("block_count"), kv("nextn_predict_layers", 0)
    L = n_all - n_mtp
    nk, nv, dk = kv("ssm.group_count"), kv("ssm.time_step_rank"), kv("ssm.state_size")
    dv = kv("ssm.inner_size") // nv
    r = nv // nk
    interval = kv("full_attention_interval", 4)
    head_dim = kv("attention.key_length")
    tied = "output.weight" not in g.tensors
    vocab = g.tensors["token_embd.weight"][0][1]
    cfg = {
        "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
        "vocab_size": vocab, "hidden_size": kv("embedding_length"), "num_hidden_layers": L,
        "full_attention_interval": interval, "num_attention_heads": kv("attention.head_count"),
        "num_key_value_heads": kv("attention.head_count_kv"), "head_dim": head_dim,
        "intermediate_size": kv("feed_forward_length"), "linear_conv_kernel_dim": kv("ssm.conv_kernel"),
        "linear_key_head_dim": dk, "linear_value_head_dim": dv, "linear_num_key_heads": nk,
        "linear_num_value_heads": nv, "rms_norm_eps": kv("attention.layer_norm_rms_epsilon"),
        "rope_parameters": {"rope_type": "default", "rope_theta": kv("rope.freq_base", 10000.0),
                            "partial_rotary_factor": kv("rope.dimension_count") / head_dim,
                            "mrope_section": list(kv("rope.dimension_sections"))[:3], "mrope_interleaved": True},
        "max_position_embeddings": kv("context_length"), "tie_word_embeddings": tied,
        "mtp_num_hidden_layers": n_mtp, "mtp_use_dedicated_embeddings": False, "hidden_act": "silu",
        "attention_bias": False, "attn_output_gate": True,
        "eos_token_id": g.kv.get("tokenizer.ggml.eos_token_id"), "bos_token_id": None,
    }
    names = {"attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
             "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
             "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
             "attn_qkv": "linear_attn.in_proj_qkv", "attn_gate": "linear_attn.in_proj_z",
             "ssm_beta": "linear_attn.in_proj_b", "ssm_alpha": "linear_attn.in_proj_a",
             "ssm_conv1d": "linear_attn.conv1d", "ssm_norm": "linear_attn.norm", "ssm_out": "linear_attn.out_proj"}
    mtp_names = {"nextn.eh_proj": "mtp.fc", "nextn.enorm": "mtp.pre_fc_norm_embedding",
                 "nextn.hnorm": "mtp.pre_fc_norm_hidden", "nextn.shared_head_norm": "mtp.norm"}
    out, unmatched = {}, 0
    for gname in g.tensors:
        t, _ = g.raw(gname)
        dtype = {gguf_io.GGML_F32: np.float32, gguf_io.GGML_F16: np.float16}.get(t, np.float32)
        x = g.tensor(gname)
        if t == gguf_io.GGML_F16:
            x = x.astype(np.float16)
        base = gname[:-len(".weight")] if gname.endswith(".weight") else gname
        if gname == "token_embd.weight":
            hf = "model.embed_tokens.weight"
        elif gname == "output_norm.weight":
            hf = "model.norm.weight"
        elif gname == "output.weight":
            hf = "lm_head.weight"
        else:
            _, n, rest = base.split(".", 2)
            n = int(n)
            if rest in mtp_names:
                hf = mtp_names[rest] + ".weight"
            elif rest == "ssm_a":
                hf = f"model.layers.{n}.linear_attn.A_log"
            elif rest == "ssm_dt.bias":
                hf = f"model.layers.{n}.linear_attn.dt_bias"
            else:
                hf = (f"model.layers.{n}." if n < L else f"mtp.layers.{n - L}.") + names[rest] + ".weight"
        # undo the converter's arithmetic and permutations
        if hf.endswith("norm.weight") and not hf.endswith("linear_attn.norm.weight"):
            x, bad = exact_inverse(x, lambda s: s - 1.0, plus_one, x.dtype)
            unmatched += bad
        if hf.endswith("A_log"):
            x, bad = exact_inverse(x, lambda s: np.log(-s), neg_exp, x.dtype)
            unmatched += bad
        if "linear_attn." in hf and nk != nv:
            if hf.endswith("in_proj_qkv.weight"):
                x = np.concatenate([x[:2 * nk * dk], reorder_v(x[2 * nk * dk:], 0, nk, r, dv, True)], 0)
            elif hf.endswith("in_proj_z.weight"):
                x = reorder_v(x, 0, nk, r, dv, True)
            elif hf.endswith(("in_proj_b.weight", "in_proj_a.weight", "A_log", "dt_bias")):
                x = reorder_v(x, 0, nk, r, 1, True)
            elif hf.endswith("conv1d.weight"):
                x = np.concatenate([x[:2 * nk * dk], reorder_v(x[2 * nk * dk:], 0, nk, r, dv, True)], 0)
            elif hf.endswith("out_proj.weight"):
                x = reorder_v(x, 1, nk, r, dv, True)
        if hf.endswith("conv1d.weight"):
            x = x[:, None, :]
        tt = torch.from_numpy(np.ascontiguousarray(x))
        if t == gguf_io.GGML_BF16:
            tt = tt.to(torch.bfloat16)   # exact: the values came from BF16
        out[hf] = tt
    os.makedirs(a.out, exist_ok=True)
    hf_io.save_safetensors(os.path.join(a.out, "model.safetensors"), out)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if a.tokenizer_dir:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(a.tokenizer_dir, name), os.path.join(a.out, name))
    print(f"gguf_to_hf: {len(out)} tensors → {a.out}; {unmatched} values not exactly invertible")


if __name__ == "__main__":
    main()
