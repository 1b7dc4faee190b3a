#!/usr/bin/env python3
"""Writes a GGUF file with every tensor of another dequantized to F32 (gguf-py's reference
dequantization), metadata unchanged. tp_forward_test uses it to show that tensor parallelism is
exact up to float rounding once no matmul quantizes its activations.

usage: dequantize_gguf.py IN.gguf OUT.gguf   (IN empty or missing: nothing to do, exit 0)
"""
import os
import sys

import numpy as np
import gguf
from gguf.quants import dequantize


def main() -> int:
    src, dst = sys.argv[1], sys.argv[2]
    if not src or not os.path.exists(src):
        print(f"no model at '{src}': nothing to dequantize")
        return 0
    if os.path.exists(dst) and os.path.getmtime(dst) >= os.path.getmtime(src):
        return 0
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    tmp = dst + ".part"
    writer = gguf.GGUFWriter(tmp, arch)
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    for t in reader.tensors:
        data = dequantize(t.data, t.tensor_type).astype(np.float32)
        writer.add_tensor(t.name, data, raw_shape=data.shape)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, dst)  # never a half-written file under the final name
    return 0


if __name__ == "__main__":
    sys.exit(main())
