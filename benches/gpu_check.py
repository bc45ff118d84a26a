"""The body of benches/gpu-check.sh (see there). Needs PyTorch and transformers; no network."""

import argparse
import datetime
import gc
import json
import os
import shutil
import subprocess
import sys
import time

import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "crates", "engine", "tests", "fixtures")
QWEN35_LAYERS = lambda n: ["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(n)]

# Shapes of released checkpoints (their config.json), some cut to fewer layers so that making
# them here stays quick; "tiny" exercises the script quickly on a CPU. Each: (transformers
# class, config class, config).
SHAPES = {
    "tiny": ("Qwen2ForCausalLM", "Qwen2Config",
             dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=151936,
                  tie_word_embeddings=True)),
    # Qwen/Qwen2.5-0.5B-Instruct and Qwen/Qwen2.5-7B-Instruct.
    "0.5b": ("Qwen2ForCausalLM", "Qwen2Config",
             dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                  tie_word_embeddings=True)),
    "7b": ("Qwen2ForCausalLM", "Qwen2Config",
           dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                tie_word_embeddings=False)),
    # Qwen/Qwen3-30B-A3B's layers (128 experts, 8 routed per token), 8 of its 48.
    "30b-a3b-8l": ("Qwen3MoeForCausalLM", "Qwen3MoeConfig",
                   dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=8,
                        num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                        num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
                        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                        vocab_size=151936, tie_word_embeddings=False)),
    # Qwen3.5-9B's text layers (three Gated DeltaNet layers, then gated attention), 8 of its 32.
    "qwen3.5-9b-8l": ("Qwen3_5ForCausalLM", "Qwen3_5TextConfig",
                      dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=8,
                           num_attention_heads=16, num_key_value_heads=4, head_dim=256,
                           linear_conv_kernel_dim=4, linear_key_head_dim=128,
                           linear_value_head_dim=128, linear_num_key_heads=16,
                           linear_num_value_heads=32, layer_types=QWEN35_LAYERS(8),
                           vocab_size=248320, tie_word_embeddings=False)),
}
# (fixture, golden) pairs `hearth parity` checks, each in bf16 and f32.
PARITY = ("tiny-qwen2", "tiny-qwen3", "tiny-qwen3-moe", "tiny-qwen3.5", "tiny-qwen3.5-moe")
# Quantized GGUF fixtures: greedy tokens on the device against the CPU's.
GGUF = ("tiny-qwen3.5-q4_k_m", "tiny-qwen3.5-q8_0", "tiny-qwen3-moe-q4_k_m", "tiny-qwen3-moe-q8_0")


def log(*a):
    print("[gpu-check]", *a, file=sys.stderr, flush=True)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def hearth(args, *cmd, timeout=180):
    """Runs the hearth binary; returns (exit code, stdout, stderr)."""
    try:
        p = subprocess.run([args.hearth, *cmd], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return 124, "", f"timed out after {timeout} s: {(e.stderr or b'')[-1000:]!r}"
    return p.returncode, p.stdout, p.stderr


def parity(args):
    results = []
    for fixture in PARITY:
        for dtype in ("bf16", "f32"):
            rc, out, err = hearth(args, "parity", "--model", os.path.join(FIXTURES, fixture),
                                  "--golden", os.path.join(FIXTURES, "golden", f"{fixture}.json"),
                                  "--device", args.device, "--dtype", dtype)
            try:
                report = json.loads(out)
            except json.JSONDecodeError:
                report = {"pass": False, "error": err.strip()[-2000:]}
            report["fixture"] = fixture
            results.append(report)
            log(f"parity {fixture} {dtype}: {'pass' if report.get('pass') else 'FAIL'}")
    return results


def gguf_tokens(args):
    """Greedy text of each quantized GGUF fixture on the device and on the CPU."""
    results = []
    for name in GGUF:
        path = os.path.join(FIXTURES, "gguf", f"{name}.gguf")
        texts = {}
        for dev in (args.device, "cpu"):
            rc, out, err = hearth(args, "run", "--model", path, "--device", dev, "--temperature",
                                  "0", "--max-tokens", "32", "--speculative", "off", "-q",
                                  "Once upon a time")
            texts[dev] = out if rc == 0 else f"error: {err.strip()[-500:]}"
        a, b = texts[args.device], texts["cpu"]
        same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        entry = {"gguf": name, "device_text": a, "cpu_text": b, "identical": a == b,
                 "matching_chars": same}
        results.append(entry)
        log(f"gguf {name}: device {'=' if a == b else '!='} cpu (first {same} chars agree)")
    return results


def copy_bandwidth(device):
    """Bytes per second of a device-to-device copy, counting the read and the write."""
    n = (1 << 30) if device.type == "cuda" else (1 << 28)
    a = torch.empty(n, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    sync(device)
    reps = 20 if device.type == "cuda" else 5
    t = time.perf_counter()
    for _ in range(reps):
        b.copy_(a)
    sync(device)
    secs = (time.perf_counter() - t) / reps
    del a, b
    return 2 * n / secs


def make_checkpoint(shape, path, device, tokenizer):
    cls, cfg_cls, conf = SHAPES[shape]
    conf = dict(conf, max_position_embeddings=32768, rms_norm_eps=1e-6,
                bos_token_id=151643, eos_token_id=151645)
    if cfg_cls == "Qwen3_5TextConfig":
        conf["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000000.0,
                                   "partial_rotary_factor": 0.25}
    else:
        conf["rope_theta"] = 1000000.0
    cfg = getattr(transformers, cfg_cls)(**conf)
    cfg.torch_dtype = torch.bfloat16
    torch.manual_seed(0)
    with torch.device(device):
        model = getattr(transformers, cls)(cfg).to(torch.bfloat16)
    model.eval()
    model.save_pretrained(path, safe_serialization=True)
    # The bench feeds token ids directly; the tokenizer only satisfies the loader (and the GGUF
    # converter, which wants a real Qwen one: --tokenizer).
    tok = tokenizer or os.path.join(FIXTURES, "tiny-qwen2")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tok, f), path)
    return model, cfg


