#!/usr/bin/env python3
"""gen_unicode.py — writes src/tokenizer/unicode_data.c, the code point class table of the tokenizer.

Source: UnicodeData.txt of Debian's `unicode-data` package (/usr/share/unicode/UnicodeData.txt). Only this
script needs that package; the build uses the generated, committed C file.

What the table holds, and why (the pre-tokenizers must classify code points exactly as llama.cpp does,
because the reference token vectors come from it):
  * the general category of every code point, folded into the eight classes llama.cpp distinguishes:
    L* letter, M* mark, N* number, P* punctuation, S* symbol, Z* separator, Cc/Cf/Co/Cs control, and
    "undefined" for unassigned code points (Cn, absent from UnicodeData.txt). Ranges given as
    "<..., First>" / "<..., Last>" pairs cover every code point in between.
  * a separate whitespace bit for exactly the White_Space code points of PropList.txt (U+0009..000D,
    U+0020, U+0085, U+00A0, U+1680, U+2000..200A, U+2028, U+2029, U+202F, U+205F, U+3000). \\s in the
    pre-tokenizer regexes means this bit, independent of the category (U+0009 is a control *and* space).
The output is a run-length list: {first code point, flags} for each maximal run of equal flags.

Unicode version: llama.cpp v0.4.0 (the oracle) classifies with Unicode 15.1 data; Debian bookworm ships
15.0. The 627 code points Unicode 15.1 added are listed below (UNICODE_15_1_ADDITIONS, from the 15.1
release: CJK Unified Ideographs Extension I and five ideographic description characters) and are applied
when the input is 15.0, so the table equals the oracle's. With 15.1 or later input nothing is patched.

The case-insensitive contractions ('S, 'T, 'RE, ...) lower-case one code point with the UnicodeData
simple mapping. The script checks that no code point other than ASCII A-Z lower-cases to one of the
letters involved, so the tokenizer can use an ASCII-only tolower without changing behaviour.

usage: /usr/bin/python3 tools/gen_unicode.py [--unicode-data PATH] [--out src/tokenizer/unicode_data.c]
"""
import argparse
import os
import sys

MAX_CODEPOINTS = 0x110000

# flag bits: keep in sync with src/tokenizer/unicode.h
UNDEFINED = 0x0001
NUMBER = 0x0002
LETTER = 0x0004
SEPARATOR = 0x0008
MARK = 0x0010
PUNCTUATION = 0x0020
SYMBOL = 0x0040
CONTROL = 0x0080
WHITESPACE = 0x0100

CATEGORY_FLAG = {
    "Cn": UNDEFINED,
    "Cc": CONTROL, "Cf": CONTROL, "Co": CONTROL, "Cs": CONTROL,
    "Ll": LETTER, "Lm": LETTER, "Lo": LETTER, "Lt": LETTER, "Lu": LETTER,
    "Mc": MARK, "Me": MARK, "Mn": MARK,
    "Nd": NUMBER, "Nl": NUMBER, "No": NUMBER,
    "Pc": PUNCTUATION, "Pd": PUNCTUATION, "Pe": PUNCTUATION, "Pf": PUNCTUATION,
    "Pi": PUNCTUATION, "Po": PUNCTUATION, "Ps": PUNCTUATION,
    "Sc": SYMBOL, "Sk": SYMBOL, "Sm": SYMBOL, "So": SYMBOL,
    "Zl": SEPARATOR, "Zp": SEPARATOR, "Zs": SEPARATOR,
}

WHITESPACE_SET = list(range(0x0009, 0x000D + 1)) + list(range(0x2000, 0x200A + 1)) + \
    [0x0020, 0x0085, 0x00A0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000]

CONTRACTION_LETTERS = set("strevmld")

# (first, last, category) of every code point assigned in Unicode 15.1 (627 in all).
UNICODE_15_1_ADDITIONS = [
    (0x2FFC, 0x2FFF, "So"),    # ideographic description characters
    (0x31EF, 0x31EF, "So"),    # CJK stroke HXG
    (0x2EBF0, 0x2EE5D, "Lo"),  # CJK Unified Ideographs Extension I
]


