"""export_logits.py HF_DIR TOKENS OUT_PREFIX [--recurrent] — the PyTorch model's logits for a token sequence,
to check deltallm (and its MTP head) against:
  OUT_PREFIX.main.f32   [T][V] float32: main head, position t predicts token t+1
  OUT_PREFIX.mtp.f32    [T-1][V] float32: MTP head at position t, fed the main model's final-normed hidden
                        state h_t and the embedding of the true token t+1, predicts token t+2 — the first
                        draft of speculative decoding once token t+1 is known (llama.cpp's graph_mtp: eh_proj
                        of [enorm(embed(t+1)), hnorm(h_t)], one attention block with its own causal cache over
                        the positions so far, shared_head_norm, the tied head)
  OUT_PREFIX.json       the tokens, the argmax of both heads, and how often the MTP argmax at t equals the main
                        argmax at t+1
TOKENS: a file of comma/space-separated ids (deltallm tokenize's JSON array works) or "text:SOME TEXT" with
--vocab VOCAB.gguf to tokenize it the same way deltallm does (tools/train/vocab.py's BPE).
Weights are read in their stored precision and computed in F32 (the model deltallm's --exact mode mirrors)."""
import argparse
import json

import numpy as np
import torch

import hf_io


def read_tokens(spec):
    txt = open(spec).read()
    return [int(t) for t in txt.replace("[", " ").replace("]", " ").replace(",", " ").split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hf_dir")
    ap.add_argument("tokens")
    ap.add_argument("out")
    ap.add_argument("--recurrent", action="store_true", help="the token-by-token delta rule instead of the chunked form")
    ap.add_argument("--greedy", type=int, default=0, help="also write OUT_PREFIX.greedy.txt: the prompt's ids, then N greedy ids")
    a = ap.parse_args()
    torch.set_num_threads(1)
    m, cfg = hf_io.load_checkpoint(a.hf_dir)
    ids = read_tokens(a.tokens)
    with torch.no_grad():
        main_l, mtp_l = m(torch.tensor([ids]), recurrent=a.recurrent)
    main_l = main_l[0].float().numpy()
    main_l.astype(np.float32).tofile(a.out + ".main.f32")
    info = {"tokens": ids, "n_vocab": int(main_l.shape[1]), "main_argmax": main_l.argmax(1).tolist()}
    if mtp_l is not None:
        mtp_l = mtp_l[0].float().numpy()
        mtp_l.astype(np.float32).tofile(a.out + ".mtp.f32")
        info["mtp_argmax"] = mtp_l.argmax(1).tolist()
        info["mtp_agrees_with_main_next"] = float((mtp_l.argmax(1) == main_l[1:].argmax(1)).mean())
    if a.greedy:
        seq = list(ids)
        with torch.no_grad():
            for _ in range(a.greedy):
                lg, _ = m(torch.tensor([seq]), with_mtp=False)
                seq.append(int(lg[0, -1].argmax()))
        with open(a.out + ".greedy.txt", "w") as f:
            f.write(",".join(map(str, ids)) + "\n" + ",".join(map(str, seq[len(ids):])) + "\n")
        info["greedy"] = seq[len(ids):]
    json.dump(info, open(a.out + ".json", "w"))
    print(f"export_logits: {len(ids)} tokens → {a.out}.main.f32" + (f", {a.out}.mtp.f32" if mtp_l is not None else ""))


if __name__ == "__main__":
    main()
