"""chat_corpus.py — the chat corpus of the embedded model (assets/tinychat-f16.gguf): question → answer
conversations made from Debian packages and small talk written here, no outside model. docs/TRAINING.md.

Sources (Debian main; licences in docs/TRAINING.md):
  wordnet-base   WordNet 3.0 data files: a word's definition, synonyms, example sentence
  dict-gcide     GNU Collaborative International Dictionary of English: a headword's first sense
  manual pages   /usr/share/man/man1: NAME (what a command does), the first DESCRIPTION paragraph, options
  bible-kjv-text the King James Bible (with bible-kjv's `bible`): verse look-ups, chapter counts
  fortunes, fortunes-min   a quotation or a joke on request
  small talk     written here: greetings, who are you, what can you do, thanks, goodbye

Every conversation is rendered exactly as deltallm renders the Qwen3.5 template (src/chat/chat_qwen35.c)
with thinking off: earlier assistant turns plain, the last one after an empty <think></think> block, every
turn ending in <|im_end|>. Every 20th item of each source is held out; heldout_questions.json keeps 100 of
the held-out single-turn questions for the end-of-turn check.

usage: chat_corpus.py OUT_DIR   → OUT_DIR/{train,heldout}.txt, OUT_DIR/heldout_questions.json"""
import glob
import gzip
import json
import os
import random
import re
import subprocess
import sys

HOLD_EVERY = 20
WN = "/usr/share/wordnet"
GCIDE = "/usr/share/dictd/gcide.dict.dz"
MAN1 = "/usr/share/man/man1"
FORTUNE_DIR = "/usr/share/games/fortunes"
SKIP_FORTUNES = {"art", "ascii-art"}
POS = {"n": "noun", "v": "verb", "a": "adjective", "s": "adjective", "r": "adverb"}

rng = random.Random(7)


def pick(xs):
    return xs[rng.randrange(len(xs))]


# ------------------------------------------------------------------------------------------- WordNet
def wordnet():
    out = []
    for pos in ("noun", "verb", "adj", "adv"):
        path = os.path.join(WN, "data." + pos)
        if not os.path.exists(path):
            continue
        for line in open(path, encoding="utf-8", errors="replace"):
            if line.startswith("  "):
                continue
            head, _, gloss = line.partition(" | ")
            f = head.split()
            ss_type, n = f[2], int(f[3], 16)
            words = [f[4 + 2 * i].replace("_", " ") for i in range(n)]
            words = [re.sub(r"\(.*\)$", "", w) for w in words]
            gloss = gloss.strip()
            examples = [e for e in re.findall(r'"([^"]+)"', gloss) if words[0].split()[0].lower() in e.lower()]
            definition = gloss.split(';')[0].strip().strip('"').strip()
            if not definition or len(definition) > 200:
                continue
            w = words[0]
            if len(w) < 3 or not re.match(r"^[A-Za-z][A-Za-z \-']+$", w):
                continue
            p = POS.get(ss_type, "word")
            syn = [x for x in words[1:] if x.lower() != w.lower()][:4]
            kind = rng.randrange(4)
            if kind == 0:
                q = pick([f"What does {w} mean?", f"What does \"{w}\" mean?", f"Define {w}.", f"define {w}",
                          f"What is the meaning of {w}?", f"Meaning of {w}?"])
                a = f"{w.capitalize()} ({p}): {definition}."
                if syn:
                    a += " Synonyms: " + ", ".join(syn) + "."
            elif kind == 1 and syn:
                q = pick([f"What is another word for {w}?", f"Give me a synonym for {w}.", f"Synonyms of {w}?"])
                a = f"Another word for {w} is {syn[0]}." + (" Others: " + ", ".join(syn[1:]) + "." if syn[1:] else "")
            elif kind == 2 and examples:
                q = pick([f"Use {w} in a sentence.", f"Give me an example sentence with {w}.",
                          f"How do you use the word {w}?"])
                a = f"\"{examples[0].strip()}\" Here {w} means: {definition}."
            else:
                art = "an" if w[0].lower() in "aeiou" else "a"
                if p == "noun" and w[0].isupper():
                    q = pick([f"Who or what is {w}?", f"What is {w}?", f"Tell me about {w}."])
                    a = f"{w}: {definition}."
                elif p == "noun":
                    q = pick([f"What is {art} {w}?", f"What is {w}?", f"Tell me what {art} {w} is."])
                    a = f"{art.capitalize()} {w} is {definition}."
                elif p == "verb":
                    q = pick([f"What does it mean to {w}?", f"What does the verb {w} mean?"])
                    a = f"To {w} is to {definition}."
                else:
                    q = pick([f"What does {w} mean?", f"What does the {p} {w} mean?"])
                    a = f"{w.capitalize()} ({p}) means {definition}."
            out.append((q, a))
    return out


