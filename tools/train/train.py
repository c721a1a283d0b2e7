"""train.py — trains the small qwen35 model with its MTP block on the tokenized corpus, CPU.

Loss: cross-entropy of the main head (token t+1) + MTP_WEIGHT × cross-entropy of the MTP head (token t+2
from position t, given the true token t+1), gradients of both reaching the trunk. AdamW, linear warm-up
then cosine decay to 10%, gradient clipping at 1. The schedule runs on progress = max(step / --steps,
elapsed / --minutes), so the run ends inside its time budget on a busy machine and still decays fully.
Random windows of --seq + 1 tokens; held-out loss on fixed windows every --eval-every steps.
Writes OUT/ (config.json, model.safetensors, tokenizer files: the Hugging Face layout `deltallm convert`
reads) every --save-every steps and at the end, and OUT/training_log.json.

usage: train.py DATA_DIR TOKENIZER_DIR OUT_DIR [--minutes 45] [--steps 1200] ..."""
import argparse
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

import hf_io
import model as qm


def windows(ids, n, seq, rng):
    starts = rng.integers(0, len(ids) - seq - 1, n)
    return torch.from_numpy(np.stack([ids[s:s + seq + 1] for s in starts]).astype(np.int64))


def losses(m, x):
    logits, mtp = m(x[:, :-1])
    V = logits.shape[-1]
    main = F.cross_entropy(logits.reshape(-1, V), x[:, 1:].reshape(-1))
    aux = F.cross_entropy(mtp.reshape(-1, V), x[:, 2:].reshape(-1))
    return main, aux, logits, mtp


@torch.no_grad()
def evaluate(m, ids, seq, batch):
    """Mean main / MTP loss over consecutive windows of ids, and how often the MTP head's top-1 draft for
    token t+2 equals the main head's top-1 at t+1 (the first-draft agreement of greedy speculation)."""
    m.eval()
    n = (len(ids) - 1) // seq
    tot_main = tot_mtp = agree = count = count_mtp = 0.0
    for b in range(0, n, batch):
        x = torch.from_numpy(np.stack([ids[i * seq:i * seq + seq + 1] for i in range(b, min(n, b + batch))]).astype(np.int64))
        main, aux, logits, mtp = losses(m, x)
        k = x.shape[0] * seq
        tot_main += main.item() * k
        count += k
        km = x.shape[0] * (seq - 1)
        tot_mtp += aux.item() * km
        count_mtp += km
        agree += (mtp.argmax(-1) == logits[:, 1:].argmax(-1)).sum().item()
    m.train()
    return tot_main / count, tot_mtp / count_mtp, agree / count_mtp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("tokenizer")
    ap.add_argument("out")
    ap.add_argument("--minutes", type=float, default=45.0)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--save-every", type=int, default=200)
    ap.add_argument("--eval-tokens", type=int, default=16384)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--config", default=None, help="JSON overrides of model.DEFAULT_CONFIG")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    load = lambda name: np.array(json.load(open(os.path.join(a.data, name))), dtype=np.int32)
    train_ids, held_ids = load("train.ids.json"), load("heldout.ids.json")
    config = dict(qm.DEFAULT_CONFIG)
    if a.config:
        config.update(json.loads(a.config))
    m = qm.Qwen35(config)
    n_params = sum(p.numel() for p in m.parameters())
    decay = [p for n, p in m.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in m.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))
    log = {"args": vars(a), "params": n_params, "train_tokens": len(train_ids), "heldout_tokens": len(held_ids),
           "curve": [], "evals": []}
    print(f"model: {n_params} parameters; corpus: {len(train_ids)} train / {len(held_ids)} held-out tokens", flush=True)
    eval_ids = held_ids[:a.eval_tokens + 1]
    t0 = time.time()
    step, acc = 0, [0.0, 0.0, 0]

    def save(final=False):
        hf_io.save_checkpoint(a.out, m, config, a.tokenizer)
        log["wall_s"] = time.time() - t0
        with open(os.path.join(a.out, "training_log.json"), "w") as f:
            json.dump(log, f, indent=1)

    while True:
        progress = max(step / a.steps, (time.time() - t0) / (60 * a.minutes))
        if progress >= 1.0:
            break
        lr = a.lr * (min(1.0, (step + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))))
        for g in opt.param_groups:
            g["lr"] = lr
        x = windows(train_ids, a.batch, a.seq, rng)
        main_l, aux_l, _, _ = losses(m, x)
        opt.zero_grad(set_to_none=True)
        (main_l + a.mtp_weight * aux_l).backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        step += 1
        acc[0] += main_l.item()
        acc[1] += aux_l.item()
        acc[2] += 1
        if step % 25 == 0:
            el = time.time() - t0
            row = {"step": step, "tokens": step * a.batch * a.seq, "loss": acc[0] / acc[2], "mtp_loss": acc[1] / acc[2],
                   "lr": lr, "elapsed_s": round(el, 1), "s_per_step": round(el / step, 3),
                   "load1": round(os.getloadavg()[0], 2)}
            log["curve"].append(row)
            print(json.dumps(row), flush=True)
            acc = [0.0, 0.0, 0]
        if step % a.eval_every == 0:
            ev = evaluate(m, eval_ids, a.seq, 16)
            log["evals"].append({"step": step, "heldout_loss": ev[0], "heldout_mtp_loss": ev[1], "mtp_agreement": ev[2]})
            print(json.dumps(log["evals"][-1]), flush=True)
        if step % a.save_every == 0:
            save()
    log["steps"] = step
    log["train_wall_s"] = time.time() - t0
    ev = evaluate(m, held_ids, a.seq, 16)
    log["final"] = {"heldout_loss": ev[0], "heldout_ppl": math.exp(ev[0]), "heldout_mtp_loss": ev[1],
                    "mtp_agreement": ev[2]}
    print(json.dumps(log["final"]), flush=True)
    save(final=True)


if __name__ == "__main__":
    main()
