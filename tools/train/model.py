"""model.py — the qwen35 architecture in PyTorch, as deltallm runs it (docs/MODEL.md), in the Hugging Face
Qwen3.5 layout (parameter names are the checkpoint's names, so a state dict is a checkpoint).

  x = embed_tokens[token]
  per layer: x += mixer(RMSNorm(x)); x += SwiGLU(RMSNorm(x))      mixer: GatedDeltaNet or gated attention
  h = RMSNorm(x) · norm;  logits = embed_tokens · h                  (tied head)
  MTP block (mtp.*): m = fc(concat(RMSNorm(embed(t+1)), RMSNorm(h_t))) → one attention decoder layer →
                     RMSNorm (mtp.norm) → the same head: predicts token t+2 from position t.

HF conventions kept: RMSNorm weights are zero-centred (scale 1 + w; the converter bakes the +1),
`linear_attn.norm` is plain; A_log with decay g = −exp(A_log)·softplus(a + dt_bias); value heads grouped
per key head (head j reads key head j // r: the converter reorders them for ggml). Where HF and deltallm
differ numerically, deltallm's choice is taken: the L2 norm is x / max(‖x‖, eps) with the RMS eps.

The delta rule runs in chunked (WY) form for training (chunk 64, one triangular solve per chunk) and in
plain recurrent form for checking (`recurrent=True`); both are the same math."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

DEFAULT_CONFIG = dict(
    architectures=["Qwen3_5ForCausalLM"], model_type="qwen3_5_text",
    vocab_size=4096, hidden_size=256, num_hidden_layers=6, full_attention_interval=3,
    num_attention_heads=4, num_key_value_heads=2, head_dim=64, intermediate_size=768,
    linear_conv_kernel_dim=4, linear_key_head_dim=64, linear_value_head_dim=64,
    linear_num_key_heads=2, linear_num_value_heads=4, rms_norm_eps=1e-6,
    rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25,
                         mrope_section=[3, 3, 2], mrope_interleaved=True),
    max_position_embeddings=4096, tie_word_embeddings=True, mtp_num_hidden_layers=1,
    mtp_use_dedicated_embeddings=False, hidden_act="silu", attention_bias=False, attn_output_gate=True,
    torch_dtype="float32", bos_token_id=None, eos_token_id=4093, pad_token_id=4093,
)


def layer_types(cfg):
    n = cfg["full_attention_interval"]
    return ["full_attention" if (i + 1) % n == 0 else "linear_attention" for i in range(cfg["num_hidden_layers"])]


class RMSNorm(nn.Module):
    """Zero-centred weight: y = x / rms(x) · (1 + w)."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)


