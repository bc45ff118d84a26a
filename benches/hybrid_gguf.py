"""A Qwen3.5-shaped GGUF of random weights, for benchmarks: Qwen3.5-9B (dense) or Qwen3.5-35B-A3B
(mixture of experts) with their real widths, heads, linear-attention heads and expert sizes,
fewer layers (keeping three Gated DeltaNet layers to each full-attention one) and, for the MoE,
optionally fewer experts. The tokenizer is the real Qwen3.5 vocabulary (llama.cpp's
ggml-vocab-qwen35.gguf, scripts/fetch-llama-vocab.sh) and the chat template Qwen3.5's, so
llama.cpp and Hearth load it as a Qwen3.5 file. Written in F16 as llama.cpp's converter writes
`qwen35` / `qwen35moe` (norms stored as 1 + w, A as -exp(A_log)); quantize it with llama-quantize.

    python3 benches/hybrid_gguf.py --shape 9b --layers 4 --vocab-from ggml-vocab-qwen35.gguf \\
        --template Qwen3.5-4B.jinja out.gguf

`--shape tiny` makes instead a model of about 3 MB whose matrices all have rows of 256 values, so
that llama-quantize gives them K-quants (the test fixture of
crates/engine/tests/fixtures/gguf_hybrid_golden.sh), in F32; take its vocabulary from a tiny
fixture (`--vocab-from crates/engine/tests/fixtures/gguf/tiny-qwen3.5-f32.gguf`).

Needs numpy and llama.cpp's gguf-py on PYTHONPATH (benches/hybrid-side-by-side.sh sets both up).
"""
import argparse

import gguf
import numpy as np

# config.json of Qwen/Qwen3.5-9B and Qwen/Qwen3.5-35B-A3B (text part).
SHAPES = {
    "9b": dict(arch="qwen35", hidden=4096, heads=16, kv_heads=4, head_dim=256, ffn=12288,
               k_heads=16, v_heads=32, state=128, experts=0),
    "35b-a3b": dict(arch="qwen35moe", hidden=2048, heads=16, kv_heads=2, head_dim=256, ffn=0,
                    k_heads=16, v_heads=32, state=128, experts=256, top_k=8, expert_ffn=512,
                    shared_ffn=512),
    # Rows of 256 everywhere (K-quant blocks); two value heads per key head.
    "tiny": dict(arch="qwen35", hidden=256, heads=2, kv_heads=1, head_dim=128, ffn=512,
                 k_heads=2, v_heads=4, state=64, experts=0),
}
CONTEXT, ROPE_THETA, EPS, CONV = 262144, 10_000_000.0, 1e-6, 4


