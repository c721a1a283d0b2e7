"""llconvert.py HF_DIR OUT.gguf [--outtype T] — the convert oracle: llama.cpp v0.4.0's own convert_hf_to_gguf.py
(from the source bundled with the npm package, ../shared/tools/build-llref.sh fetch-prebuilt puts it in
$NLC_DIR/llama-src) run on a checkpoint, with two stand-ins because Debian has no `transformers`:
  - AutoConfig raises, so the converter reads config.json itself (its own fallback);
  - AutoTokenizer is a small reader of tokenizer.json (vocab, added tokens), enough for get_vocab_base;
  - get_vocab_base_pre returns the pre-tokenizer named by the Split regex (the converter would hash a
    tokenization, and a restricted vocabulary has no registered hash).
Everything else — tensor transforms, names, types, metadata, the GGUF writer — is llama.cpp's code.
Compare with deltallm convert: tools/oracle/tensor_diff.py. Needs Debian's python3-torch. Not in make test."""
import json
import os
import sys
import types

SRC = os.environ.get("LLAMA_SRC", os.path.expanduser(os.environ.get("NLC_DIR", "~/.cache/llref") + "/llama-src"))
sys.path[:0] = [SRC, os.path.join(SRC, "gguf-py")]


class _Added:
    def __init__(self, d):
        self.content, self.special, self.normalized = d["content"], d.get("special", False), d.get("normalized", False)


class _Tok:
    def __init__(self, path):
        tj = json.load(open(os.path.join(path, "tokenizer.json"), encoding="utf-8"))
        self.vocab = dict(tj["model"]["vocab"])
        self._added = {a["id"]: _Added(a) for a in tj.get("added_tokens", [])}
        for i, a in self._added.items():
            self.vocab[a.content] = i
        self.added_tokens_decoder = self._added

    def get_added_vocab(self):
        return {a.content: i for i, a in self._added.items()}

    def get_vocab(self):
        return self.vocab

    def encode(self, text, add_special_tokens=False):  # only used on added tokens here
        return [self.vocab[text]] if text in self.vocab else []

    def decode(self, ids):
        rev = {i: t for t, i in self.vocab.items()}
        return "".join(rev[i] for i in ids)


class _AutoConfig:
    @staticmethod
    def from_pretrained(*a, **k):
        raise OSError("stand-in: read config.json")


class _AutoTokenizer:
    @staticmethod
    def from_pretrained(path, **k):
        return _Tok(str(path))


tf = types.ModuleType("transformers")
tf.AutoConfig, tf.AutoTokenizer = _AutoConfig, _AutoTokenizer
sys.modules["transformers"] = tf
try:
    import tqdm  # noqa: F401
except ImportError:  # only the progress bar
    class _Bar:
        def __init__(self, *a, **k): pass
        def update(self, *a): pass
        def close(self): pass
        def set_description(self, *a, **k): pass
        def __enter__(self): return self
        def __exit__(self, *a): pass
    sys.modules["tqdm"] = types.ModuleType("tqdm")
    sys.modules["tqdm"].tqdm = _Bar

import torch  # noqa: E402

for _n, _d in (("float8_e4m3fn", torch.int8), ("float8_e5m2", torch.int8), ("float8_e8m0fnu", torch.uint8),
               ("uint16", torch.int16), ("uint32", torch.int32), ("uint64", torch.int64)):
    if not hasattr(torch, _n):  # Debian's torch 1.13 predates these dtypes; the converter only names them
        setattr(torch, _n, _d)

import conversion.base as base  # noqa: E402


def _pre(self, tokenizer):
    tj = json.load(open(os.path.join(self.dir_model, "tokenizer.json"), encoding="utf-8"))
    return "qwen35" if "\\p{M}" in json.dumps(tj.get("pre_tokenizer")) else "qwen2"


base.TextModel.get_vocab_base_pre = _pre
sys.argv = [os.path.join(SRC, "convert_hf_to_gguf.py"), sys.argv[1], "--outfile", sys.argv[2]] + sys.argv[3:]
import runpy  # noqa: E402

runpy.run_path(sys.argv[0], run_name="__main__")
