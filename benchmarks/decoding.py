"""Greedy decoding with and without the key–value cache; cache bytes of MHA, GQA and MQA; reversal accuracy.

    .venv/bin/python benchmarks/decoding.py                  # CUDA when present, else the CPU
    .venv/bin/python benchmarks/decoding.py --lengths 64 512 --device cpu

It measures, in one run (chapter 8, fast inference, on chapter 7's model):

1. Time per generated token of the reference ``greedy_decode`` on a ``TinyDecoder``
   (``--hiddens`` 256, ``--heads`` 8, ``--layers`` 4, one sequence, eval mode, no grad) with
   ``use_cache=True`` and ``use_cache=False``. For each total length L the prompt is
   L − ``--new-tokens`` random tokens and decoding runs up to L. The first step (the pass
   over the whole prompt, the "prefill") is timed apart; "ms/token" is the mean over the
   remaining steps, the same tokens both ways (sequence lengths L − new + 1 … L − 1), so it
   is the cost of one token at length ≈ L. Median of ``--repeats`` runs after a warm-up,
   cached and uncached runs taken in turns.
2. Bytes of the key–value cache at ``--cache-len`` positions for MHA (one key/value head per
   query head), GQA (``--gqa-kv-heads``) and MQA (one), at equal model width: computed with
   ``kv_cache_bytes`` and measured from the cache tensors the model returns (Σ numel ·
   element_size), and the ratio MHA / each, which must be ``num_heads / num_kv_heads`` exactly.
3. ``train_reversal_decoder`` with 4 (MHA: its model has 4 heads), 2 and 1 key/value heads:
   greedy accuracy and training seconds (always on the CPU: the function trains there).

Goal (issue: chapter 7, now 8), checked on the CPU and printed: cached decoding at least 5× faster
per token than recomputation at L = 512. On CUDA the same table is printed, without a goal.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from fractions import Fraction
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from autograder.ch07_decoding import TinyDecoder
from autograder.reference.ch07_decoding import train_reversal_decoder
from autograder.reference.ch08_fast_inference import greedy_decode, kv_cache_bytes

SPEED_GOAL, GOAL_LENGTH, VOCAB = 5.0, 512, 1000


class _Clocked(torch.nn.Module):
    """Wraps a model; records when the second call (the first cached step) starts."""

    def __init__(self, model: torch.nn.Module, device: torch.device):
        super().__init__()
        self.model, self.device, self.calls, self.second = model, device, 0, 0.0

    def forward(self, tokens, cache=None):
        if self.calls == 1:
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            self.second = time.perf_counter()
        self.calls += 1
        return self.model(tokens, cache)


def decode_times(model, prompt: torch.Tensor, new: int, use_cache: bool, device: torch.device) -> tuple[float, float]:
    """``(prefill seconds, seconds per token after the first)`` of one ``greedy_decode``."""
    clocked = _Clocked(model, device)
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    greedy_decode(clocked, prompt, new, use_cache=use_cache)
    if device.type == "cuda":
        torch.cuda.synchronize()
    ended = time.perf_counter()
    return clocked.second - started, (ended - clocked.second) / (new - 1)


def median_times(model, prompt, new, device, repeats) -> dict:
    """Medians of cached and uncached runs, taken in turns so that a busy machine slows both alike."""
    runs = {True: [], False: []}
    for repeat in range(repeats + 1):  # the first round warms up
        for use_cache in (True, False):
            times = decode_times(model, prompt, new, use_cache, device)
            if repeat:
                runs[use_cache].append(times)
    return {"prefill": statistics.median(r[0] for r in runs[True]),
            "cached": statistics.median(r[1] for r in runs[True]),
            "full": statistics.median(r[1] for r in runs[False])}


def speed(device: torch.device, args) -> list[dict]:
    torch.manual_seed(0)
    model = TinyDecoder(VOCAB, args.hiddens, args.heads, args.layers, max(args.lengths)).to(device).eval()
    print(f"\n1. time per token, TinyDecoder(vocab={VOCAB}, num_hiddens={args.hiddens}, num_heads={args.heads}, "
          f"num_layers={args.layers}), batch 1, float32; prompt = L - {args.new_tokens} tokens, decoded up to L; "
          f"ms/token over the last {args.new_tokens - 1} tokens (prefill apart); median of {args.repeats}")
    print(f"{'L':>5} | {'prefill ms':>10} | {'cached ms/tok':>13} {'no-cache ms/tok':>15} | {'ratio':>6}")
    rows = []
    with torch.no_grad():
        for length in args.lengths:
            g = torch.Generator().manual_seed(length)
            prompt = torch.randint(0, VOCAB, (1, length - args.new_tokens), generator=g).to(device)
            row = {"L": length, **median_times(model, prompt, args.new_tokens, device, args.repeats)}
            rows.append(row)
            print(f"{length:>5} | {row['prefill'] * 1e3:>10.2f} | {row['cached'] * 1e3:>13.3f} "
                  f"{row['full'] * 1e3:>15.3f} | {row['full'] / row['cached']:>5.1f}x", flush=True)
    at_goal = [r for r in rows if r["L"] == GOAL_LENGTH]
    for row in at_goal:
        ratio = row["full"] / row["cached"]
        if device.type == "cpu":
            print(f"goal, L = {GOAL_LENGTH}: cached {ratio:.1f}x faster than recomputation (at least "
                  f"{SPEED_GOAL:g}x): {'met' if ratio >= SPEED_GOAL else 'NOT met'}")
        else:
            print(f"L = {GOAL_LENGTH}: cached {ratio:.1f}x faster than recomputation (the goal is set on the CPU)")
    return rows


def cache_sizes(device: torch.device, args) -> bool:
    """Print computed and measured cache bytes; return whether every ratio is exact."""
    head_dim = args.hiddens // args.heads
    print(f"\n2. key-value cache at {args.cache_len} positions, batch 1, num_hiddens={args.hiddens}, "
          f"num_heads={args.heads}, head_dim={head_dim}, num_layers={args.layers}; measured: Σ numel·element_size "
          f"of the float32 cache a TinyDecoder returns; kv_cache_bytes with bytes_per_value=4 (and its default 2)")
    print(f"{'':>4} {'kv heads':>8} | {'kv_cache_bytes':>14} {'measured':>10} {'fp16 (default)':>14} | "
          f"{'MHA / this':>10} {'heads/kv':>8} | exact")
    tokens = torch.randint(0, VOCAB, (1, args.cache_len), generator=torch.Generator().manual_seed(1)).to(device)
    mha_bytes, all_exact = None, True
    for name, kv in (("MHA", args.heads), ("GQA", args.gqa_kv_heads), ("MQA", 1)):
        torch.manual_seed(0)
        model = TinyDecoder(VOCAB, args.hiddens, args.heads, args.layers, args.cache_len, num_kv_heads=kv)
        with torch.no_grad():
            _, cache = model.to(device).eval()(tokens)
        measured = sum(t.numel() * t.element_size() for pair in cache for t in pair)
        computed = kv_cache_bytes(args.layers, kv, head_dim, args.cache_len, bytes_per_value=4)
        half = kv_cache_bytes(args.layers, kv, head_dim, args.cache_len)
        mha_bytes = mha_bytes or measured
        ratio, expected = Fraction(mha_bytes, measured), Fraction(args.heads, kv)
        exact = ratio == expected and computed == measured and Fraction(mha_bytes // 2, half) == expected
        all_exact &= exact
        print(f"{name:>4} {kv:>8} | {computed:>14,} {measured:>10,} {half:>14,} | {str(ratio):>10} "
              f"{str(expected):>8} | {'yes' if exact else 'NO'}")
    print(f"cache ratio MHA / (GQA, MQA) exactly num_heads / num_kv_heads, computed = measured: "
          f"{'met' if all_exact else 'NOT met'}")
    return all_exact


def reversal(args) -> None:
    print(f"\n3. reversal decoder, train_reversal_decoder(seed=0, steps={args.steps}) on the CPU "
          f"({torch.get_num_threads()} threads); accuracy over 1000 fresh prompts")
    print(f"{'':>4} {'kv heads':>8} | {'accuracy':>8} | {'train s':>7}")
    for name, kv in (("MHA", 4), ("GQA", 2), ("MQA", 1)):
        started = time.perf_counter()
        _, accuracy = train_reversal_decoder(seed=0, steps=args.steps, num_kv_heads=kv)
        print(f"{name:>4} {kv:>8} | {accuracy:>8.3f} | {time.perf_counter() - started:>7.1f}", flush=True)


def device_words(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (CUDA)"
    model = "unknown CPU"
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    return f"CPU {model}, {os.cpu_count()} cores, {torch.get_num_threads()} threads{load}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256, 512, 1024],
                        help="total lengths L, prompt plus generated tokens")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens generated up to each L (at least 2)")
    parser.add_argument("--hiddens", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cache-len", type=int, default=1024)
    parser.add_argument("--gqa-kv-heads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=150, help="training steps of each reversal decoder")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's own)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    if args.new_tokens < 2 or min(args.lengths) <= args.new_tokens:
        parser.error("--new-tokens must be at least 2 and below every length")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"{device_words(device)}; torch {torch.__version__}", flush=True)
    speed(device, args)
    if hasattr(os, "getloadavg"):
        print(f"(load average after the timings: {os.getloadavg()[0]:.1f}; above {os.cpu_count()} the CPU is shared "
              "and the times are noisy)")
    exact = cache_sizes(device, args)
    reversal(args)
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
