"""mtp_acceptance.py HF_DIR HELDOUT_IDS.json [--prompts K] [--gen N] — how often the MTP head's first draft is
what the main model then says, measured in PyTorch two ways:
  teacher-forced: over the held-out text, MTP argmax at position t (fed the true token t+1) vs the main
                  model's argmax at t+1;
  greedy:         along the model's own greedy continuation of K held-out prompts (what greedy speculative
                  decoding with one draft accepts): the draft for token t+2 made after token t+1 was emitted,
                  against the token the main model emits there."""
import argparse
import json

import numpy as np
import torch

import hf_io


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hf_dir")
    ap.add_argument("ids")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--seq", type=int, default=256)
    a = ap.parse_args()
    torch.set_num_threads(1)
    m, _ = hf_io.load_checkpoint(a.hf_dir)
    ids = np.array(json.load(open(a.ids)), dtype=np.int64)
    agree = total = 0
    with torch.no_grad():
        for s in range(0, len(ids) - a.seq - 1, a.seq):
            x = torch.from_numpy(ids[s:s + a.seq])[None]
            lg, mt = m(x)
            agree += int((mt[0].argmax(-1) == lg[0, 1:].argmax(-1)).sum())
            total += a.seq - 1
        tf = agree / total
        g_agree = g_total = 0
        step = (len(ids) - a.prompt_len - 1) // a.prompts
        for k in range(a.prompts):
            seq = ids[k * step:k * step + a.prompt_len].tolist()
            for _ in range(a.gen):
                lg, _ = m(torch.tensor([seq]), with_mtp=False)
                seq.append(int(lg[0, -1].argmax()))
            x = torch.tensor([seq])
            lg, mt = m(x)
            # drafts made inside the generated part: position t ≥ prompt_len − 1, token t+1 emitted by the model
            p0 = a.prompt_len - 1
            d = mt[0, p0:-1].argmax(-1)          # draft for t+2 from position t
            tgt = torch.tensor(seq[p0 + 2:])      # what the main model emitted at t+2
            g_agree += int((d == tgt).sum())
            g_total += len(tgt)
    print(json.dumps({"teacher_forced_agreement": tf, "teacher_forced_positions": total,
                      "greedy_first_draft_acceptance": g_agree / g_total, "greedy_positions": g_total}))


if __name__ == "__main__":
    main()
