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
from transformers import Qwen2Config, Qwen2ForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")

# Qwen2.5 shapes (config.json of Qwen/Qwen2.5-0.5B-Instruct and Qwen/Qwen2.5-7B-Instruct);
# "tiny" exercises the script quickly on a CPU.
SHAPES = {
    "tiny": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=151936,
                 tie_word_embeddings=True),
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                 tie_word_embeddings=True),
    "7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
               num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
               tie_word_embeddings=False),
}


def log(*a):
    print("[gpu-check]", *a, file=sys.stderr, flush=True)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def hearth(args, *cmd):
    """Runs the hearth binary; returns (exit code, stdout, stderr)."""
    p = subprocess.run([args.hearth, *cmd], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def parity(args):
    results = []
    for family, fixture in (("qwen2", "tiny-qwen2"), ("qwen3", "tiny-qwen3")):
        for dtype in ("bf16", "f32"):
            rc, out, err = hearth(args, "parity", "--model", os.path.join(FIXTURES, fixture),
                                  "--golden", os.path.join(FIXTURES, "golden", f"{fixture}.json"),
                                  "--device", args.device, "--dtype", dtype)
            try:
                report = json.loads(out)
            except json.JSONDecodeError:
                report = {"pass": False, "error": err.strip()[-2000:]}
            report["family"] = family
            results.append(report)
            log(f"parity {family} {dtype}: {'pass' if report.get('pass') else 'FAIL'}")
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


def make_checkpoint(shape, path, device):
    cfg = Qwen2Config(**SHAPES[shape], max_position_embeddings=32768, rope_theta=1000000.0,
                      rms_norm_eps=1e-6, torch_dtype="bfloat16", bos_token_id=151643,
                      eos_token_id=151645)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.eval()
    model.save_pretrained(path, safe_serialization=True)
    # The bench feeds token ids directly; any tokenizer satisfies the loader.
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(FIXTURES, "tiny-qwen2", f), path)
    return model, cfg


def weight_bytes_per_token(cfg, params):
    """Bytes of bf16 weights one decode step reads: all of them, except an untied input
    embedding, of which it reads one row."""
    embed = cfg.vocab_size * cfg.hidden_size
    return 2 * (params - (0 if cfg.tie_word_embeddings else embed))


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hearth", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shapes", default="0.5b,7b")
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--concurrency", default="1,8,32", help="concurrent requests for the batched bench")
    ap.add_argument("--work", default=None, help="where the checkpoints go (default: a temp dir)")
    args = ap.parse_args()
    device = torch.device("cuda" if args.device.startswith("cuda") else "cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu-check: --device cuda, but PyTorch sees no CUDA device")
    work = args.work or os.path.join("/tmp", f"hearth-gpu-check-{os.getpid()}")
    os.makedirs(work, exist_ok=True)

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
    report["parity"] = parity(args)
    bw = copy_bandwidth(device)
    report["copy_bandwidth_gb_s"] = bw / 1e9
    log(f"copy bandwidth {bw / 1e9:.0f} GB/s")

    report["models"] = []
    for shape in [s for s in args.shapes.split(",") if s]:
        if shape not in SHAPES:
            sys.exit(f"gpu-check: unknown shape {shape!r} (known: {', '.join(SHAPES)})")
        path = os.path.join(work, f"qwen2.5-{shape}-random-bf16")
        log(f"{shape}: creating {path}")
        model, cfg = make_checkpoint(shape, path, device)
        params = sum(p.numel() for p in model.parameters())
        bytes_per_token = weight_bytes_per_token(cfg, params)
        log(f"{shape}: transformers greedy generation, {args.gen} tokens")
        hf_tps = transformers_decode(model, cfg, device, args.gen)
        del model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        log(f"{shape}: hearth bench")
        rc, out, err = hearth(args, "bench", "-m", path, "--device", args.device, "--dtype", "bf16",
                              "-p", str(args.prompt), "-n", str(args.gen), "-r", str(args.reps),
                              "--json")
        entry = {"shape": shape, "params": params, "weight_bytes_per_token": bytes_per_token,
                 "transformers_decode_tok_s": hf_tps,
                 "transformers_roofline": hf_tps * bytes_per_token / bw}
        if rc != 0:
            entry["hearth_error"] = err.strip()[-2000:]
            log(f"{shape}: hearth bench FAILED: {err.strip()[-300:]}")
        else:
            records = json.loads(out)
            entry["hearth_bench"] = records
            decode = next((r for r in records if r["n_gen"] > 0), None)
            prefill = next((r for r in records if r["n_prompt"] > 0), None)
            if decode:
                tps = decode["avg_ts"]
                entry["hearth_decode_tok_s"] = tps
                entry["hearth_roofline"] = tps * bytes_per_token / bw
                entry["hearth_over_transformers"] = tps / hf_tps
            if prefill:
                entry["hearth_prefill_tok_s"] = prefill["avg_ts"]
            log(f"{shape}: hearth {entry.get('hearth_decode_tok_s', 0):.1f} tok/s "
                f"({100 * entry.get('hearth_roofline', 0):.0f} % of roofline), transformers "
                f"{hf_tps:.1f} tok/s")
        # Many requests at once through the scheduler: aggregate decode tok/s at B = 1, 8, 32.
        log(f"{shape}: hearth bench --concurrency {args.concurrency}")
        rc, out, err = hearth(args, "bench", "-m", path, "--device", args.device, "--dtype", "bf16",
                              "--concurrency", args.concurrency, "-p", "32", "-n", str(args.gen),
                              "-r", "1", "--json")
        if rc != 0:
            entry["hearth_batched_error"] = err.strip()[-2000:]
            log(f"{shape}: hearth bench --concurrency FAILED: {err.strip()[-300:]}")
        else:
            rows = json.loads(out)
            entry["hearth_batched"] = rows
            one = next((r["s_tg"] for r in rows if r["b"] == 1), None)
            for r in rows:
                if one:
                    r["s_tg_over_b1"] = r["s_tg"] / one
                log(f"{shape}: B={r['b']}: {r['s_tg']:.1f} generated tok/s"
                    + (f" ({r['s_tg_over_b1']:.1f}x B=1)" if one else ""))
        report["models"].append(entry)
        if not args.work:
            shutil.rmtree(path, ignore_errors=True)

    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    log(f"wrote {args.out}")
    ok = all(p.get("pass") for p in report["parity"]) and all(
        "hearth_error" not in m for m in report["models"])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