def read_unicode_data(path):
    """Yields (code point, category, simple lowercase or None), expanding First/Last ranges."""
    first = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split(";")
            if len(fields) != 15:
                sys.exit("unexpected UnicodeData line: " + line)
            cp = int(fields[0], 16)
            name, cat = fields[1], fields[2]
            lower = int(fields[13], 16) if fields[13] else None
            if name.endswith(", First>"):
                first = (cp, cat)
                continue
            if name.endswith(", Last>"):
                if first is None or first[1] != cat:
                    sys.exit("unpaired range end at U+%04X" % cp)
                for c in range(first[0], cp):
                    yield c, cat, None
                first = None
            yield cp, cat, lower


def unicode_version(path):
    """Reads the version from ReadMe.txt or DerivedAge.txt next to UnicodeData.txt, if present."""
    d = os.path.dirname(path)
    for name in ("DerivedAge.txt", "ReadMe.txt"):
        p = os.path.join(d, name)
        if os.path.exists(p):
            with open(p, encoding="utf-8", errors="replace") as f:
                head = f.readline().strip()
            if name == "DerivedAge.txt" and head.startswith("# DerivedAge-"):
                return head[len("# DerivedAge-"):].replace(".txt", "")
    return "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--unicode-data", default="/usr/share/unicode/UnicodeData.txt")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "src", "tokenizer", "unicode_data.c"))
    args = ap.parse_args()

    flags = [UNDEFINED] * MAX_CODEPOINTS
    for cp, cat, lower in read_unicode_data(args.unicode_data):
        if cat not in CATEGORY_FLAG:
            sys.exit("unknown category %s at U+%04X" % (cat, cp))
        flags[cp] = CATEGORY_FLAG[cat]
        if lower is not None and lower < 0x80 and chr(lower) in CONTRACTION_LETTERS and not (0x41 <= cp <= 0x5A):
            sys.exit("U+%04X lower-cases to '%s': the ASCII-only tolower of the tokenizer would be wrong" % (cp, chr(lower)))
    version = unicode_version(args.unicode_data)
    if version.startswith("15.0"):
        n = 0
        for first, last, cat in UNICODE_15_1_ADDITIONS:
            for cp in range(first, last + 1):
                if flags[cp] != UNDEFINED:
                    sys.exit("U+%04X is already assigned; the 15.1 patch does not apply" % cp)
                flags[cp] = CATEGORY_FLAG[cat]
                n += 1
        assert n == 627
        version = "15.1.0 (15.0.0 data + the 15.1 additions)"
    for cp in WHITESPACE_SET:
        flags[cp] |= WHITESPACE

    runs = [(0, flags[0])]
    for cp in range(1, MAX_CODEPOINTS):
        if flags[cp] != runs[-1][1]:
            runs.append((cp, flags[cp]))

    out = []
    out.append("/* unicode_data.c — code point classes for the pre-tokenizers. GENERATED by tools/gen_unicode.py from")
    out.append(" * UnicodeData.txt of Debian's unicode-data package; do not edit, regenerate.")
    out.append(" * Unicode %s." % version)
    out.append(" *")
    out.append(" * Each entry {first, flags} starts a run of code points with equal flags that lasts until the next")
    out.append(" * entry; the last run ends at U+10FFFF. Flag bits are the UNICODE_* constants of unicode.h. */")
    out.append('#include "tokenizer/unicode.h"')
    out.append("")
    out.append('const char unicode_data_version[] = "%s";' % version)
    out.append("")
    out.append("const UnicodeRun unicode_runs[] = {")
    line = "   "
    for i, (cp, fl) in enumerate(runs):
        item = " {0x%05X, 0x%03X}," % (cp, fl)
        if len(line) + len(item) > 110:
            out.append(line)
            line = "   "
        line += item
    out.append(line)
    out.append("};")
    out.append("const int unicode_n_runs = (int)(sizeof unicode_runs / sizeof unicode_runs[0]);")
    out.append("")
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(out))
    print("wrote %s: %d runs, Unicode %s" % (args.out, len(runs), version))


if __name__ == "__main__":
    main()