def weight_bytes_per_token(model, cfg):
    """Bytes of bf16 weights one decode step reads: all, except an untied input embedding (one
    row of it) and the experts a token is not routed to."""
    total = 0
    experts = getattr(cfg, "num_experts", 0) or 0
    for name, p in model.named_parameters():
        n = p.numel()
        if name.endswith("embed_tokens.weight") and not cfg.tie_word_embeddings:
            continue
        if experts and ".experts" in name:
            n = n * cfg.num_experts_per_tok / experts
        total += n
    return 2 * total


def transformers_decode(model, cfg, device, gen, prompt_len=32):
    """Greedy generation with transformers (PyTorch eager, no compilation): decode tokens/s."""
    ids = torch.randint(0, cfg.vocab_size, (1, prompt_len), device=device,
                        generator=torch.Generator(device=device).manual_seed(0))

    def run(n):
        sync(device)
        t = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                           min_new_tokens=n, do_sample=False, pad_token_id=0)
        sync(device)
        return time.perf_counter() - t

    run(2)  # warm-up
    first = min(run(1) for _ in range(2))  # prefill and one token
    total = run(gen)
    return (gen - 1) / max(total - first, 1e-9)


def bench(args, path, entry, bytes_per_token, bw, tag="", dtype="bf16"):
    """hearth bench on one checkpoint: prefill and decode, then B requests at once."""
    common = ["-m", path, "--device", args.device, "--dtype", dtype, "--speculative", "off"]
    rc, out, err = hearth(args, "bench", *common, "-p", str(args.prompt), "-n", str(args.gen),
                          "-r", str(args.reps), "--json")
    if rc != 0:
        entry[f"hearth{tag}_error"] = err.strip()[-2000:]
        log(f"{entry['shape']}{tag}: hearth bench FAILED: {err.strip()[-300:]}")
        return
    records = json.loads(out)
    entry[f"hearth{tag}_bench"] = records
    decode = next((r for r in records if r["n_gen"] > 0), None)
    prefill = next((r for r in records if r["n_prompt"] > 0), None)
    if decode:
        tps = decode["avg_ts"]
        entry[f"hearth{tag}_decode_tok_s"] = tps
        if bytes_per_token:
            entry[f"hearth{tag}_roofline"] = tps * bytes_per_token / bw
        if entry.get("transformers_decode_tok_s"):
            entry[f"hearth{tag}_over_transformers"] = tps / entry["transformers_decode_tok_s"]
    if prefill:
        entry[f"hearth{tag}_prefill_tok_s"] = prefill["avg_ts"]
    log(f"{entry['shape']}{tag}: hearth decode {entry.get(f'hearth{tag}_decode_tok_s', 0):.1f} "
        f"tok/s, prefill {entry.get(f'hearth{tag}_prefill_tok_s', 0):.0f} tok/s")
    # Many requests at once through the scheduler: aggregate decode tok/s.
    rc, out, err = hearth(args, "bench", *common, "--concurrency", args.concurrency, "-p", "32",
                          "-n", str(args.gen), "-r", "1", "--json")
    if rc != 0:
        entry[f"hearth{tag}_batched_error"] = err.strip()[-2000:]
        log(f"{entry['shape']}{tag}: hearth bench --concurrency FAILED: {err.strip()[-300:]}")
        return
    rows = json.loads(out)
    entry[f"hearth{tag}_batched"] = rows
    one = next((r["s_tg"] for r in rows if r["b"] == 1), None)
    for r in rows:
        if one:
            r["s_tg_over_b1"] = r["s_tg"] / one
        log(f"{entry['shape']}{tag}: B={r['b']}: {r['s_tg']:.1f} generated tok/s"
            + (f" ({r['s_tg_over_b1']:.1f}x B=1)" if one else ""))


