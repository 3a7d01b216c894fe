"""Time and peak memory of naive, chunked and PyTorch's fused attention as the length grows.

    .venv/bin/python benchmarks/attention.py                 # CPU, and CUDA when present
    .venv/bin/python benchmarks/attention.py --sizes 512 1024 --device cpu

For each length N (queries = keys = values = N tokens of width d = 64, one sequence) it
measures, in one run:

* ``naive``: ``softmax(Q Kᵀ / √d) V`` written out, which holds the (N, N) score matrix;
* ``chunked``: the course's ``chunked_attention`` (online softmax, ``--chunk-size`` keys at a time);
* ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention``, PyTorch's fused kernel;

the median wall time of ``--repeats`` runs after one warm-up, and the peak bytes of the
tensors each creates and holds at once (on CUDA: ``torch.cuda.max_memory_allocated`` above
the inputs). Goals (chapter 6, issue 11), checked at the largest N and printed at the end:
chunked peak memory at most 1/8 of naive's; chunked time within 3× of sdpa's on the CPU.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from autograder.kernel.measure import peak_memory
from autograder.reference.ch06_transformer import chunked_attention

MEMORY_GOAL, TIME_GOAL = 1 / 8, 3.0


def naive_attention(queries, keys, values):
    """``softmax(Q Kᵀ / √d) V`` with the whole ``(..., q, k)`` score matrix in memory."""
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])  # (..., q, k)
    return torch.softmax(scores, dim=-1) @ values


def seconds(fn, args, repeats: int, device: torch.device) -> float:
    """Median wall time of ``fn(*args)`` over ``repeats`` runs, after one warm-up run."""
    def once() -> float:
        started = time.perf_counter()
        fn(*args)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - started

    once()
    return statistics.median(once() for _ in range(repeats))


def peak_bytes(fn, args, device: torch.device) -> int:
    """Peak bytes that ``fn(*args)`` allocates beyond its inputs."""
    if device.type != "cuda":
        return peak_memory(fn, *args)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn(*args)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated(device) - before


def measure(device: torch.device, sizes: list[int], width: int, chunk_size: int, repeats: int) -> list[dict]:
    kernels = {"naive": naive_attention, "chunked": lambda q, k, v: chunked_attention(q, k, v, chunk_size),
               "sdpa": F.scaled_dot_product_attention}
    rows = []
    for n in sizes:
        g = torch.Generator().manual_seed(n)
        # (1, N, d): one sequence, so that sdpa takes its batched fast path
        q, k, v = (torch.randn(1, n, width, generator=g).to(device) for _ in range(3))
        with torch.no_grad():
            row = {"N": n}
            for name, fn in kernels.items():
                row[f"{name}_s"] = seconds(fn, (q, k, v), repeats if n <= 2048 else max(1, repeats // 2), device)
                row[f"{name}_MiB"] = peak_bytes(fn, (q, k, v), device) / 2**20
            error = (kernels["chunked"](q, k, v) - F.scaled_dot_product_attention(q, k, v)).abs().max().item()
        row["max_abs_diff"] = error
        rows.append(row)
        print(_line(row), flush=True)
    return rows


HEADER = (f"{'N':>6} | {'naive s':>8} {'chunked s':>9} {'sdpa s':>8} | {'naive MiB':>9} {'chunked MiB':>11} "
          f"{'sdpa MiB':>8} | {'chunk/naive mem':>15} {'chunk/sdpa time':>15} | {'max |diff|':>10}")


def _line(row: dict) -> str:
    memory_ratio = row["chunked_MiB"] / row["naive_MiB"] if row["naive_MiB"] else float("nan")
    time_ratio = row["chunked_s"] / row["sdpa_s"]
    return (f"{row['N']:>6} | {row['naive_s']:>8.4f} {row['chunked_s']:>9.4f} {row['sdpa_s']:>8.4f} | "
            f"{row['naive_MiB']:>9.1f} {row['chunked_MiB']:>11.1f} {row['sdpa_MiB']:>8.1f} | "
            f"{memory_ratio:>15.3f} {time_ratio:>15.2f} | {row['max_abs_diff']:>10.2e}")


def goals(device: torch.device, rows: list[dict]) -> None:
    last = rows[-1]
    memory_ratio = last["chunked_MiB"] / last["naive_MiB"]
    print(f"goal, N = {last['N']}: chunked peak memory / naive = {memory_ratio:.3f} (at most {MEMORY_GOAL:.3f}): "
          f"{'met' if memory_ratio <= MEMORY_GOAL else 'NOT met'}")
    time_ratio = last["chunked_s"] / last["sdpa_s"]
    if device.type == "cpu":
        print(f"goal, N = {last['N']}: chunked time / sdpa = {time_ratio:.2f} (at most {TIME_GOAL:g}): "
              f"{'met' if time_ratio <= TIME_GOAL else 'NOT met'}")
    else:
        print(f"N = {last['N']}: chunked time / sdpa = {time_ratio:.2f} (a Python loop against a fused GPU kernel; "
              "no goal on CUDA)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192])
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--chunk-size", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="auto: the CPU, then CUDA when present")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    devices = ["cpu", "cuda"] if args.device == "auto" and torch.cuda.is_available() else \
        ["cpu" if args.device == "auto" else args.device]
    for name in devices:
        device = torch.device(name)
        title = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
        print(f"\n{title}: d = {args.width}, chunk_size = {args.chunk_size}, median of {args.repeats} runs "
              f"(fewer above N = 2048), torch {torch.__version__}")
        print(HEADER)
        rows = measure(device, args.sizes, args.width, args.chunk_size, args.repeats)
        goals(device, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
