"""A Qwen3-30B-A3B-shaped GGUF of random weights, for benchmarks: the real hidden size, heads,
head size, expert size and top-8 routing, with fewer layers and experts so that it fits a small
machine. The tokenizer (metadata and vocabulary size) comes from a real Qwen GGUF, so llama.cpp
and Hearth load it as they load any Qwen file. Written in F16; quantize it with llama-quantize.

    python3 benches/moe_gguf.py --tokenizer-from qwen.gguf --layers 4 --experts 128 out.gguf

`--tiny` makes instead a model of a few MB whose matrices all have rows of 256 values, so that
llama-quantize gives them K-quants (the test fixture of crates/engine/tests/fixtures/gguf_moe_golden.sh),
in F32, with weights large enough that the next token is seldom a near tie and small enough
that a rounding does not flip a router (a larger scale makes the tiny model chaotic).

Needs numpy and llama.cpp's gguf-py on PYTHONPATH (benches/moe-side-by-side.sh sets both up).
"""
import argparse

import numpy as np
import gguf

# Qwen3-30B-A3B's config.json (Qwen/Qwen3-30B-A3B).
SHAPE = dict(hidden=2048, heads=32, kv_heads=4, head_dim=128, expert_ffn=768, top_k=8, dense_ffn=6144,
             context=40960, scale=0.02, dtype=np.float16)
# Rows of 256 everywhere (K-quant blocks), two experts of eight per token.
TINY = dict(hidden=256, heads=4, kv_heads=2, head_dim=64, expert_ffn=256, top_k=2, dense_ffn=512,
            context=512, scale=0.08, dtype=np.float32)
ROPE_THETA, EPS = 1_000_000.0, 1e-6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--tokenizer-from", required=True, help="a Qwen GGUF whose tokenizer to copy")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tiny", action="store_true", help="the K-quant test fixture's shape")
    a = ap.parse_args()
    c = TINY if a.tiny else SHAPE
    HIDDEN, HEADS, KV_HEADS, HEAD_DIM = c["hidden"], c["heads"], c["kv_heads"], c["head_dim"]
    EXPERT_FFN, TOP_K, DENSE_FFN, CONTEXT = c["expert_ffn"], c["top_k"], c["dense_ffn"], c["context"]
    if not 0 < TOP_K <= a.experts:
        ap.error(f"--experts: at least {TOP_K} (the top-k), got {a.experts}")

    src = gguf.GGUFReader(a.tokenizer_from)
    w = gguf.GGUFWriter(a.out, "qwen3moe")
    w.add_name("tiny-qwen3-moe-k-quants" if a.tiny else "qwen3-30b-a3b-shaped-random")
    w.add_block_count(a.layers)
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(DENSE_FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_freq_base(ROPE_THETA)
    w.add_layer_norm_rms_eps(EPS)
    w.add_expert_count(a.experts)
    w.add_expert_used_count(TOP_K)
    w.add_expert_feed_forward_length(EXPERT_FFN)
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if a.tiny else gguf.LlamaFileType.MOSTLY_F16)
    vocab = None
    for field in src.fields.values():
        if not field.name.startswith("tokenizer."):
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            sub = field.types[-1]
            if sub == gguf.GGUFValueType.STRING:
                value = [bytes(field.parts[i]) for i in field.data]
            else:
                value = [field.parts[i].tolist()[0] for i in field.data]
            if field.name == "tokenizer.ggml.tokens":
                vocab = len(value)
            w.add_key_value(field.name, value, kind, sub_type=sub)
        elif kind == gguf.GGUFValueType.STRING:
            w.add_key_value(field.name, bytes(field.parts[field.data[0]]).decode(), kind)
        else:
            w.add_key_value(field.name, field.parts[field.data[0]].tolist()[0], kind)
    if vocab is None:
        raise SystemExit(f"{a.tokenizer_from}: no tokenizer.ggml.tokens")

    rng = np.random.default_rng(a.seed)

    def rand(*shape, scale=c["scale"]):
        return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(c["dtype"])

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)

    w.add_tensor("token_embd.weight", rand(vocab, HIDDEN))
    w.add_tensor("output_norm.weight", norm(HIDDEN))
    w.add_tensor("output.weight", rand(vocab, HIDDEN))
    for i in range(a.layers):
        b = f"blk.{i}"
        w.add_tensor(f"{b}.attn_norm.weight", norm(HIDDEN))
        w.add_tensor(f"{b}.attn_q.weight", rand(HEADS * HEAD_DIM, HIDDEN))
        w.add_tensor(f"{b}.attn_k.weight", rand(KV_HEADS * HEAD_DIM, HIDDEN))
        w.add_tensor(f"{b}.attn_v.weight", rand(KV_HEADS * HEAD_DIM, HIDDEN))
        w.add_tensor(f"{b}.attn_output.weight", rand(HIDDEN, HEADS * HEAD_DIM))
        w.add_tensor(f"{b}.attn_q_norm.weight", norm(HEAD_DIM))
        w.add_tensor(f"{b}.attn_k_norm.weight", norm(HEAD_DIM))
        w.add_tensor(f"{b}.ffn_norm.weight", norm(HIDDEN))
        # The router stays f32, as llama.cpp's converter and quantizer keep it.
        w.add_tensor(f"{b}.ffn_gate_inp.weight", rand(a.experts, HIDDEN, scale=0.5).astype(np.float32))
        w.add_tensor(f"{b}.ffn_gate_exps.weight", rand(a.experts, EXPERT_FFN, HIDDEN))
        w.add_tensor(f"{b}.ffn_up_exps.weight", rand(a.experts, EXPERT_FFN, HIDDEN))
        w.add_tensor(f"{b}.ffn_down_exps.weight", rand(a.experts, HIDDEN, EXPERT_FFN))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {a.out}: {a.layers} layers of {a.experts} experts (top-{TOP_K}), vocabulary {vocab}")


if __name__ == "__main__":
    main()