class GatedRMSNorm(nn.Module):
    """linear_attn.norm: y = x / rms(x) · w · silu(z), plain weight."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x, z):
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * self.weight * F.silu(z)


def l2norm(x, eps):
    return x / torch.clamp(x.norm(dim=-1, keepdim=True), min=eps)


def delta_rule_recurrent(q, k, v, g, beta, state=None):
    """q, k [B,H,T,Dk] (normed, q already scaled), v [B,H,T,Dv], g, beta [B,H,T]. Returns o, final state
    S [B,H,Dk,Dv]. S ← e^g S; δ = β(v − Sᵀk); S ← S + k δᵀ; o = Sᵀq."""
    B, H, T, Dk = k.shape
    S = q.new_zeros(B, H, Dk, v.shape[-1]) if state is None else state
    out = []
    for t in range(T):
        S = S * g[:, :, t, None, None].exp()
        d = (v[:, :, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, :, t])) * beta[:, :, t, None]
        S = S + k[:, :, t, :, None] * d[:, :, None, :]
        out.append(torch.einsum("bhkv,bhk->bhv", S, q[:, :, t]))
    return torch.stack(out, 2), S


def delta_rule_chunked(q, k, v, g, beta, chunk=64):
    """The same recurrence in WY form (docs/MODEL.md, 'Chunked'); zero padding to a whole chunk."""
    B, H, T, Dk = k.shape
    Dv = v.shape[-1]
    pad = (-T) % chunk
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    N = (T + pad) // chunk
    q, k, v = (x.reshape(B, H, N, chunk, -1) for x in (q, k, v))
    g, beta = (x.reshape(B, H, N, chunk) for x in (g, beta))
    G = g.cumsum(-1)
    diff = G[..., :, None] - G[..., None, :]
    tri = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    decay = diff.masked_fill(~tri, float("-inf")).exp()            # e^{G_r − G_c}, c ≤ r
    strict = tri & ~torch.eye(chunk, dtype=torch.bool, device=q.device)
    A = (beta[..., :, None] * (k @ k.transpose(-1, -2)) * decay).masked_fill(~strict, 0.0)
    eye = torch.eye(chunk, dtype=q.dtype, device=q.device)
    Tinv = torch.linalg.solve_triangular(eye + A, eye.expand_as(A), upper=False)
    U = Tinv @ (beta[..., None] * v)
    W = Tinv @ ((beta * G.exp())[..., None] * k)
    QK = (q @ k.transpose(-1, -2)) * decay
    S = q.new_zeros(B, H, Dk, Dv)
    out = []
    for n in range(N):
        vnew = U[:, :, n] - W[:, :, n] @ S
        out.append((q[:, :, n] * G[:, :, n, :, None].exp()) @ S + QK[:, :, n] @ vnew)
        last = G[:, :, n, -1]
        S = S * last[..., None, None].exp() + (k[:, :, n] * (last[..., None] - G[:, :, n]).exp()[..., None]).transpose(-1, -2) @ vnew
    o = torch.stack(out, 2).reshape(B, H, N * chunk, Dv)[:, :, :T]
    return o, S


class GatedDeltaNet(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.hk, self.hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        self.dk, self.dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        self.key_dim, self.value_dim = self.hk * self.dk, self.hv * self.dv
        self.conv_dim = 2 * self.key_dim + self.value_dim
        self.kc = c["linear_conv_kernel_dim"]
        self.eps = c["rms_norm_eps"]
        E = c["hidden_size"]
        self.in_proj_qkv = nn.Linear(E, self.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(E, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(E, self.hv, bias=False)
        self.in_proj_a = nn.Linear(E, self.hv, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.kc, groups=self.conv_dim, bias=False, padding=self.kc - 1)
        self.dt_bias = nn.Parameter(torch.ones(self.hv))
        self.A_log = nn.Parameter(torch.log(torch.empty(self.hv).uniform_(1, 16)))
        self.norm = GatedRMSNorm(self.dv, self.eps)
        self.out_proj = nn.Linear(self.value_dim, E, bias=False)

    def forward(self, x, recurrent=False):
        B, T, _ = x.shape
        mixed = self.in_proj_qkv(x).transpose(1, 2)
        mixed = F.silu(self.conv1d(mixed)[..., :T]).transpose(1, 2)
        q, k, v = torch.split(mixed, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = l2norm(q.reshape(B, T, self.hk, self.dk), self.eps)
        k = l2norm(k.reshape(B, T, self.hk, self.dk), self.eps)
        v = v.reshape(B, T, self.hv, self.dv)
        r = self.hv // self.hk
        q, k = q.repeat_interleave(r, dim=2), k.repeat_interleave(r, dim=2)   # value head j ← key head j // r
        beta = torch.sigmoid(self.in_proj_b(x))
        g = -self.A_log.exp() * F.softplus(self.in_proj_a(x) + self.dt_bias)
        q = q / math.sqrt(self.dk)
        args = [t.transpose(1, 2) for t in (q, k, v, g, beta)]
        o, _ = delta_rule_recurrent(*args) if recurrent else delta_rule_chunked(*args)
        o = self.norm(o.transpose(1, 2), self.in_proj_z(x).reshape(B, T, self.hv, self.dv))
        return self.out_proj(o.reshape(B, T, self.value_dim))


def rope_tables(c, T, device, offset=0):
    rp = c["rope_parameters"]
    R = int(c["head_dim"] * rp["partial_rotary_factor"])
    inv = 1.0 / (rp["rope_theta"] ** (torch.arange(0, R, 2, dtype=torch.float64) / R))
    ang = torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], -1)
    return ang.cos().float().to(device), ang.sin().float().to(device), R


def apply_rope(x, cos, sin, R):
    """NeoX pairs (i, i + R/2) on the first R dims; x [B,T,H,D]."""
    xr, xp = x[..., :R], x[..., R:]
    x1, x2 = xr[..., :R // 2], xr[..., R // 2:]
    rot = torch.cat([-x2, x1], -1)
    return torch.cat([xr * cos[None, :, None, :] + rot * sin[None, :, None, :], xp], -1)


class GatedAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        E, self.h, self.hkv, self.d = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.q_proj = nn.Linear(E, self.h * self.d * 2, bias=False)     # per head [query | gate]
        self.k_proj = nn.Linear(E, self.hkv * self.d, bias=False)
        self.v_proj = nn.Linear(E, self.hkv * self.d, bias=False)
        self.o_proj = nn.Linear(self.h * self.d, E, bias=False)
        self.q_norm = RMSNorm(self.d, c["rms_norm_eps"])
        self.k_norm = RMSNorm(self.d, c["rms_norm_eps"])

    def forward(self, x, rope):
        B, T, _ = x.shape
        q, gate = torch.chunk(self.q_proj(x).reshape(B, T, self.h, 2 * self.d), 2, dim=-1)
        q = apply_rope(self.q_norm(q), *rope)
        k = apply_rope(self.k_norm(self.k_proj(x).reshape(B, T, self.hkv, self.d)), *rope)
        v = self.v_proj(x).reshape(B, T, self.hkv, self.d)
        rep = self.h // self.hkv
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(self.d)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        o = (s.masked_fill(~causal, float("-inf")).softmax(-1) @ v).transpose(1, 2)
        o = o.reshape(B, T, self.h * self.d) * torch.sigmoid(gate.reshape(B, T, -1))
        return self.o_proj(o)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        E, Fd = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(E, Fd, bias=False)
        self.up_proj = nn.Linear(E, Fd, bias=False)
        self.down_proj = nn.Linear(Fd, E, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c, kind):
        super().__init__()
        self.kind = kind
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        if kind == "linear_attention":
            self.linear_attn = GatedDeltaNet(c)
        else:
            self.self_attn = GatedAttention(c)
        self.mlp = MLP(c)

    def forward(self, x, rope, recurrent=False):
        h = self.input_layernorm(x)
        x = x + (self.linear_attn(h, recurrent) if self.kind == "linear_attention" else self.self_attn(h, rope))
        return x + self.mlp(self.post_attention_layernorm(x))


class Trunk(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(DecoderLayer(c, t) for t in layer_types(c))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Mtp(nn.Module):
    def __init__(self, c):
        super().__init__()
        E = c["hidden_size"]
        self.pre_fc_norm_embedding = RMSNorm(E, c["rms_norm_eps"])
        self.pre_fc_norm_hidden = RMSNorm(E, c["rms_norm_eps"])
        self.fc = nn.Linear(2 * E, E, bias=False)
        self.layers = nn.ModuleList([DecoderLayer(c, "full_attention")])
        self.norm = RMSNorm(E, c["rms_norm_eps"])


class Qwen35(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.model = Trunk(c)
        self.mtp = Mtp(c) if c.get("mtp_num_hidden_layers", 0) else None
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, tokens, recurrent=False, with_mtp=True):
        """tokens [B,T] → main logits [B,T,V] (token t+1) and MTP logits [B,T−1,V] (token t+2 from
        position t, fed the true token t+1), or None without MTP."""
        T = tokens.shape[1]
        rope = rope_tables(self.config, T, tokens.device)
        x = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            x = layer(x, rope, recurrent)
        h = self.model.norm(x)
        W = self.model.embed_tokens.weight
        logits = h @ W.t()
        if not with_mtp or self.mtp is None or T < 2:
            return logits, None
        return logits, self.mtp_logits(h[:, :-1], tokens[:, 1:])

    def mtp_logits(self, h, next_tokens):
        m = self.mtp
        e = m.pre_fc_norm_embedding(self.model.embed_tokens(next_tokens))
        x = m.fc(torch.cat([e, m.pre_fc_norm_hidden(h)], -1))
        x = m.layers[0](x, rope_tables(self.config, x.shape[1], x.device))
        return m.norm(x) @ self.model.embed_tokens.weight.t()
