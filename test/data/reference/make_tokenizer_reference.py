#!/usr/bin/env python3
"""Writes tokenizer_smollm2.json: llama.cpp's token ids for a text set.

Each text is written to a file and tokenized by the peer exactly as
README.md says (llama-tokenize -f FILE --ids --no-escape --no-bos, with and
without --no-parse-special). Usage:
  make_tokenizer_reference.py LLAMA_TOKENIZE MODEL OUT.json
"""
import json, os, subprocess, sys, tempfile

TEXTS = [
    ("ascii", "Hello world! This is a simple sentence."),
    ("empty", ""),
    ("single_space", " "),
    ("leading_spaces", "   leading spaces and trailing   "),
    ("whitespace_runs", "a  b   c    d\t\te\n\nf \n g\r\nh     \n"),
    ("newlines_only", "\n\n\n"),
    ("tabs_and_spaces", "\t \t  \t\n    indented\n\tline"),
    ("digits", "3.14159 2026 1234567890 007 -42 +1e10 0x1F 1,000,000"),
    ("digits_letters", "abc123def 4th 21st 100km/h v2.0.1"),
    ("contractions", "I'm sure you're right, he'll say they've done it. It's John's."),
    ("contractions_upper", "DON'T I'M YOU'RE WE'VE SHE'LL"),
    ("punctuation", "Wait... what?! (yes) [no] {maybe} <tag> @user #hash $5 %50 ^caret &amp; *star*"),
    ("accents", "Café naïve résumé façade Ångström São Paulo Zürich coöperate"),
    ("german_french", "Größenwahn straße über Ärger; l'été déjà où ça"),
    ("cjk", "你好，世界！日本語のテキストです。한국어 텍스트입니다."),
    ("emoji", "I love 🍕 and 🚀! 👍🏽 👨‍👩‍👧‍👦 family ❤️ 🇫🇷"),
    ("mixed_scripts", "Привет мир! Γειά σου κόσμε! مرحبا بالعالم שלום עולם नमस्ते"),
    ("math_symbols", "∑ x² + √y ≥ ∞ ≠ π ≈ 3.14 ½ ¾ ①②③ ٣٤٥"),
    ("code_python", "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\nprint([fib(i) for i in range(10)])\n"),
    ("code_cpp", "#include <vector>\nint main() {\n  std::vector<int> v{1, 2, 3};\n  for (auto &x : v) x *= 2; // double\n  return v.size() == 3 ? 0 : 1;\n}\n"),
    ("json", "{\"name\": \"spanc\", \"tokens\": [1, 2, 3], \"ok\": true, \"nested\": {\"a\": null}}"),
    ("url_email", "See https://example.com/path?q=1&x=y#frag or mail me@example.org."),
    ("special_chatml", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"),
    ("special_adjacent", "<|im_start|><|im_end|><|endoftext|>text<|im_start|>"),
    ("special_partial", "<|im_start and im_end|> <|unknown|> <| im_start |>"),
    ("repeated_chars", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa ........ ---------- !!!!!!"),
    ("long_word", "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism"),
    ("mixed_case", "camelCaseWord snake_case_word SCREAMING_CASE kebab-case-word"),
    ("control_chars", "bell\x07 null-ish\x01 escape\x1b[0m del\x7f"),
    ("nbsp_and_unicode_spaces", "non\u00a0breaking\u2003em\u3000ideographic\u2028line"),
]

# Texts tokenized with --no-parse-special too (control tokens stay text).
NO_PARSE_SPECIAL = {"special_chatml", "special_adjacent"}


def tokenize(binary, model, text, parse_special):
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as f:
        f.write(text.encode("utf-8"))
        path = f.name
    try:
        command = [binary, "-m", model, "-f", path, "--ids", "--no-escape",
                   "--no-bos", "--log-disable"]
        if not parse_special:
            command.append("--no-parse-special")
        result = subprocess.run(command, check=True, capture_output=True)
        line = result.stdout.decode().strip().splitlines()[-1]
        return json.loads(line)
    finally:
        os.unlink(path)


def main():
    binary, model, out = sys.argv[1:4]
    cases = []
    for name, text in TEXTS:
        cases.append({"name": name, "text": text, "parse_special": True,
                      "ids": tokenize(binary, model, text, True)})
        if name in NO_PARSE_SPECIAL:
            cases.append({"name": name + "_no_parse_special", "text": text,
                          "parse_special": False,
                          "ids": tokenize(binary, model, text, False)})
    perplexity_text = os.path.join(os.path.dirname(out), "perplexity_text.txt")
    if os.path.exists(perplexity_text):
        text = open(perplexity_text, encoding="utf-8").read()
        cases.append({"name": "perplexity_text", "text": text,
                      "parse_special": True,
                      "ids": tokenize(binary, model, text, True)})
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"model": os.path.basename(model), "cases": cases}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