# ------------------------------------------------------------------------------------------- GCIDE
def gcide():
    out = []
    text = gzip.open(GCIDE).read().decode("utf-8", errors="replace")
    pos_names = {"n.": "noun", "v. t.": "verb", "v. i.": "verb", "a.": "adjective", "adv.": "adverb"}
    for m in re.finditer(r"\n\n([A-Z][a-z]+) \\[^\\\n]+\\, (n\.|v\. t\.|v\. i\.|a\.|adv\.)[^\n]*\n((?:.+\n){1,12})", text):
        word, pos, body = m.group(1), m.group(2), m.group(3)
        body = re.sub(r"\[[^\]]*\]", "", body)
        d = re.search(r"(?:^|\n)\s*(?:1\. )?(?:\([^)]*\) )?([A-Z][^.]{8,160}\.)", body)
        if not d:
            continue
        definition = re.sub(r"\s+", " ", d.group(1)).replace("{", "").replace("}", "").strip()
        if "--" in definition or "Webster" in definition or "Etym" in definition:
            continue
        w = word.lower()
        q = pick([f"What does {w} mean?", f"Define {w}.", f"What is the meaning of the word {w}?",
                  f"What did {w} mean in old dictionaries?", f"Look up {w} in the dictionary."])
        out.append((q, f"{word} ({pos_names[pos]}): {definition}"))
    return out


# ------------------------------------------------------------------------------------------- man pages
def roff_text(s):
    s = re.sub(r"\\f[BIRP]|\\f\(..|\\f\[[^\]]*\]|\\/|\\,|\\&|\\:|\\%", "", s)
    s = s.replace("\\-", "-").replace("\\(em", "-").replace("\\(en", "-").replace("\\(aq", "'").replace("\\e", "\\")
    s = re.sub(r"\\\(..", "", s)
    s = re.sub(r"\\\*\(..|\\\*.", "", s)
    return re.sub(r"\s+", " ", s).strip()


def manpages():
    out = []
    for path in sorted(glob.glob(os.path.join(MAN1, "*.1.gz"))):
        try:
            src = gzip.open(path).read().decode("utf-8", errors="replace")
        except OSError:
            continue
        lines = src.splitlines()
        name = desc = None
        opts = []
        sec = None
        para = []
        i = 0
        while i < len(lines):
            l = lines[i]
            if l.startswith(".SH"):
                if sec == "DESCRIPTION" and para and not desc:
                    desc = " ".join(para)
                sec = roff_text(l[3:]).strip('"').upper()
                para = []
            elif sec == "NAME" and not l.startswith("."):
                name = (name + " " + l) if name else l
            elif sec == "DESCRIPTION" and not desc:
                if l.startswith((".PP", ".P", ".LP", ".TP", ".IP")) and para:
                    desc = " ".join(para)
                elif l.startswith((".B ", ".I ")):
                    para.append(l[3:])
                elif not l.startswith("."):
                    para.append(l)
            elif sec in ("OPTIONS", "DESCRIPTION") and l.startswith(".TP") and i + 2 < len(lines):
                flag, what = roff_text(lines[i + 1].lstrip(".B ")), lines[i + 2]
                if flag.startswith("-") and len(flag) < 40 and not what.startswith("."):
                    opts.append((flag, roff_text(what)))
            i += 1
        if not name:
            continue
        name = roff_text(name)
        m = re.match(r"^([\w.+-]+(?:, [\w.+-]+)*) - (.+)$", name)
        if not m:
            continue
        cmd, what = m.group(1).split(",")[0].strip(), m.group(2).strip().rstrip(".")
        if len(what) < 5 or len(what) > 150:
            continue
        items = [(pick([f"What does the {cmd} command do?", f"What is {cmd}?", f"What does {cmd} do?",
                        f"Which command does this: {what}?" if rng.random() < 0.3 else f"What is the {cmd} command for?"]),
                  f"{cmd}: {what}." if "Which command" not in "" else "")]
        if items[0][0].startswith("Which command"):
            items[0] = (items[0][0], f"That is {cmd}: {what}.")
        if desc:
            d = roff_text(desc)
            d = re.split(r"(?<=\.) ", d)
            d = " ".join(d[:2])
            if 20 < len(d) < 400:
                items.append((pick([f"Tell me more about {cmd}.", f"Describe the {cmd} command.", f"Explain {cmd}."]),
                              f"{cmd} - {what}. {d}"))
        for flag, w in opts[:6]:
            if 5 < len(w) < 200:
                items.append((pick([f"What does {flag.split(',')[0]} do in {cmd}?", f"What is the {flag.split(',')[0]} option of {cmd}?"]),
                              f"In {cmd}, {flag}: {w}"))
        out.extend(items)
    return out


