/* parity.c — see parity.h. The stage table maps each step of the forward pass to llama.cpp's tensor name
 * (docs/PARITY.md); deltallm dumps under the same names (model/dump.h). */
#include "cli/parity.h"

#include "cli/dump_load.h"
#include "cli/logit_compare.h"
#include "model/dump.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Stage {
    const char *label;
    const char *names[2]; /* llama.cpp base names tried in order (the first present in the reference wins) */
    int occurrence;
    bool routing;    /* compare as selected-expert sets */
    bool recurrent;  /* only on delta-net layers (the name means something else on attention layers) */
    bool attention;  /* only on attention layers */
} Stage;

static const Stage stages[] = {
    {"embeddings", {"model.embed_tokens", "model.input_embed"}, 0, false, false, false},
    {"layer input (normed)", {"attn_norm", NULL}, 0, false, false, false},
    {"qkv projection", {"linear_attn_qkv_mixed", "qkv_mixed"}, 0, false, false, false},
    {"beta = sigmoid(b)", {"beta_sigmoid", "b"}, 0, false, false, false},
    {"g = softplus(a+dt)*ssm_a", {"gate", NULL}, 0, false, true, false},
    {"conv1d + SiLU", {"conv_output_silu", NULL}, 0, false, false, false},
    {"conv-state shift", {"conv_state_last", NULL}, 0, false, false, false},
    {"Q split + L2 norm", {"q_conv_predelta", NULL}, 0, false, false, false},
    {"K split + L2 norm", {"k_conv_predelta", NULL}, 0, false, false, false},
    {"V split", {"v_conv_predelta", NULL}, 0, false, false, false},
    {"recurrence output", {"attn_output", NULL}, 0, false, true, false},
    {"final state", {"new_state", NULL}, 0, false, false, false},
    {"z (gate projection)", {"z", NULL}, 0, false, false, false},
    {"gated RMSNorm", {"final_output", NULL}, 0, false, false, false},
    {"ssm_out", {"linear_attn_out", NULL}, 0, false, false, false},
    {"attn q (normed, roped)", {"Qcur", NULL}, 0, false, false, false},
    {"attn k (normed, roped)", {"Kcur", NULL}, 1, false, false, false},
    {"attention (pre-gate)", {"attn_pregate", NULL}, 0, false, false, false},
    {"attention gated", {"attn_gated", NULL}, 0, false, false, false},
    {"attention output", {"attn_output", NULL}, 0, false, false, true},
    {"mixer + residual", {"attn_residual", NULL}, 0, false, false, false},
    {"post-attention norm", {"attn_post_norm", NULL}, 0, false, false, false},
    {"MoE router logits", {"ffn_moe_logits", NULL}, 0, false, false, false},
    {"MoE routing (experts)", {"ffn_moe_topk", NULL}, 0, true, false, false},
    {"MoE weights", {"ffn_moe_weights_norm", NULL}, 0, false, false, false},
    {"MoE experts out", {"ffn_moe_out", NULL}, 0, false, false, false},
    {"shared expert", {"ffn_shexp", NULL}, 0, false, false, false},
    {"shared expert gate", {"shared_expert_gate_sigmoid", NULL}, 0, false, false, false},
    {"FFN output", {"ffn_out", NULL}, 0, false, false, false},
    {"layer output", {"l_out", NULL}, 0, false, false, false},
    {"final norm", {"result_norm", NULL}, 0, false, false, false},
    {"logits", {"result_output", NULL}, 0, false, false, false},
};

/* does a dumped name ("attn_output-3") belong to base ("attn_output"), and which layer */
static bool name_matches(const char *full, const char *base, int *layer) {
    size_t n = strlen(base);
    if (strncmp(full, base, n) != 0) return false;
    if (full[n] == '\0') return *layer = -1, true;
    if (full[n] != '-') return false;
    char *end;
    long l = strtol(full + n + 1, &end, 10);
    if (*end || end == full + n + 1) return false;
    *layer = (int)l;
    return true;
}

static int routing_mismatches(const DumpTensor *a, const DumpTensor *b) {
    const int64_t k = a->ne[0], rows = a->ne[1] * a->ne[2] * a->ne[3];
    int bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        const float *x = a->data + r * k, *y = b->data + r * k;
        for (int64_t i = 0; i < k; i++) {
            bool found = false;
            for (int64_t j = 0; j < k; j++) found |= x[i] == y[j];
            if (!found) {
                bad++;
                break;
            }
        }
    }
    return bad;
}

