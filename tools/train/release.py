"""release.py TRAIN_DIR OUT_DIR — the released checkpoint: matrices (≥ 2-D) in F16, vectors (norms, A_log,
dt_bias) kept in F32, as Qwen keeps its SSM parameters in F32. The F16 matrices are what `deltallm convert`
copies unchanged, and the F32 norms let the converter's +1 and −exp(A_log) run in F32, so the PyTorch model
loaded from this directory computes with exactly the weights the GGUF holds (export_logits.py)."""
import json
import os
import shutil
import sys

import hf_io


def main():
    src, dst = sys.argv[1], sys.argv[2]
    os.makedirs(dst, exist_ok=True)
    sd = hf_io.load_safetensors(os.path.join(src, "model.safetensors"))
    out = {k: (v.half() if v.ndim >= 2 else v.float()) for k, v in sd.items()}
    hf_io.save_safetensors(os.path.join(dst, "model.safetensors"), out)
    cfg = json.load(open(os.path.join(src, "config.json")))
    cfg["torch_dtype"] = "float16"
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json", "training_log.json"):
        if os.path.exists(os.path.join(src, name)):
            shutil.copy(os.path.join(src, name), os.path.join(dst, name))
    print(f"release: {len(out)} tensors → {dst}")


if __name__ == "__main__":
    main()
