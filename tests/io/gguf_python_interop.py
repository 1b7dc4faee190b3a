#!/usr/bin/env python3
"""Cross-checks Tern's GGUF reader and writer against PyPI `gguf`, the format's reference.

1. Files written by gguf.GGUFWriter (every value type, nested arrays, many tensor types) are read
   by `tern show --json`; every key, type, value, shape, offset and size must agree.
2. Files written by Tern's writer (gguf_write_sample) are read by gguf.GGUFReader.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import gguf


def tern_show(tern, path):
    out = subprocess.run([tern, "show", "--json", path], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"tern show failed on {path}: {out.stderr}")
    return json.loads(out.stdout)


def write_reference(path):
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -2_000_000_000)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_float32("t.f32", 0.25)
    w.add_float64("t.f64", 1e-300)
    w.add_bool("t.bool", False)
    w.add_string("t.str", "héllo\nworld")
    w.add_array("t.arr_str", ["x", "yy", ""])
    w.add_array("t.arr_int", [1, 2, 3])
    w.add_array("t.nested", [[1, 2], [3]])
    rng = np.random.default_rng(0)
    w.add_tensor("f32", rng.standard_normal((3, 64), dtype=np.float32))
    w.add_tensor("f16", rng.standard_normal((2, 32)).astype(np.float16))
    for qtype, blk in [(gguf.GGMLQuantizationType.Q8_0, 32), (gguf.GGMLQuantizationType.Q4_K, 256),
                       (gguf.GGMLQuantizationType.Q6_K, 256), (gguf.GGMLQuantizationType.IQ4_XS, 256)]:
        bs, ts = gguf.GGML_QUANT_SIZES[qtype]
        raw = rng.integers(0, 256, size=(2, 2 * ts), dtype=np.uint8)
        w.add_tensor(qtype.name.lower(), raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def check_tern_reads_reference(tern, work):
    path = os.path.join(work, "reference.gguf")
    write_reference(path)
    shown = tern_show(tern, path)
    reader = gguf.GGUFReader(path)
    md = shown["metadata"]
    names = {
        gguf.GGUFValueType.UINT8: "u8", gguf.GGUFValueType.INT8: "i8", gguf.GGUFValueType.UINT16: "u16",
        gguf.GGUFValueType.INT16: "i16", gguf.GGUFValueType.UINT32: "u32", gguf.GGUFValueType.INT32: "i32",
        gguf.GGUFValueType.UINT64: "u64", gguf.GGUFValueType.INT64: "i64", gguf.GGUFValueType.FLOAT32: "f32",
        gguf.GGUFValueType.FLOAT64: "f64", gguf.GGUFValueType.BOOL: "bool", gguf.GGUFValueType.STRING: "str",
        gguf.GGUFValueType.ARRAY: "arr",
    }
    checked = 0
    for field in reader.fields.values():
        if field.name.startswith("GGUF."):
            continue
        assert field.name in md, f"tern is missing key {field.name}"
        assert md[field.name]["type"] == names[field.types[0]], (field.name, md[field.name]["type"])
        expected = field.contents()
        got = md[field.name]["value"]
        if field.name == "t.nested":
            # gguf's reader flattens nested arrays in contents(); compare with what was written.
            expected = [[1, 2], [3]]
        if isinstance(expected, float):
            assert abs(got - expected) <= abs(expected) * 1e-7, (field.name, got, expected)
        else:
            assert got == expected, (field.name, got, expected)
        checked += 1
    assert len(md) == checked, "tern shows keys gguf does not"
    tensors = {t["name"]: t for t in shown["tensors"]}
    assert len(tensors) == len(reader.tensors)
    for t in reader.tensors:
        got = tensors[t.name]
        assert got["type"] == t.tensor_type.name, (t.name, got["type"])
        assert got["shape"] == [int(x) for x in t.shape], (t.name, got["shape"], t.shape)
        assert got["size_bytes"] == int(t.n_bytes), t.name
        assert got["offset"] + reader.data_offset == int(t.data_offset), t.name
    print(f"tern read {checked} keys and {len(tensors)} tensors written by gguf {gguf.__name__}")


def check_gguf_reads_tern(writer, work):
    subprocess.run([writer, work], check=True)
    for version in (2, 3):
        path = os.path.join(work, f"sample-v{version}.gguf")
        reader = gguf.GGUFReader(path)
        f = reader.fields
        assert f["GGUF.version"].contents() == version
        assert f["test.u64"].contents() == 18000000000000000000
        assert f["test.i8"].contents() == -120
        assert f["test.f64"].contents() == -2.25e300
        # gguf's contents() flattens nested arrays; the leaves must still be right.
        assert f["test.nested"].contents() == ["a", "bc", "\x07"], f["test.nested"].contents()
        assert f["test.array_i32"].contents() == [1, -2]
        assert f["general.name"].contents() == 'sample "quoted" ünïcödé'
        shapes = {t.name: ([int(x) for x in t.shape], t.tensor_type.name) for t in reader.tensors}
        assert shapes["blk.0.attn_q.weight"] == ([64, 3], "Q4_0"), shapes
        assert shapes["output_norm.weight"] == ([5], "BF16"), shapes
        q = next(t for t in reader.tensors if t.name == "blk.0.attn_q.weight")
        raw = np.asarray(q.data).reshape(-1).view(np.uint8)
        assert list(raw[:2]) == [108, (131 + 108) & 0xFF]
    print("gguf read the files Tern wrote (v2 and v3)")


def check_real_models(tern):
    """Every tensor of the real models: name, type, shape, offset and size as gguf reads them."""
    checked = 0
    for var in ("TERN_SMOLLM2_GGUF", "TERN_GEMMA3_GGUF"):
        path = os.environ.get(var)
        if not path:
            print(f"{var} not set: real-model check skipped")
            continue
        shown = tern_show(tern, path)
        reader = gguf.GGUFReader(path)
        tensors = {t["name"]: t for t in shown["tensors"]}
        assert len(tensors) == len(reader.tensors), (path, len(tensors), len(reader.tensors))
        for t in reader.tensors:
            got = tensors[t.name]
            assert got["type"] == t.tensor_type.name, (t.name, got["type"])
            assert got["shape"] == [int(x) for x in t.shape], (t.name, got["shape"])
            assert got["size_bytes"] == int(t.n_bytes), t.name
            assert got["offset"] + reader.data_offset == int(t.data_offset), t.name
        for field in reader.fields.values():
            if not field.name.startswith("GGUF."):
                assert field.name in shown["metadata"], field.name
        print(f"{os.path.basename(path)}: {len(tensors)} tensors agree with gguf")
        checked += 1
    return checked


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tern", required=True)
    ap.add_argument("--write-sample", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    check_tern_reads_reference(args.tern, args.work)
    check_gguf_reads_tern(args.write_sample, args.work)
    check_real_models(args.tern)


if __name__ == "__main__":
    main()
