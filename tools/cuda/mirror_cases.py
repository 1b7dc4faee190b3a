"""Random inputs for the attention kernels' numpy mirrors: a paged F16 KV cache whose block table
is scattered over a larger pool, and the new tokens' queries."""
import numpy as np


def paged_case(rng, cached, fresh, heads, kv_heads, D, block_size):
    """Returns (table, kc, vc, q): the sequence's block table, the K and V caches (rows of
    slot * kv_heads + kv head) and q [fresh, heads, D]."""
    blocks = (cached + fresh + block_size - 1) // block_size
    table = rng.permutation(blocks + 3)[:blocks]  # scattered pages
    slots = (blocks + 3) * block_size
    kc = rng.normal(size=(slots * kv_heads, D)).astype(np.float16)
    vc = rng.normal(size=(slots * kv_heads, D)).astype(np.float16)
    q = rng.normal(size=(fresh, heads, D)).astype(np.float32)
    return table, kc, vc, q
