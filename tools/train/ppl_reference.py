"""ppl_reference.py HF_DIR IDS.json CTX [WINDOWS] — llama-perplexity's estimate computed by the PyTorch model: windows of
CTX tokens, each from an empty state, positions CTX/2 … CTX−2 scored against the next token; prints the PPL
and its error as `deltallm perplexity` does (the check of that command in tests/test_trained.c)."""
import json
import math
import sys

import torch

import hf_io


def main():
    m, _ = hf_io.load_checkpoint(sys.argv[1])
    ids = json.load(open(sys.argv[2]))
    c = int(sys.argv[3])
    n_win = min(len(ids) // c, int(sys.argv[4])) if len(sys.argv) > 4 else len(ids) // c
    nll = nll2 = 0.0
    count = 0
    with torch.no_grad():
        for w in range(n_win):
            x = torch.tensor([ids[w * c:(w + 1) * c]])
            lp = torch.log_softmax(m(x, with_mtp=False)[0][0].double(), -1)
            for j in range(c // 2, c - 1):
                v = lp[j, ids[w * c + j + 1]].item()
                nll -= v
                nll2 += v * v
                count += 1
    mean = nll / count
    var = nll2 / count - mean * mean
    ppl = math.exp(mean)
    print(json.dumps({"ctx": c, "windows": n_win, "scored": count, "ppl": ppl,
                      "ppl_err": math.sqrt(var / (count - 1)) * ppl}))


if __name__ == "__main__":
    main()