def q8_0_gguf(args, path):
    """The checkpoint as a Q8_0 GGUF, by llama.cpp's converter where it travelled here."""
    llama = args.llama_cpp
    if not llama or not os.path.isfile(os.path.join(llama, "convert_hf_to_gguf.py")):
        return None, "no llama.cpp source tree (--llama-cpp or LLAMA_CPP) with convert_hf_to_gguf.py"
    out = path + "-q8_0.gguf"
    env = dict(os.environ, LLAMA_CPP=llama)
    try:
        p = subprocess.run([sys.executable, os.path.join(FIXTURES, "gguf_convert.py"), path,
                            "--outtype", "q8_0", "--outfile", out], capture_output=True,
                           text=True, env=env, timeout=150)
    except subprocess.TimeoutExpired:
        return None, "the converter timed out"
    if p.returncode != 0:
        return None, p.stderr.strip()[-1000:]
    return out, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hearth", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shapes", default="0.5b,qwen3.5-9b-8l,30b-a3b-8l,7b")
    ap.add_argument("--gguf-shapes", default="0.5b", help="shapes also benched as a Q8_0 GGUF")
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--concurrency", default="1,8,32", help="concurrent requests for the batched bench")
    ap.add_argument("--llama-cpp", default=os.environ.get("LLAMA_CPP"),
                    help="llama.cpp's source tree, whose converter makes the Q8_0 GGUFs")
    ap.add_argument("--tokenizer", default=None,
                    help="a folder with a Qwen tokenizer.json and tokenizer_config.json for the "
                         "random checkpoints (default: the tiny fixture's)")
    ap.add_argument("--work", default=None, help="where the checkpoints go (default: a temp dir)")
    args = ap.parse_args()
    device = torch.device("cuda" if args.device.startswith("cuda") else "cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu-check: --device cuda, but PyTorch sees no CUDA device")
    work = args.work or os.path.join("/tmp", f"hearth-gpu-check-{os.getpid()}")
    os.makedirs(work, exist_ok=True)
    shapes = [s for s in args.shapes.split(",") if s]
    for s in shapes:
        if s not in SHAPES:
            sys.exit(f"gpu-check: unknown shape {s!r} (known: {', '.join(SHAPES)})")

    rc, version, err = hearth(args, "--version")
    if rc != 0:
        sys.exit(f"gpu-check: {args.hearth} does not start: {err.strip()}")
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hearth": version.strip(),
        "device": args.device,
        "device_name": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }

    def save():
        # Written after every part, so that a run cut short keeps what it measured.
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)

    t0 = time.perf_counter()
    report["parity"] = parity(args)
    save()
    report["gguf_fixtures"] = gguf_tokens(args)
    save()
    bw = copy_bandwidth(device)
    report["copy_bandwidth_gb_s"] = bw / 1e9
    log(f"copy bandwidth {bw / 1e9:.0f} GB/s ({time.perf_counter() - t0:.0f} s so far)")

    report["models"] = []
    for shape in shapes:
        path = os.path.join(work, f"{shape}-random-bf16")
        log(f"{shape}: creating {path}")
        entry = {"shape": shape}
        report["models"].append(entry)
        try:
            model, cfg = make_checkpoint(shape, path, device, args.tokenizer)
        except Exception as e:  # a transformers without this class: report, go on
            entry["checkpoint_error"] = repr(e)[-1000:]
            log(f"{shape}: no checkpoint: {e!r}"[:300])
            save()
            continue
        entry["params"] = sum(p.numel() for p in model.parameters())
        bytes_per_token = weight_bytes_per_token(model, cfg)
        entry["weight_bytes_per_token"] = bytes_per_token
        log(f"{shape}: transformers greedy generation, {args.gen} tokens")
        try:
            hf_tps = transformers_decode(model, cfg, device, args.gen)
            entry["transformers_decode_tok_s"] = hf_tps
            entry["transformers_roofline"] = hf_tps * bytes_per_token / bw
            log(f"{shape}: transformers {hf_tps:.1f} tok/s")
        except Exception as e:
            entry["transformers_error"] = repr(e)[-1000:]
        del model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        bench(args, path, entry, bytes_per_token, bw)
        save()
        if shape in args.gguf_shapes.split(","):
            gguf, why = q8_0_gguf(args, path)
            if gguf:
                # Q8_0: 34 bytes per 32 weights where bf16 has 64.
                bench(args, gguf, entry, bytes_per_token * 34 / 64, bw, tag="_q8_0", dtype="auto")
            else:
                entry["q8_0_error"] = why
                log(f"{shape}: no Q8_0 GGUF: {why[-300:]}")
            save()
        if not args.work:
            shutil.rmtree(path, ignore_errors=True)
            for f in os.listdir(work):
                if f.startswith(os.path.basename(path)):
                    os.remove(os.path.join(work, f))
        log(f"{shape}: done ({time.perf_counter() - t0:.0f} s so far)")

    save()
    log(f"wrote {args.out}")
    ok = all(p.get("pass") for p in report["parity"]) and all(
        "hearth_error" not in m for m in report["models"])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
