"""gguf_to_hf.py — the export helper: a GGUF of qwen35, qwen35moe or qwen3next (F32 / F16 / BF16 / Q8_0
tensors; qwen3next in either layout) → a Hugging Face checkpoint directory (config.json, model.safetensors,
tokenizer.json, tokenizer_config.json), undoing what the converter does: norm +1, ssm_a = −exp(A_log),
conv squeeze, the qwen3.5 V-head reorder, qwen3next's qkvz regrouping, expert stacking (qwen3next: one
tensor per expert; qwen35moe: the fused gate_up_proj / down_proj of transformers), MTP renaming.
`deltallm convert` of the result gives back the same tensors.

Exactness: permutations are exact; Q8_0 is dequantized exactly (q·d fits F32; requantizing gives the same
blocks). The inverted arithmetic (w = s − 1, A_log = log(−ssm_a)) is checked value by value against the
converter's forward arithmetic in the tensor's precision and nudged by an ulp where that brings it back
bit for bit; values with no exact preimage (a random ssm_a may have none) are counted and printed — zero
for any GGUF the converter wrote. numpy only (runs in CI).

usage: gguf_to_hf.py MODEL.gguf OUT_DIR [--shards=N]"""
import json
import os
import sys

import numpy as np

import gguf_io
import hf_io

GGML_Q8_0 = 8