static void compare_stage(const Stage *st, const Dump *ref, const Dump *ours, const Model *m, double tol, ParityRow *row) {
    memset(row, 0, sizeof *row);
    snprintf(row->stage, sizeof row->stage, "%s", st->label);
    row->ok = true;
    for (int ni = 0; ni < 2 && st->names[ni] && row->n_tensors == 0; ni++) {
        for (int i = 0; i < dump_count(ref); i++) {
            const DumpTensor *r = dump_get(ref, i);
            int layer;
            if (r->occurrence != st->occurrence || !name_matches(r->name, st->names[ni], &layer)) continue;
            if (st->recurrent || st->attention) {
                if (layer < 0 || layer >= m->cfg.n_layer) continue;
                if (st->recurrent != m->cfg.recurrent[layer]) continue;
            }
            const DumpTensor *o = dump_find(ours, r->name, r->occurrence, r->ubatch);
            /* list each distinct tensor name once, as far as it fits */
            const size_t used = strlen(row->tensors), need = strlen(r->name) + (used ? 2 : 0);
            if (!strstr(row->tensors, r->name) && used + need < sizeof row->tensors) {
                if (used) memcpy(row->tensors + used, ", ", 2);
                memcpy(row->tensors + used + need - strlen(r->name), r->name, strlen(r->name) + 1);
            }
            row->n_tensors++;
            const int64_t n = r->ne[0] * r->ne[1] * r->ne[2] * r->ne[3];
            if (!o || o->ne[0] * o->ne[1] * o->ne[2] * o->ne[3] != n) {
                row->ok = false;
                row->max_abs = row->max_rel = INFINITY;
                continue;
            }
            if (st->routing) {
                int bad = routing_mismatches(r, o);
                row->mismatches += bad;
                row->ok &= bad == 0;
                continue;
            }
            double ma, mr;
            tensor_compare(r->data, o->data, n, &ma, &mr);
            if (ma > row->max_abs || ma != ma) row->max_abs = ma;
            if (mr > row->max_rel || mr != mr) row->max_rel = mr;
            row->ok &= mr <= tol;
        }
    }
}

int parity_run(const char *model_path, const char *ref_dir, const ForwardOptions *opts, double tol, ParityRow *rows,
               Err *err) {
    DumpInfo info;
    Dump *ref = dump_load(ref_dir, &info, err);
    if (!ref) return -1;
    int n_rows = -1;
    Model *m = NULL;
    SeqState *st = NULL;
    Forward *fw = NULL;
    Dump *ours = NULL;
    float *logits = NULL;
    if (!info.tokens) {
        err_set(err, "'%s' does not list its tokens", ref_dir);
        goto done;
    }
    const bool decode = strcmp(info.mode, "decode") == 0;
    if (!decode && info.mode[0] && strcmp(info.mode, "prefill") != 0) {
        err_set(err, "'%s': mode '%s' (prefill or decode expected)", ref_dir, info.mode);
        goto done;
    }
    m = model_load(model_path, err);
    if (!m) goto done;
    const int T = info.n_tokens, step = decode ? 1 : T;
    ForwardOptions fo = *opts;
    fo.max_batch = step;
    fo.max_ctx = T;
    fw = forward_new(m, &fo, err);
    st = fw ? seqstate_new(m, forward_backend(fw), T, 0, 0, err) : NULL;
    ours = st ? dump_new(NULL, ~0ull, err) : NULL;
    logits = malloc(sizeof(float) * (size_t)step * (size_t)m->cfg.n_vocab);
    if (!ours || !logits) goto done;
    forward_set_dump(fw, ours);
    for (int p = 0; p < T; p += step)
        if (forward_run(fw, st, info.tokens + p, step, logits, step, err)) goto done;
    n_rows = 0;
    for (size_t i = 0; i < sizeof stages / sizeof stages[0] && n_rows < PARITY_MAX_ROWS; i++) {
        compare_stage(&stages[i], ref, ours, m, tol, &rows[n_rows]);
        if (rows[n_rows].n_tensors) n_rows++;
    }
done:
    free(info.tokens);
    free(logits);
    dump_free(ours);
    dump_free(ref);
    seqstate_free(st);
    forward_free(fw);
    model_free(m);
    return n_rows;
}