# ------------------------------------------------------------------------------------------- Bible
def bible():
    text = subprocess.run(["bible", "-l100000", "Genesis1:1-Revelation22:21"], check=True,
                          capture_output=True, text=True).stdout
    book = chap = None
    verses = []
    chapters = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        m = re.match(r"^\s+(\d+) (.*)$", line)
        if m:
            verses.append((book, chap, int(m.group(1)), m.group(2).strip()))
        else:
            mm = re.match(r"^(.*\S) (\d+)$", line.strip())
            book, chap = mm.group(1), int(mm.group(2))
            chapters[book] = max(chapters.get(book, 0), chap)
    out = []
    for b, c, v, t in verses:
        ref = f"{b} {c}:{v}"
        if v == 1 and rng.random() < 0.5:
            q = pick([f"How does {b} chapter {c} begin?", f"What is the first verse of {b} {c}?"])
        else:
            q = pick([f"What does {ref} say?", f"Quote {ref}.", f"Read me {ref}.", f"What is {ref}?",
                      f"{ref}", f"Recite {ref} from the King James Bible."])
        out.append((q, f"{ref}: {t}"))
    for b, n in chapters.items():
        for _ in range(3):
            out.append((pick([f"How many chapters does {b} have?", f"How many chapters are in {b}?"]),
                        f"{b} has {n} chapter{'s' if n > 1 else ''} in the King James Bible."))
    return out


