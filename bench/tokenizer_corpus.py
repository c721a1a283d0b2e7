#!/usr/bin/env python3
"""tokenizer_corpus.py — writes the deterministic 1 MiB mixed-language text of the tokenizer benchmark.

Two kinds of material, interleaved by a fixed 64-bit LCG (no dependence on Python's random module), so
every machine benchmarks the very same bytes:
  * real paragraphs in English, German, French, Russian, Chinese, Japanese, Korean, Arabic, Hindi and
    Vietnamese, source code, numbers, URLs, emoji and chat-template markers (about a third);
  * pseudo-words assembled from syllables of those scripts, random CJK runs and random numbers, so
    that most words are rare and a tokenizer cannot get by on caching a few hundred frequent ones.

usage: python3 bench/tokenizer_corpus.py [SIZE_BYTES] > corpus.txt     (default 1048576)
"""
import sys

PARAGRAPHS = [
    "The quick brown fox jumps over the lazy dog. It's a sentence that uses every letter; we've used it for "
    "decades, and they'll keep using it. Numbers like 3.14159, 2,718 and 1e-9 appear too.\n",
    "Der schnelle braune Fuchs springt über den faulen Hund. Größere Straßen führen nach München und Köln.\n",
    "Le renard brun rapide saute par-dessus le chien paresseux. Où est la bibliothèque ? Déjà vu, naïve café.\n",
    "Съешь же ещё этих мягких французских булок, да выпей чаю. Привет, мир! Это тест токенизатора.\n",
    "我想在苹果公司工作。今天天气很好，我们去公园散步吧。人工智能正在改变世界，语言模型越来越强大。\n",
    "日本語のテキストを分かち書きせずに書きます。東京は日本の首都です。ひらがなとカタカナと漢字。\n",
    "한국어 텍스트도 포함합니다. 서울은 대한민국의 수도입니다. 안녕하세요, 만나서 반갑습니다.\n",
    "مرحبا بالعالم. هذه جملة باللغة العربية مع تشكيل: مَرْحَبًا بِكُمْ فِي الْعَالَمِ.\n",
    "नमस्ते दुनिया। यह हिंदी में एक वाक्य है। क्षत्रिय, ज्ञान और श्रम।\n",
    "Tiếng Việt có nhiều dấu: Cửa Việt, Hà Nội, Thành phố Hồ Chí Minh.\n",
    "def tokenize(text: str) -> list[int]:\n    ids = []\n    for word in text.split():\n        ids.append(vocab.get(word, 0))\n    return ids\n\n",
    "int main(int argc, char **argv) {\n\tfor (int i = 0; i < argc; i++) printf(\"%s\\n\", argv[i]);\n\treturn 0;\n}\n",
    "    {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\r\n",
    "Visit https://example.com/path?query=1&lang=en#top or mail someone@example.org before 2025-12-31 23:59:59.\n",
    "Emoji: 🦙🚀✅ 👍🏽 👨‍👩‍👧‍👦 😶‍🌫️ ❤️ — and symbols ½ ① ™ © ∑ ∞ ≠ ≤ ≥.\n",
    "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n<think>\nSimple.\n</think>\n\n4<|im_end|>\n",
    "   indented   text\twith\t\ttabs   and    runs of     spaces   \n\n\n",
    "1234567890 0987654321 3.14 -42 +7 1,000,000 $19.99 €5 ¥1000 100%\n",
]


SYLLABLES = [
    "ka ri to ne sa mo lu pe chi an der ung sch ver ein ist ment tion que ous ly ing ed re co pro st tr "
    "bl gr ph th ea ou ai ie".split(),
    "ка ро на ле ти ст ва ни ко пр ов ен ий ть ся ра до ми".split(),
    "ال مر حب كت اب سل ام عل ين ون ات ية".split(),
    "क ना मि स्ते दु नि या प्र का श त्र ज्ञा".split(),
    "kă ñá đô ươ ấy ờ ệ ữ ỉ".split(),
]
PUNCT = [" ", " ", " ", " ", ", ", ". ", "\n", "! ", "? ", " - ", ": ", "; ", "\t", "  "]


class Lcg:
    def __init__(self, seed):
        self.state = seed

    def next(self, n):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) & ((1 << 64) - 1)
        return (self.state >> 33) % n


def pseudo_text(rng):
    kind = rng.next(8)
    if kind < 5:  # a few pseudo-words from one script's syllables
        syl = SYLLABLES[kind]
        words = []
        for _ in range(1 + rng.next(12)):
            w = "".join(syl[rng.next(len(syl))] for _ in range(1 + rng.next(4)))
            if kind == 0 and rng.next(5) == 0:
                w = w.capitalize()
            words.append(w + PUNCT[rng.next(len(PUNCT))])
        return "".join(words)
    if kind == 5:  # random CJK ideographs and kana
        return "".join(chr(0x4E00 + rng.next(0x5000)) if rng.next(4) else chr(0x3041 + rng.next(0x56))
                       for _ in range(2 + rng.next(30))) + "。"
    if kind == 6:  # numbers
        return " ".join(str(rng.next(10 ** (1 + rng.next(9)))) for _ in range(1 + rng.next(6))) + "\n"
    return "x" + str(rng.next(1000)) + " = f(" + str(rng.next(100)) + ");\n"


def main():
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
    encoded = [p.encode("utf-8") for p in PARAGRAPHS]
    rng = Lcg(0x2545F4914F6CDD1D)
    out = bytearray()
    while len(out) < size:
        if rng.next(3) == 0:
            out += encoded[rng.next(len(encoded))]
        else:
            out += pseudo_text(rng).encode("utf-8")
    # cut at a character boundary
    out = out[:size]
    while out and (out[-1] & 0xC0) == 0x80:
        out = out[:-1]
    while out and out[-1] >= 0xC0:
        out = out[:-1]
    sys.stdout.buffer.write(bytes(out))


if __name__ == "__main__":
    main()
