#!/usr/bin/env python3
"""Writes tests/data/tokenizer/corpus.txt: a deterministic, diverse tokenizer test corpus.

Everything here is written for this project (no third-party text). One test case per line; the
tests also join consecutive lines with "\n" and "\r\n" (see tern_corpus_cases in the oracle).
Usage: make_corpus.py [OUT]
"""
import random
import sys

R = random.Random(20240601)

CODE = {
    "cpp": [
        "#include <vector>", "int main(int argc, char** argv) {", "  std::vector<int> v{1, 2, 3};",
        "  for (auto& x : v) x *= 2;", "  return v.empty() ? -1 : v[0];", "}",
        "template <typename T> T clamp(T x, T lo, T hi) { return x < lo ? lo : (x > hi ? hi : x); }",
        "static_assert(sizeof(int32_t) == 4, \"int32_t must be 4 bytes\");",
        "auto it = std::find_if(begin(xs), end(xs), [&](const auto& e) { return e.id == id; });",
        "#define TERN_CHECK(x) do { if (!(x)) std::abort(); } while (0)",
        "uint64_t h = 0xcbf29ce484222325ULL; h ^= c; h *= 0x100000001b3ULL;",
        "std::unique_ptr<Node> root = std::make_unique<Node>(/*depth=*/0);",
        "if (a->b.c[i] != nullptr && *p++ >= 0x7f) { --n; }",
    ],
    "python": [
        "def fib(n: int) -> int:", "    return n if n < 2 else fib(n - 1) + fib(n - 2)",
        "class Point:", "    def __init__(self, x=0.0, y=0.0):", "        self.x, self.y = x, y",
        "print(f\"{name!r:>10} = {value:.3f}\")", "xs = [i ** 2 for i in range(10) if i % 3 == 0]",
        "with open('data.json', encoding='utf-8') as fh:", "    data = json.load(fh)",
        "lambda s: s.strip().lower().replace('  ', ' ')", "@dataclass(frozen=True)",
        "async def main(): await asyncio.gather(*tasks)", "raise ValueError(f'bad value: {x}')",
        "if __name__ == \"__main__\":", "    sys.exit(main())",
    ],
    "rust": [
        "fn main() { println!(\"Hello, {}!\", name); }", "let mut map: HashMap<String, Vec<u32>> = HashMap::new();",
        "impl<T: Clone> Stack<T> { pub fn push(&mut self, x: T) { self.items.push(x) } }",
        "match res { Ok(v) => v, Err(e) => return Err(e.into()) }", "#[derive(Debug, Clone, PartialEq)]",
        "let s: &str = &owned[..3];", "pub(crate) const MAX: usize = 1 << 20;",
    ],
    "js": [
        "const add = (a, b) => a + b;", "export default function App() { return <div className=\"app\" />; }",
        "fetch('/api/v1/items?limit=10').then(r => r.json()).catch(console.error);",
        "let x = obj?.a?.b ?? 'default';", "for (let i = 0; i < arr.length; i++) { sum += arr[i]; }",
        "document.querySelector('#main').addEventListener('click', () => {});",
        "interface User { id: number; name: string; tags?: string[] }",
    ],
    "go": [
        "func (s *Server) Handle(w http.ResponseWriter, r *http.Request) {",
        "\tif err != nil {", "\t\treturn fmt.Errorf(\"open %s: %w\", path, err)", "\t}",
        "ch := make(chan int, 16)", "go func() { defer wg.Done(); ch <- 42 }()",
    ],
    "shell": [
        "for f in *.txt; do wc -l \"$f\"; done", "export PATH=\"$HOME/.local/bin:$PATH\"",
        "grep -rn 'TODO' src/ | sort | uniq -c | sort -rn | head -20",
        "cmake -S . -B build -G Ninja && ninja -C build -j8", "echo $((16#ff + 0b101))",
    ],
    "sql": [
        "SELECT id, name FROM users WHERE created_at >= '2024-01-01' ORDER BY id DESC LIMIT 10;",
        "CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL);",
        "UPDATE accounts SET balance = balance - 100 WHERE id = 7;",
    ],
    "misc": [
        "<html><head><title>Test</title></head><body><p class=\"x\">Hi &amp; bye</p></body></html>",
        "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}",
        "key: value\nlist:\n  - one\n  - two", "\\begin{equation} E = mc^2 \\end{equation}",
        "| col1 | col2 |\n|------|------|\n| 1    | 2    |", "[link](https://example.com/path?q=1&r=2#frag)",
        "a := b; c <<= 2; d >>>= 3; e **= 4; f //= 5; g ... h", "~~~ ``` ''' \"\"\" ### *** ___ ---",
    ],
}

