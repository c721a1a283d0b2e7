"""corpus.py — the training text, from Debian packages, split into train and held-out parts.

Sources (installed by tools/train/setup.sh):
  bible-kjv-text  the King James Bible (text in the public domain; read with the `bible` program of
                  bible-kjv, GPL-2+). One line per verse, verse numbers dropped, a "Book N" line per chapter.
  fortunes, fortunes-min   fortune(6)'s English quotation files (BSD licence; the offensive set is a
                  separate package, not used). The art / ascii-art files are skipped.
Every 20th chapter and every 20th fortune go to the held-out part (the same distribution as training).

usage: corpus.py OUT_DIR   → OUT_DIR/train.txt, OUT_DIR/heldout.txt"""
import os
import re
import subprocess
import sys

FORTUNE_DIR = "/usr/share/games/fortunes"
SKIP_FORTUNES = {"art", "ascii-art"}
HOLD_EVERY = 20


def bible_chapters():
    text = subprocess.run(["bible", "-l100000", "Genesis1:1-Revelation22:21"], check=True,
                          capture_output=True, text=True).stdout
    chapters, cur = [], None
    for line in text.splitlines():
        if not line.strip():
            continue
        m = re.match(r"^\s+\d+ (.*)$", line)
        if m:
            cur.append(m.group(1).strip())
        else:
            cur = [line.strip()]
            chapters.append(cur)
    return ["\n".join(c) + "\n" for c in chapters]


def fortunes():
    out = []
    for name in sorted(os.listdir(FORTUNE_DIR)):
        path = os.path.join(FORTUNE_DIR, name)
        if "." in name or name in SKIP_FORTUNES or os.path.islink(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for item in f.read().split("\n%\n"):
                item = item.strip("\n%")
                lines = [l.rstrip().replace("\t", "    ") for l in item.splitlines()]
                if lines and sum(len(l) for l in lines) > 20:
                    out.append("\n".join(lines) + "\n")
    return out


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    train, held = [], []
    for docs in (bible_chapters(), fortunes()):
        for i, d in enumerate(docs):
            (held if i % HOLD_EVERY == HOLD_EVERY - 1 else train).append(d)
    # documents are separated by a blank line; the order interleaves the sources so any prefix mixes them
    for name, docs in (("train.txt", train), ("heldout.txt", held)):
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            f.write("\n".join(docs))
        print(f"{name}: {len(docs)} documents, {sum(len(d) for d in docs)} characters")


if __name__ == "__main__":
    main()