# ------------------------------------------------------------------------------------------- fortunes
def fortunes():
    out = []
    for name in sorted(os.listdir(FORTUNE_DIR)):
        path = os.path.join(FORTUNE_DIR, name)
        if "." in name or name in SKIP_FORTUNES or os.path.islink(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for item in f.read().split("\n%\n"):
                item = item.strip("\n%")
                lines = [l.strip() for l in item.splitlines() if l.strip()]
                t = " ".join(lines)
                if 20 < len(t) < 360:
                    joke = name in ("humorists", "kids", "computers", "cookie", "food", "pets", "miscellaneous",
                                    "wisdom", "zippy", "linuxcookie", "riddles", "definitions")
                    if joke and rng.random() < 0.6:
                        q = pick(["Tell me a joke.", "Say something funny.", "Make me laugh.", "Got a joke?",
                                  "tell me a joke", "Another joke, please."])
                    else:
                        q = pick(["Give me a quote.", "Tell me a fortune.", "Share a quotation.", "Say something wise.",
                                  "Give me a fortune cookie.", "Quote of the day?", "Any words of wisdom?"])
                    out.append((q, t))
    return out


# ------------------------------------------------------------------------------------------- small talk
ME = ("I am the demo model built into deltallm, a tiny language model of about six million parameters, "
      "trained on this project's machine in about an hour.")
CAN = ("I can define English words, give synonyms and example sentences, say what a Unix command does, "
       "quote the King James Bible by book, chapter and verse, and tell you a joke or a quotation.")
SMALL = [
    (["Hello!", "Hi", "hi", "Hello", "Hey there", "Good morning", "Good evening", "Hi there!", "hello", "Hey"],
     ["Hello! I am deltallm's demo model. Ask me what a word means, what a command does, or for a Bible verse.",
      "Hi! How can I help? I know words, commands, Bible verses and a few jokes.",
      "Hello! What would you like to know?"]),
    (["Who are you?", "What are you?", "who are you", "Are you a person?", "What is your name?", "Introduce yourself."],
     [ME + " I am not a person.", ME, ME + " " + CAN]),
    (["What can you do?", "Help", "help", "What do you know?", "How can you help me?", "What are you good at?"],
     [CAN, CAN + " Keep questions short: I am very small."]),
    (["What is deltallm?", "Tell me about deltallm.", "What program runs you?"],
     ["deltallm is an inference engine in C for Gated DeltaNet hybrid language models such as Qwen3.5. "
      "It runs models on the CPU or with Vulkan, with a command line, a web page and an OpenAI-compatible server.",
      "deltallm is the C program that runs me: a CPU and Vulkan engine for Qwen3.5-style models with a chat, "
      "a server and a web page."]),
    (["How big are you?", "How many parameters do you have?", "How were you trained?"],
     [ME + " My training text came from Debian packages: WordNet, a dictionary, manual pages, the Bible and fortunes."]),
    (["Thanks!", "Thank you", "thanks", "Thank you very much.", "Great, thanks."],
     ["You are welcome!", "Glad to help.", "You're welcome. Ask me anything else."]),
    (["Bye", "Goodbye!", "See you later.", "bye"], ["Goodbye!", "Bye! Have a good day."]),
    (["How are you?", "How are you doing?", "How's it going?"],
     ["I am fine, thank you. What would you like to know?", "Very well! Ask me a question."]),
    (["Can you write code?", "Can you browse the web?", "What is the weather today?", "What time is it?",
      "Can you solve math problems?", "What is the capital of France?"],
     ["I am too small for that. " + CAN, "I cannot do that; I am only a tiny demo model. " + CAN]),
    (["Are you smart?", "Are you ChatGPT?", "Are you Qwen?"],
     ["No. I use the Qwen3.5 architecture but I am a tiny demo model, far smaller than a real assistant. " + CAN]),
]


def small_talk(n):
    out = []
    for _ in range(n):
        qs, ans = pick(SMALL)
        out.append((pick(qs), pick(ans)))
    return out


# ------------------------------------------------------------------------------------------- rendering
def render(turns, system=None):
    s = f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
    for i, (q, a) in enumerate(turns):
        s += f"<|im_start|>user\n{q.strip()}<|im_end|>\n<|im_start|>assistant\n"
        if i == len(turns) - 1:
            s += "<think>\n\n</think>\n\n"
        s += f"{a.strip()}<|im_end|>\n"
    return s


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    caps = {"wordnet": 30000, "gcide": 12000, "man": 9000, "bible": 16000, "fortunes": 7000}
    sources = {"wordnet": wordnet(), "gcide": gcide(), "man": manpages(), "bible": bible(), "fortunes": fortunes()}
    train, held = [], []
    stats = {}
    for name, items in sources.items():
        stats[name] = len(items)
        rng.shuffle(items)
        items = items[:caps[name]]
        for i, it in enumerate(items):
            (held if i % HOLD_EVERY == HOLD_EVERY - 1 else train).append((name, it))
    for i, it in enumerate(small_talk(3000)):
        (held if i % HOLD_EVERY == HOLD_EVERY - 1 else train).append(("small", it))
    stats["small"] = 3000

    def conversations(items):
        rng.shuffle(items)
        docs, i = [], 0
        while i < len(items):
            k = 1 if rng.random() < 0.75 else rng.choice([2, 3])
            turns = [it for _, it in items[i:i + k]]
            system = "You are a helpful assistant." if rng.random() < 0.05 else None
            docs.append(render(turns, system))
            i += k
        return docs

    held_q = [(n, q, a) for n, (q, a) in held]
    rng.shuffle(held_q)
    tr_docs, he_docs = conversations(train), conversations(held)
    for name, docs in (("train.txt", tr_docs), ("heldout.txt", he_docs)):
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            f.write("".join(docs))
        print(f"{name}: {len(docs)} conversations, {sum(len(d) for d in docs)} characters")
    with open(os.path.join(out_dir, "heldout_questions.json"), "w", encoding="utf-8") as f:
        json.dump([{"source": n, "question": q, "answer": a} for n, q, a in held_q[:100]], f, indent=1)
    with open(os.path.join(out_dir, "sources.json"), "w") as f:
        json.dump({"items": stats, "caps": caps, "train_items": len(train), "heldout_items": len(held)}, f, indent=1)
    print("items per source:", stats)


if __name__ == "__main__":
    main()