def copy_tokenizer(src, w):
    vocab = None
    for field in src.fields.values():
        if not field.name.startswith("tokenizer.") or field.name == "tokenizer.chat_template":
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
    return vocab


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--shape", choices=list(SHAPES), default="9b")
    ap.add_argument("--vocab-from", required=True, help="ggml-vocab-qwen35.gguf")
    ap.add_argument("--template", required=True, help="Qwen3.5's chat template (.jinja)")
    ap.add_argument("--layers", type=int, default=4, help="a multiple of 4 keeps the 3:1 pattern")
    ap.add_argument("--experts", type=int, help="experts per MoE layer (default: the real count)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    c = SHAPES[a.shape]
    experts = a.experts or c["experts"]
    hidden, heads, kvh, hd = c["hidden"], c["heads"], c["kv_heads"], c["head_dim"]
    kh, vh, st = c["k_heads"], c["v_heads"], c["state"]
    conv_dim = 2 * kh * st + vh * st

    w = gguf.GGUFWriter(a.out, c["arch"])
    w.add_name(f"qwen3.5-{a.shape}-shaped-random")
    w.add_block_count(a.layers)
    w.add_context_length(512 if a.shape == "tiny" else CONTEXT)
    w.add_embedding_length(hidden)
    if c["ffn"]:
        w.add_feed_forward_length(c["ffn"])
    w.add_head_count(heads)
    w.add_head_count_kv(kvh)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(ROPE_THETA)
    w.add_rope_dimension_count(hd // 4)
    w.add_rope_dimension_sections([11, 11, 10, 0])
    w.add_layer_norm_rms_eps(EPS)
    w.add_ssm_conv_kernel(CONV)
    w.add_ssm_state_size(st)
    w.add_ssm_group_count(kh)
    w.add_ssm_time_step_rank(vh)
    w.add_ssm_inner_size(vh * st)
    w.add_full_attention_interval(4)
    if experts:
        w.add_expert_count(experts)
        w.add_expert_used_count(c["top_k"])
        w.add_expert_feed_forward_length(c["expert_ffn"])
        w.add_expert_shared_feed_forward_length(c["shared_ffn"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if a.shape == "tiny" else gguf.LlamaFileType.MOSTLY_F16)
    vocab = copy_tokenizer(gguf.GGUFReader(a.vocab_from), w)
    if vocab is None:
        raise SystemExit(f"{a.vocab_from}: no tokenizer.ggml.tokens")
    w.add_chat_template(open(a.template).read())

    rng = np.random.default_rng(a.seed)
    tiny = a.shape == "tiny"
    scale, dtype = (0.04, np.float32) if tiny else (0.02, np.float16)

    def rand(*shape, scale=scale):
        return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(dtype)

    def f32(*shape, mean=0.0, scale=0.1):
        return (mean + scale * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)

    w.add_tensor("token_embd.weight", rand(vocab, hidden))
    w.add_tensor("output_norm.weight", f32(hidden, mean=1.0))
    w.add_tensor("output.weight", rand(vocab, hidden))
    for i in range(a.layers):
        b = f"blk.{i}"
        w.add_tensor(f"{b}.attn_norm.weight", f32(hidden, mean=1.0))
        w.add_tensor(f"{b}.post_attention_norm.weight", f32(hidden, mean=1.0))
        if (i + 1) % 4:
            w.add_tensor(f"{b}.attn_qkv.weight", rand(conv_dim, hidden))
            w.add_tensor(f"{b}.attn_gate.weight", rand(vh * st, hidden))
            w.add_tensor(f"{b}.ssm_beta.weight", rand(vh, hidden))
            w.add_tensor(f"{b}.ssm_alpha.weight", rand(vh, hidden))
            w.add_tensor(f"{b}.ssm_conv1d.weight", f32(conv_dim, CONV, scale=0.3))
            w.add_tensor(f"{b}.ssm_dt.bias", f32(vh))
            w.add_tensor(f"{b}.ssm_a", -np.exp(f32(vh)))
            w.add_tensor(f"{b}.ssm_norm.weight", f32(st, mean=1.0))
            w.add_tensor(f"{b}.ssm_out.weight", rand(hidden, vh * st))
        else:
            w.add_tensor(f"{b}.attn_q.weight", rand(2 * heads * hd, hidden))
            w.add_tensor(f"{b}.attn_k.weight", rand(kvh * hd, hidden))
            w.add_tensor(f"{b}.attn_v.weight", rand(kvh * hd, hidden))
            w.add_tensor(f"{b}.attn_output.weight", rand(hidden, heads * hd))
            w.add_tensor(f"{b}.attn_q_norm.weight", f32(hd, mean=1.0))
            w.add_tensor(f"{b}.attn_k_norm.weight", f32(hd, mean=1.0))
        if experts:
            e, f, s = experts, c["expert_ffn"], c["shared_ffn"]
            # The routers stay f32, as llama.cpp's converter and quantizer keep them.
            w.add_tensor(f"{b}.ffn_gate_inp.weight", f32(e, hidden, scale=0.5))
            w.add_tensor(f"{b}.ffn_gate_exps.weight", rand(e, f, hidden))
            w.add_tensor(f"{b}.ffn_up_exps.weight", rand(e, f, hidden))
            w.add_tensor(f"{b}.ffn_down_exps.weight", rand(e, hidden, f))
            w.add_tensor(f"{b}.ffn_gate_inp_shexp.weight", f32(1, hidden, scale=0.5))
            w.add_tensor(f"{b}.ffn_gate_shexp.weight", rand(s, hidden))
            w.add_tensor(f"{b}.ffn_up_shexp.weight", rand(s, hidden))
            w.add_tensor(f"{b}.ffn_down_shexp.weight", rand(hidden, s))
        else:
            w.add_tensor(f"{b}.ffn_gate.weight", rand(c["ffn"], hidden))
            w.add_tensor(f"{b}.ffn_up.weight", rand(c["ffn"], hidden))
            w.add_tensor(f"{b}.ffn_down.weight", rand(hidden, c["ffn"]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {a.out}: {a.shape}-shaped, {a.layers} layers, {experts or 'no'} experts, vocabulary {vocab}")


if __name__ == "__main__":
    main()