def dequant(g, name):
    ne, t, off = g.tensors[name]
    if t != GGML_Q8_0:
        x = g.tensor(name)
        return x.astype(np.float16) if t == gguf_io.GGML_F16 else x, t
    n = int(np.prod(ne))
    raw = np.frombuffer(g.buf, np.uint8, n // 32 * 34, g.data + off).reshape(-1, 34)
    d = raw[:, :2].copy().view(np.float16).astype(np.float32)
    q = raw[:, 2:].copy().view(np.int8).astype(np.float32)
    return (q * d).reshape(list(reversed(ne))), t


def reorder_v(a, axis, nk, r, hd, inverse):
    """The converter's grouped → tiled V-head permutation (inverse: tiled → grouped) along axis."""
    shape = list(a.shape)
    a = np.moveaxis(a, axis, 0)
    rest = a.shape[1:]
    a = a.reshape((r, nk, hd) + rest) if inverse else a.reshape((nk, r, hd) + rest)
    a = np.swapaxes(a, 0, 1).reshape((nk * r * hd,) + rest)
    return np.moveaxis(a, 0, axis).reshape(shape)


def exact_inverse(target, inverse, forward):
    """x = inverse(target) in target's dtype, fixed up so forward(x) == target bitwise where a neighbour does."""
    dtype = target.dtype
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


def plus_one(x):  # the converter adds 1 in the tensor's own precision (BF16 was widened to F32)
    return (x + np.array(1, x.dtype)).astype(x.dtype)


def torch_expf(x):
    """torch's float32 CPU exp (SLEEF expf_u10, FMA form), as deltallm convert and llama.cpp's converter apply it
    to A_log; each fma is emulated in float64 (exact products; the sum rounds twice, which matters with
    probability ~2^-29)."""
    x = x.astype(np.float32)
    f32, f64 = np.float32, np.float64
    fma = lambda a, b, c: (a.astype(f64) * f64(b) + f64(c)).astype(f32) if np.ndim(b) == 0 else (a.astype(f64) * b.astype(f64) + f64(c) if np.ndim(c) == 0 else a.astype(f64) * b.astype(f64) + c.astype(f64)).astype(f32)
    q = np.rint(x * f32(1.442695040888963407359924681001892137426645954152985934135449406931)).astype(np.int32)
    qf = q.astype(f32)
    s = (qf.astype(f64) * f64(f32(-0.693145751953125)) + x.astype(f64)).astype(f32)
    s = (qf.astype(f64) * f64(f32(-1.428606765330187045e-06)) + s.astype(f64)).astype(f32)
    u = np.full_like(s, f32(0.000198527617612853646278381))
    for c in (0.00139304355252534151077271, 0.00833336077630519866943359, 0.0416664853692054748535156,
              0.166666671633720397949219, 0.5):
        u = (u.astype(f64) * s.astype(f64) + f64(f32(c))).astype(f32)
    u = f32(1.0) + ((s * s).astype(f64) * u.astype(f64) + s.astype(f64)).astype(f32)
    m = q >> 1
    u = u * ((m + 127).astype(np.uint32) << 23).view(f32) * ((q - m + 127).astype(np.uint32) << 23).view(f32)
    u = np.where(x < -104, f32(0), u)
    return np.where(x > 100, f32(np.inf), u).astype(f32)


def neg_exp(x):  # the converter's ssm_a = -exp(A_log): torch's exp, rounded to the tensor's precision
    return (-torch_expf(x)).astype(x.dtype)


LAYER = {"attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
         "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
         "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
         "attn_qkv": "linear_attn.in_proj_qkv", "attn_gate": "linear_attn.in_proj_z",
         "ssm_beta": "linear_attn.in_proj_b", "ssm_alpha": "linear_attn.in_proj_a", "ssm_ba": "linear_attn.in_proj_ba",
         "ssm_in": "linear_attn.in_proj_qkvz", "ssm_conv1d": "linear_attn.conv1d", "ssm_norm": "linear_attn.norm",
         "ssm_out": "linear_attn.out_proj", "ffn_gate_inp": "mlp.gate", "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
         "ffn_gate_shexp": "mlp.shared_expert.gate_proj", "ffn_up_shexp": "mlp.shared_expert.up_proj",
         "ffn_down_shexp": "mlp.shared_expert.down_proj"}
MTP = {"nextn.eh_proj": "mtp.fc", "nextn.enorm": "mtp.pre_fc_norm_embedding",
       "nextn.hnorm": "mtp.pre_fc_norm_hidden", "nextn.shared_head_norm": "mtp.norm"}


def export(path, out_dir, shards=1):
    g = gguf_io.Gguf(path)
    arch = g.kv["general.architecture"]
    if arch not in ("qwen35", "qwen35moe", "qwen3next"):
        raise SystemExit(f"gguf_to_hf: {arch}: not qwen35 / qwen35moe / qwen3next")
    kv = lambda k, d=None: g.kv.get(f"{arch}.{k}", d)
    n_all, n_mtp = kv("block_count"), kv("nextn_predict_layers", 0)
    L = n_all - n_mtp
    nk, nv, dk = kv("ssm.group_count"), kv("ssm.time_step_rank"), kv("ssm.state_size")
    dv = kv("ssm.inner_size") // nv
    r = nv // nk
    head_dim = kv("attention.key_length")
    vocab = g.tensors["token_embd.weight"][0][1]
    tied = "output.weight" not in g.tensors
    names = {"qwen35": "Qwen3_5ForCausalLM", "qwen35moe": "Qwen3_5MoeForCausalLM", "qwen3next": "Qwen3NextForCausalLM"}
    cfg = {"architectures": [names[arch]], "vocab_size": vocab, "hidden_size": kv("embedding_length"),
           "num_hidden_layers": L, "full_attention_interval": kv("full_attention_interval", 4),
           "num_attention_heads": kv("attention.head_count"), "num_key_value_heads": kv("attention.head_count_kv"),
           "head_dim": head_dim, "linear_conv_kernel_dim": kv("ssm.conv_kernel"), "linear_key_head_dim": dk,
           "linear_value_head_dim": dv, "linear_num_key_heads": nk, "linear_num_value_heads": nv,
           "rms_norm_eps": kv("attention.layer_norm_rms_epsilon"), "max_position_embeddings": kv("context_length"),
           "tie_word_embeddings": tied, "hidden_act": "silu", "attention_bias": False,
           "eos_token_id": g.kv.get("tokenizer.ggml.eos_token_id")}
    if kv("feed_forward_length") is not None:
        cfg["intermediate_size"] = kv("feed_forward_length")
    rope = {"rope_type": "default", "rope_theta": kv("rope.freq_base", 10000.0),
            "partial_rotary_factor": kv("rope.dimension_count") / head_dim}
    if arch == "qwen3next":
        cfg.update(rope_theta=rope["rope_theta"], partial_rotary_factor=rope["partial_rotary_factor"])
    else:
        rope.update(mrope_section=list(kv("rope.dimension_sections"))[:3], mrope_interleaved=True)
        cfg.update(rope_parameters=rope, mtp_num_hidden_layers=n_mtp, mtp_use_dedicated_embeddings=False)
    if arch != "qwen35":
        cfg.update(num_experts=kv("expert_count"), num_experts_per_tok=kv("expert_used_count"),
                   moe_intermediate_size=kv("expert_feed_forward_length"), norm_topk_prob=True,
                   shared_expert_intermediate_size=kv("expert_shared_feed_forward_length"), decoder_sparse_step=1)
    out, unmatched = {}, 0
    for gname in g.tensors:
        x, t = dequant(g, gname)
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
            pre = f"model.layers.{n}." if n < L else f"mtp.layers.{n - L}."
            if rest in MTP:
                hf = MTP[rest] + ".weight"
            elif rest == "ssm_a":
                hf = pre + "linear_attn.A_log"
            elif rest == "ssm_dt.bias":
                hf = pre + "linear_attn.dt_bias"
            elif rest.endswith("_exps"):
                hf = pre + "mlp.experts." + rest[len("ffn_"):-len("_exps")]
            else:
                hf = pre + LAYER[rest] + ".weight"
        if gname.endswith("norm.weight") and not gname.endswith("ssm_norm.weight"):  # the converter's +1 (by its name)
            x, bad = exact_inverse(x, lambda s: s - 1.0, plus_one)
            unmatched += bad
        if hf.endswith("A_log"):
            x, bad = exact_inverse(x, lambda s: np.log(-s), neg_exp)
            unmatched += bad
        if arch != "qwen3next" and nk != nv and "linear_attn." in hf:
            if hf.endswith(("in_proj_qkv.weight", "conv1d.weight")):
                x = np.concatenate([x[:2 * nk * dk], reorder_v(x[2 * nk * dk:], 0, nk, r, dv, True)], 0)
            elif hf.endswith("in_proj_z.weight"):
                x = reorder_v(x, 0, nk, r, dv, True)
            elif hf.endswith(("in_proj_b.weight", "in_proj_a.weight", "A_log", "dt_bias")):
                x = reorder_v(x, 0, nk, r, 1, True)
            elif hf.endswith("out_proj.weight"):
                x = reorder_v(x, 1, nk, r, dv, True)
        if hf.endswith("conv1d.weight"):
            x = x[:, None, :]
        if hf.endswith("shared_expert_gate.weight") and x.ndim == 1:
            x = x[None, :]                                   # HF stores it [1, E]
        if arch == "qwen3next" and hf.endswith("in_proj_qkv.weight"):
            # back to HF's in_proj_qkvz, grouped per key head [q_g | k_g | v_g | z_g]; z joins below
            out[hf] = x
            continue
        if ".mlp.experts." in hf:
            kind = hf.rsplit(".", 1)[1]
            if arch == "qwen3next":                          # one tensor per expert
                for e in range(x.shape[0]):
                    out[f"{hf}.{e}.{kind}_proj.weight".replace(f".experts.{kind}.", ".experts.")] = x[e]
            else:                                            # transformers' fused 3-D experts
                out[f"{hf}"] = x
            continue
        out[hf] = x
    # qwen3next: regroup attn_qkv + attn_gate into in_proj_qkvz
    for k in [k for k in out if k.endswith("linear_attn.in_proj_qkv.weight") and arch == "qwen3next"]:
        qkv, z = out.pop(k), out.pop(k.replace("in_proj_qkv", "in_proj_z"))
        q, kk, v = qkv[:nk * dk], qkv[nk * dk:2 * nk * dk], qkv[2 * nk * dk:]
        rows = []
        for gi in range(nk):
            rows += [q[gi * dk:(gi + 1) * dk], kk[gi * dk:(gi + 1) * dk], v[gi * r * dv:(gi + 1) * r * dv], z[gi * r * dv:(gi + 1) * r * dv]]
        out[k.replace("in_proj_qkv", "in_proj_qkvz")] = np.concatenate(rows, 0)
    # qwen35moe: gate + up experts fused as transformers stores them
    for k in [k for k in out if k.endswith("mlp.experts.gate")]:
        gate, up = out.pop(k), out.pop(k[:-len("gate")] + "up")
        out[k[:-len("gate")] + "gate_up_proj"] = np.concatenate([gate, up], 1)
        out[k[:-len("gate")] + "down_proj"] = out.pop(k[:-len("gate")] + "down")
    os.makedirs(out_dir, exist_ok=True)
    if shards == 1:
        hf_io.save_safetensors(os.path.join(out_dir, "model.safetensors"), out)
    else:  # model-0000K-of-0000N.safetensors + model.safetensors.index.json, names dealt round-robin
        names = sorted(out)
        parts = [f"model-{k + 1:05d}-of-{shards:05d}.safetensors" for k in range(shards)]
        for k in range(shards):
            hf_io.save_safetensors(os.path.join(out_dir, parts[k]), {n: out[n] for n in names[k::shards]})
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": {n: parts[i % shards] for i, n in enumerate(names)}}, f, indent=1)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_tokenizer(g, out_dir)
    print(f"gguf_to_hf: {len(out)} tensors → {out_dir}; {unmatched} values without an exact preimage")
    return unmatched


def write_tokenizer(g, out_dir):
    toks, types = g.kv["tokenizer.ggml.tokens"], g.kv["tokenizer.ggml.token_type"]
    merges = g.kv.get("tokenizer.ggml.merges", [])
    pre = g.kv.get("tokenizer.ggml.pre", "qwen2")
    import vocab as vmod
    pattern = vmod.QWEN35_PRETOKENIZE if pre == "qwen35" else vmod.QWEN35_PRETOKENIZE.replace(r"[\p{L}\p{M}]+", r"\p{L}+").replace(r"\p{M}\p{N}", r"\p{N}")
    added = [{"id": i, "content": t, "special": types[i] == 3} for i, t in enumerate(toks) if types[i] in (3, 4)]
    tj = vmod.tokenizer_json({t: i for i, t in enumerate(toks) if types[i] == 1}, merges, added, pattern)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    name = lambda k: toks[g.kv[k]] if k in g.kv else None
    tc = {"add_bos_token": bool(g.kv.get("tokenizer.ggml.add_bos_token", False)), "bos_token": name("tokenizer.ggml.bos_token_id"),
          "eos_token": name("tokenizer.ggml.eos_token_id"), "pad_token": name("tokenizer.ggml.padding_token_id"),
          "tokenizer_class": "Qwen2Tokenizer"}
    if "tokenizer.chat_template" in g.kv:
        tc["chat_template"] = g.kv["tokenizer.chat_template"]
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tc, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--shards=")]
    shards = int(next((a.split("=")[1] for a in sys.argv[1:] if a.startswith("--shards=")), 1))
    if len(args) != 2:
        raise SystemExit(__doc__.rsplit("usage: ", 1)[1])
    export(args[0], args[1], shards)