SCRIPTS = [
    "The quick brown fox jumps over the lazy dog.", "It's a test: don't, won't, we'll, I'd, you've, they're.",
    "IT'S LOUD. DON'T SHOUT! We'LL see.", "Mañana será otro día, ¿verdad? ¡Claro que sí!",
    "Ça va très bien, merci. L'été dernier, où étiez-vous ?", "Größe, Straße, Übermaß und Ärger.",
    "Szczęśliwego nowego roku! Żółć gęślą jaźń.", "Čeština, slovenčina, hrvatski: čćžšđ.",
    "Türkçe: İstanbul, ılık, şehir, çiçek, ğ.", "Tiếng Việt: Xin chào, tôi tên là Nam.",
    "Русский язык: Съешь же ещё этих мягких булок.", "Українська: Привіт, як справи? Ґанок, їжак, є.",
    "Ελληνικά: Καλημέρα κόσμε, τι κάνεις;", "עברית: שלום עולם, מה שלומך?",
    "العربية: مرحبا بالعالم، كيف حالك؟ ١٢٣٤٥", "فارسی: سلام دنیا، حال شما چطور است؟",
    "हिन्दी: नमस्ते दुनिया, आप कैसे हैं? १२३", "বাংলা: হ্যালো বিশ্ব, কেমন আছেন?",
    "தமிழ்: வணக்கம் உலகம்", "తెలుగు: నమస్కారం ప్రపంచం", "ಕನ್ನಡ: ನಮಸ್ಕಾರ ಜಗತ್ತು",
    "ไทย: สวัสดีชาวโลก คุณสบายดีไหม", "ລາວ: ສະບາຍດີ", "ខ្មែរ: សួស្តីពិភពលោក", "မြန်မာ: မင်္ဂလာပါ",
    "中文：你好，世界！今天天气很好。", "繁體中文：這是一個測試句子。", "日本語：こんにちは、世界。カタカナとひらがな。",
    "한국어: 안녕하세요, 세계! 반갑습니다.", "ქართული: გამარჯობა მსოფლიო", "Հայերեն: Բարեւ աշխարհ",
    "አማርኛ: ሰላም ዓለም", "ᚠᛇᚻ᛫ᛒᛦᚦ runes", "Ελληνικά μαθηματικά: α + β = γ, ∑ᵢ xᵢ² ≤ ∞",
    "Math: ∀x ∈ ℝ, ∃y: x² + y² = 1; ∫₀¹ f(x) dx ≈ 0.5 ± 1e-3", "Arrows ← ↑ → ↓ ↔ ⇒ ⇔ and boxes ┌─┐└─┘",
    "Currency: $100, €20, £5, ¥1000, ₹50, ₩3000, ₿0.01", "Fullwidth: ＡＢＣ１２３！？",
    "Combining: e\u0301 a\u0308 n\u0303 (decomposed) vs é ä ñ", "Zero\u200bwidth\u200cjoiners\u200d and soft\u00adhyphen",
    "NBSP:\u00a0here,\u2003em space,\u3000ideographic space.", "Ligatures ﬁ ﬂ and roman Ⅻ, superscript ¹²³",
    "Old italic 𐌰𐌱 and math bold 𝐀𝐁𝐂 and musical 𝄞", "Mongolian ᠮᠣᠩᠭᠣᠯ and Tibetan བོད་ཡིག",
    "Cherokee ᏣᎳᎩ, Inuktitut ᐃᓄᒃᑎᑐᑦ, Sinhala සිංහල",
]

EMOJI = ["😀", "🎉", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "🇯🇵", "❤️", "🔥", "🤖", "🧑🏿‍💻", "☕", "✅", "⚠️",
         "🙈🙉🙊", "🐍", "🦀", "🚀", "1️⃣", "#️⃣", "©", "™", "🫠"]

WORDS = ("time person year way day thing man world life hand part child eye woman place work week case "
         "point government company number group problem fact be have do say get make go know take see come "
         "think look want give use find tell ask seem feel try leave call good new first last long great "
         "little own other old right big high different small large next early young important few public "
         "tokenizer inference engine kernel cache prefix batch decode prefill latency throughput").split()

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<bos>", "<eos>", "<start_of_turn>",
            "<end_of_turn>", "<pad>", "<unk>", "<mask>", "<repo_name>", "<file_sep>", "<|fim_prefix|>",
            "<|extra_0|>", "<think>", "</think>", "<|im_start", "im_end|>", "<<|im_end|>>", "[multimodal]"]

