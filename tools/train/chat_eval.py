"""chat_eval.py — the embedded chat model's end-of-turn check and sample exchanges (docs/TRAINING.md).

Starts `deltallm serve` on MODEL (one slot, one thread), asks each of the 100 held-out questions
(heldout_questions.json from chat_corpus.py: questions never trained on) once with the default sampling
(the server's: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05; seed = the question's index) and once greedy,
each with max_tokens 200, and counts the replies that end by themselves (finish_reason "stop": the model wrote
<|im_end|>) within those 200 tokens. Prints a JSON summary and the first N exchanges as a Markdown list.

usage: chat_eval.py DELTALLM_BIN MODEL.gguf heldout_questions.json [--samples 10]"""
import argparse
import json
import re
import subprocess
import sys
import time
import urllib.request


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("model")
    ap.add_argument("questions")
    ap.add_argument("--samples", type=int, default=10)
    a = ap.parse_args()
    qs = json.load(open(a.questions))
    proc = subprocess.Popen([a.bin, "serve", "-m", a.model, "--port", "0", "-t", "1", "-np", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        base = None
        t0 = time.time()
        while base is None and time.time() - t0 < 60:
            line = proc.stdout.readline()
            m = re.search(r"listening on (http://[^ ]*:\d+)", line)
            if m:
                base = m.group(1).replace("0.0.0.0", "127.0.0.1")
        if base is None:
            sys.exit("the server did not start")
        out = {"questions": len(qs)}
        samples = []
        for mode, extra in (("sampled", {}), ("greedy", {"temperature": 0})):
            ended, tokens = 0, []
            for i, q in enumerate(qs):
                r = post(base, "/v1/chat/completions", dict({"messages": [{"role": "user", "content": q["question"]}],
                                                              "max_tokens": 200, "seed": i}, **extra))
                c = r["choices"][0]
                ended += c["finish_reason"] == "stop"
                tokens.append(r["usage"]["completion_tokens"])
                if mode == "sampled" and len(samples) < a.samples:
                    samples.append((q, c["message"]["content"], c["finish_reason"], r["usage"]["completion_tokens"]))
            out[mode] = {"ended_within_200": ended, "mean_tokens": sum(tokens) / len(tokens)}
        print(json.dumps(out, indent=1))
        for q, reply, fin, n in samples:
            print(f"- **{q['question']}** ({q['source']}) → {reply.strip()!r} ({n} tokens, {fin}; reference: {q['answer']!r})")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
