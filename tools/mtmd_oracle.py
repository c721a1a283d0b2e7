#!/usr/bin/env python3
"""mtmd_oracle.py - record llama.cpp v0.4.0 mtmd's outputs for the vision tests (tests/test_vision_oracle.c).

  tools/mtmd_oracle.py [--out tests/data/vision_oracle] [--work DIR] [--harness ~/.cache/mtmd/mtmd_ref]

1. `DELTALLM_ORACLE_DIR=WORK build/tests vision/oracle_inputs` writes the synthetic inputs (a tiny qwen35 with
   Qwen3.5's vision tokens, two tiny projectors (F32 / F16 weights), two PNGs) exactly as the test rebuilds them.
2. Our harness tools/mtmd_ref.c (built by tools/build-mtmd.sh against llama.cpp's libmtmd) runs each
   projector x image: the pre-processed pixels mtmd fed its graph, and its embeddings; tools/vision_ref.py
   gives the float64 reference's embeddings on those pixels (.ref.f32).
3. The image prompt's logits (F32 projector, the up-scaled image) for every text row after the image, on a
   sample of the vocabulary (every 97th id and each row's top 8), with each row's argmax and std.
4. Prints mtmd's own distance to the float64 reference (tools/vision_ref.py) on its own pixels: the yardstick
   the test's limits are set against.
"""
import argparse
import json
import os
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
IMAGES = ["up", "down"]
MMPROJ = ["f32", "f16"]
PROMPT = "<|im_start|>user\n<__media__>Describe the picture.<|im_end|>\n<|im_start|>assistant\n"


def run(cmd, **kw):
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/data/vision_oracle"))
    ap.add_argument("--work", default="/tmp/mtmd-oracle")
    ap.add_argument("--harness", default=os.path.expanduser("~/.cache/mtmd/mtmd_ref"))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    run([os.path.join(ROOT, "build/tests"), "vision/oracle_inputs"], cwd=ROOT,
        env=dict(os.environ, DELTALLM_ORACLE_DIR=a.work))
    model = os.path.join(a.work, "model.gguf")
    report = []
    for mp in MMPROJ:
        mmproj = os.path.join(a.work, "mmproj-%s.gguf" % mp)
        for im in IMAGES:
            base = os.path.join(a.out, "%s-%s" % (im, mp))
            js = os.path.join(a.work, "%s-%s.json" % (im, mp))
            run([a.harness, "-m", model, "--mmproj", mmproj, "--image", os.path.join(a.work, im + ".png"), "-t", "2",
                 "--pix-out", base + ".pix.f32", "--embd-out", base + ".embd.f32", "--json", js])
            info = json.load(open(js))
            nx, ny = info["pix_ne"][0], info["pix_ne"][1]
            ref = base + ".ref.f32"  # the float64 reference on mtmd's pixels (stored as float32)
            run(["/usr/bin/python3", os.path.join(HERE, "vision_ref.py"), mmproj, base + ".pix.f32", str(nx), str(ny), ref])
            e = np.fromfile(base + ".embd.f32", np.float32).astype(np.float64)
            r = np.fromfile(ref, np.float32).astype(np.float64)
            report.append("%s %s %dx%d -> %d tokens: mtmd vs float64 reference max|d| = %.3g*std (std %.3g)"
                          % (im, mp, nx, ny, info["n_img_tokens"], np.abs(e - r).max() / r.std(), r.std()))
    # the image prompt's logits
    lg = os.path.join(a.work, "prompt.f32")
    js = os.path.join(a.work, "prompt.json")
    run([a.harness, "-m", model, "--mmproj", os.path.join(a.work, "mmproj-f32.gguf"), "--image",
         os.path.join(a.work, "up.png"), "-t", "2", "-p", PROMPT, "--logits-out", lg, "--json", js])
    info = json.load(open(js))
    n1, n2 = info["text_chunks"][0], info["text_chunks"][1]
    toks, nv = info["text_tokens"], info["n_vocab"]
    L = np.fromfile(lg, np.float32).reshape(-1, nv)[n1:n1 + n2]
    sample = set(range(0, nv, 97))
    for row in L:
        sample.update(int(i) for i in np.argsort(-row)[:8])
    sample = np.array(sorted(sample), np.int32)
    with open(os.path.join(a.out, "prompt-f32.bin"), "wb") as f:
        f.write(b"DLVO" + struct.pack("<4i", n1, n2, len(sample), nv))
        f.write(np.array(toks[:n1 + n2], np.int32).tobytes())
        f.write(sample.tobytes())
        f.write(L.argmax(axis=1).astype(np.int32).tobytes())
        f.write(L.std(axis=1).astype(np.float32).tobytes())
        f.write(L[:, sample].astype(np.float32).tobytes())
    report.append("prompt: %d text tokens before the image, %d after; %d sampled ids of %d; argmax %s"
                  % (n1, n2, len(sample), nv, list(L.argmax(axis=1))))
    print("\n".join(report))


if __name__ == "__main__":
    main()
