"""vocab.py — a small Qwen vocabulary: the most frequent tokens of the corpus under the full Qwen BPE,
closed under their merges, plus all 256 byte tokens (any text stays encodable) and three control tokens.

Token ids keep the Qwen order (ordinary tokens sorted by their Qwen id, control tokens last, as
shared/tools/mkmodel.py's --small-vocab does); the merges are the Qwen merges, in Qwen rank order, whose
two parts and result all survive. Writes, into OUT_DIR:
  tokenizer.json, tokenizer_config.json   the Hugging Face files `deltallm convert` reads
  vocab.gguf                              the same vocabulary as a vocabulary-only GGUF, so the corpus is
                                          tokenized by deltallm's own tokenizer (tools/train/tokenize.sh)

usage: vocab.py SOURCE_VOCAB.gguf TRAIN.txt OUT_DIR [--size N]"""
import argparse
import collections
import json
import os

import gguf_io

QWEN35_PRETOKENIZE = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+"
                      r"|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK = ["<think>", "</think>"]  # --think: Qwen's reasoning markers, added tokens that are not special (type 4)


def bytes_to_unicode():
    """GPT-2's byte → printable code point map (byte-level BPE token spelling)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class Bpe:
    def __init__(self, merges):
        self.rank = {tuple(m.split(" ", 1)): i for i, m in enumerate(merges)}
        self.cache = {}

    def word(self, w):
        if w in self.cache:
            return self.cache[w]
        parts = list(w)
        while len(parts) > 1:
            best, bi = None, -1
            for i in range(len(parts) - 1):
                r = self.rank.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            parts[bi:bi + 2] = [parts[bi] + parts[bi + 1]]
        self.cache[w] = parts
        return parts


def tokenizer_json(vocab, merges, added, pattern):
    """A Hugging Face tokenizer.json: byte-level BPE with the given vocab (token → id), merges ("a b"), added
    tokens ({id, content, special}) and Split regex (also used by gguf_to_hf.py)."""
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [dict(a, single_word=False, lstrip=False, rstrip=False, normalized=False) for a in added],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [m.split(" ", 1) for m in merges]},
    }


def word_counts(text):
    import regex  # python3-regex; only the vocabulary selection needs it (gguf_to_hf.py imports this file too)

    b2u = bytes_to_unicode()
    counts = collections.Counter(regex.findall(QWEN35_PRETOKENIZE, text))
    return {"".join(b2u[b] for b in w.encode("utf-8")): c for w, c in counts.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("train")
    ap.add_argument("out")
    ap.add_argument("--size", type=int, default=4096, help="vocabulary size, control tokens included")
    ap.add_argument("--chat-template", help="a Jinja file stored as tokenizer_config.json's chat_template")
    ap.add_argument("--think", action="store_true", help="add <think> and </think> (the chat model's template needs them)")
    a = ap.parse_args()

    src = gguf_io.Gguf(a.source)
    tokens, types, merges = src.kv["tokenizer.ggml.tokens"], src.kv["tokenizer.ggml.token_type"], src.kv["tokenizer.ggml.merges"]
    tok_id = {t: i for i, t in enumerate(tokens)}
    parent = {}
    for m in merges:
        l, r = m.split(" ", 1)
        parent.setdefault(l + r, (l, r))

    text = open(a.train, encoding="utf-8").read()
    for t in CONTROL + THINK:  # control text is not BPE'd: keep its pieces out of the counts
        text = text.replace(t, " ")
    words = word_counts(text)
    bpe = Bpe(merges)
    freq = collections.Counter()
    for w, c in words.items():
        for t in bpe.word(w):
            freq[t] += c

    keep = set(bytes_to_unicode().values())
    extra = THINK if a.think else []
    n_ord = a.size - len(CONTROL) - len(extra)

    def add(t):
        if t in keep:
            return 0
        need = [t]
        if t in parent:
            for p in parent[t]:
                if p not in keep:
                    need.append(p)
        # a token is only reachable through its merge: its parts (recursively) must be kept too
        added = 0
        stack = [t]
        closure = []
        while stack:
            x = stack.pop()
            if x in keep or x in closure:
                continue
            closure.append(x)
            if x in parent:
                stack.extend(parent[x])
        if len(keep) + len(closure) > n_ord:
            return -1
        keep.update(closure)
        return len(closure)

    for t, _ in freq.most_common():
        if t not in tok_id:
            continue
        if add(t) < 0 or len(keep) >= n_ord:
            break
    ordinary = sorted(keep, key=lambda t: tok_id[t])
    kept_merges = [m for m in merges if all(x in keep for x in (*m.split(" ", 1), m.replace(" ", "", 1)))]
    vocab = ordinary + CONTROL + extra
    ids = {t: i for i, t in enumerate(vocab)}
    eos = ids["<|endoftext|>"]
    os.makedirs(a.out, exist_ok=True)

    added = [{"id": ids[t], "content": t, "special": t in CONTROL} for t in CONTROL + extra]
    tj = tokenizer_json({t: ids[t] for t in ordinary}, kept_merges, added, QWEN35_PRETOKENIZE)
    with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=1)
    tc = {"add_bos_token": False, "add_prefix_space": False, "bos_token": None, "eos_token": "<|endoftext|>",
          "pad_token": "<|endoftext|>", "unk_token": None, "model_max_length": 4096,
          "tokenizer_class": "Qwen2Tokenizer", "clean_up_tokenization_spaces": False,
          "added_tokens_decoder": {str(ids[t]): {"content": t, "special": True, "lstrip": False, "rstrip": False,
                                                 "normalized": False, "single_word": False} for t in CONTROL}}
    if a.chat_template:
        tc["chat_template"] = open(a.chat_template, encoding="utf-8").read()
    for t in extra:
        tc["added_tokens_decoder"][str(ids[t])] = {"content": t, "special": False, "lstrip": False, "rstrip": False,
                                                   "normalized": False, "single_word": False}
    with open(os.path.join(a.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tc, f, ensure_ascii=False, indent=1)

    T = gguf_io
    gguf_io.write_kv_only(os.path.join(a.out, "vocab.gguf"), [
        ("tokenizer.ggml.model", T.T_STR, "gpt2"),
        ("tokenizer.ggml.pre", T.T_STR, "qwen35"),
        ("tokenizer.ggml.tokens", T.T_ARR, (T.T_STR, vocab)),
        ("tokenizer.ggml.token_type", T.T_ARR, (T.T_I32, [1] * len(ordinary) + [3] * len(CONTROL) + [4] * len(extra))),
        ("tokenizer.ggml.merges", T.T_ARR, (T.T_STR, kept_merges)),
        ("tokenizer.ggml.eos_token_id", T.T_U32, eos),
        ("tokenizer.ggml.padding_token_id", T.T_U32, eos),
        ("tokenizer.ggml.add_bos_token", T.T_BOOL, False),
    ])
    covered = sum(c for t, c in freq.items() if t in keep)
    print(f"vocab: {len(vocab)} tokens ({len(ordinary)} ordinary, {len(CONTROL)} control), {len(kept_merges)} merges; "
          f"{covered / sum(freq.values()):.1%} of the full-vocabulary tokens of the corpus kept")


if __name__ == "__main__":
    main()