WS = [" ", "  ", "   ", "    ", "\t", "\t\t", " \t ", "        ", "\u00a0", "\u3000", "\u2009", "\u000b", "\f"]


def number():
    k = R.randrange(8)
    if k == 0:
        return str(R.randrange(10))
    if k == 1:
        return str(R.randrange(10 ** R.randrange(2, 12)))
    if k == 2:
        return f"{R.uniform(-1e4, 1e4):.{R.randrange(1, 6)}f}"
    if k == 3:
        return f"{R.randrange(1, 2030)}-{R.randrange(1, 13):02d}-{R.randrange(1, 29):02d}"
    if k == 4:
        return hex(R.randrange(1 << 32))
    if k == 5:
        return f"{R.randrange(256)}.{R.randrange(256)}.{R.randrange(256)}.{R.randrange(256)}"
    if k == 6:
        return "1" + "0" * R.randrange(1, 25)
    return f"{R.randrange(1000):,}".replace(",", R.choice([",", ".", " ", "_"])) + str(R.randrange(1000))


def sentence():
    n = R.randrange(3, 14)
    words = [R.choice(WORDS) for _ in range(n)]
    if R.random() < 0.3:
        words[0] = words[0].capitalize()
    if R.random() < 0.2:
        words[R.randrange(n)] = R.choice(WORDS).upper()
    out = " ".join(words)
    return out + R.choice([".", "!", "?", "...", ";", ":", ",", ""])


def mixed():
    parts = []
    for _ in range(R.randrange(2, 7)):
        k = R.randrange(10)
        if k == 0:
            parts.append(sentence())
        elif k == 1:
            parts.append(R.choice(SCRIPTS))
        elif k == 2:
            parts.append(R.choice(EMOJI) * R.randrange(1, 4))
        elif k == 3:
            parts.append(number())
        elif k == 4:
            parts.append(R.choice(SPECIALS))
        elif k == 5:
            parts.append(R.choice(WS) * R.randrange(1, 4))
        elif k == 6:
            lang = R.choice(list(CODE))
            parts.append(R.choice(CODE[lang]))
        elif k == 7:
            parts.append(R.choice(WORDS) + R.choice(["'s", "'S", "'ll", "'re", "n't", "'d", "’s", "'ve"]))
        elif k == 8:
            parts.append("".join(R.choice("!@#$%^&*()_+-=[]{}|;':\",./<>?`~\\") for _ in range(R.randrange(1, 8))))
        else:
            s = R.choice(SCRIPTS)
            i = R.randrange(len(s))
            parts.append(s[i:i + R.randrange(1, 12)])
    sep = R.choice(["", " ", " ", "  ", "\t"])
    return sep.join(parts)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/tokenizer/corpus.txt"
    lines = []
    for lang, rows in CODE.items():
        lines.extend(rows)
    lines.extend(SCRIPTS)
    lines.extend(EMOJI)
    lines.extend(SPECIALS)
    for sp in SPECIALS[:12]:
        lines.append(f"Hello{sp}world {sp} and{sp}")
        lines.append(f"{sp}{sp} {sp}\t{sp}x")
    for ws in WS:
        for k in (1, 2, 3, 5, 9):
            lines.append(f"a{ws * k}b{ws * k}")
            lines.append(f"{ws * k}lead and trail{ws * k}")
    lines.extend(["", " ", "a", "I", "'", "''", "'s", "x's", "é", "\t", "0", "00", "000", "0000", "12345678901234567890"])
    for n in range(0, 1200, 7):
        lines.append(f"{n} {n * 13} {n}{n} {-n} x{n}y")
    while len(lines) < 2200:
        k = R.randrange(6)
        if k < 3:
            lines.append(mixed())
        elif k == 3:
            lines.append(sentence() + " " + sentence())
        elif k == 4:
            lines.append(R.choice(SCRIPTS) + " " + number() + " " + R.choice(EMOJI))
        else:
            lang = R.choice(list(CODE))
            lines.append(R.choice(WS[:8]) + R.choice(CODE[lang]))
    text = "".join(line.replace("\r", " ").replace("\n", "\\n") + "\n" for line in lines)
    with open(out, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    print(f"wrote {len(lines)} lines, {len(text.encode())} bytes to {out}")


if __name__ == "__main__":
    main()
