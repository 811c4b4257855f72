"""Soak benchmark: resident memory over many short runs on the embedded model (CPU).

R runs of ``smc.generate`` (2 particles, max_tokens=4, a different prompt each run so that the
cache keeps filling, alternately unconstrained and with a regex) share one HFLM whose prefix
cache has a byte budget B. Every ``--every`` runs it prints the process's resident set size
(RSS, from /proc/self/status), the cache's accounted bytes (``lm.trie.used_bytes``, <= B by
construction) and the pool tensor's allocated bytes. Memory is "flat within the budget" when
RSS after the warm-up grows by less than B over the remaining runs; at the end ``clear_cache()``
must give the pool back. The script exits 1 if either check fails.

Usage: python benchmarks/bench_soak.py [--runs 1000] [--every 50] [--budget-mib 64] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rss_mib() -> float:
    """This process's resident set size in MiB (Linux /proc)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--budget-mib", type=float, default=64.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import torch

    import smc
    from potentials import Regex

    torch.set_num_threads(1)
    budget = int(args.budget_mib * 2**20)
    lm = smc.load_lm(cache_budget_bytes=budget)
    regex = Regex(r"[A-Za-z ,.]{1,40}")
    rows = []
    t0 = time.perf_counter()
    rss0 = None
    print(f"budget {budget / 2**20:.1f} MiB, {args.runs} runs of 2 particles x 4 tokens")
    print(f"{'runs':>6} {'rss MiB':>9} {'cache MiB':>10} {'pool MiB':>9} {'s/run':>7}")
    for i in range(1, args.runs + 1):
        r = smc.generate(
            f"Item {i}: describe the number {i * 7919 % 10007} in words.",
            regex if i % 2 else None,
            lm=lm, particles=2, max_tokens=4, seed=i, progress=False,
        )
        assert len(r.samples) == 2
        if i == 1 or i % args.every == 0:
            row = dict(
                runs=i,
                rss_mib=rss_mib(),
                cache_mib=lm.trie.used_bytes / 2**20,
                pool_mib=lm.trie.pool.numel() * lm.trie.pool.element_size() / 2**20,
                s_per_run=(time.perf_counter() - t0) / i,
            )
            if rss0 is None and i >= args.every:
                rss0 = row["rss_mib"]
            rows.append(row)
            print(f"{i:>6} {row['rss_mib']:>9.1f} {row['cache_mib']:>10.2f} {row['pool_mib']:>9.2f} "
                  f"{row['s_per_run']:>7.3f}", flush=True)
    assert lm.trie.used_bytes <= budget
    lm.clear_cache()
    pool_after = lm.trie.pool.numel() * lm.trie.pool.element_size() / 2**20
    growth = rows[-1]["rss_mib"] - (rss0 if rss0 is not None else rows[0]["rss_mib"])
    flat = growth < budget / 2**20
    print(f"RSS growth after run {args.every}: {growth:+.1f} MiB (budget {budget / 2**20:.1f} MiB): "
          f"{'flat within the budget' if flat else 'NOT flat'}")
    print(f"pool after clear_cache(): {pool_after:.2f} MiB, cache {lm.trie.used_bytes / 2**20:.2f} MiB")
    if args.json:
        print(json.dumps(dict(budget_mib=budget / 2**20, rows=rows, growth_mib=growth,
                              pool_after_clear_mib=pool_after)))
    return 0 if flat and lm.trie.used_bytes <= 0.1 * budget else 1


if __name__ == "__main__":
    sys.exit(main())
