"""The JSON quality tasks with genlm-control 0.4.1 (a peer), on exactly the prompts smc-steer sees.

Runs in genlm-control's own virtual environment, never the project's (it pins its own torch and
transformers); it imports nothing of smc-steer but ``quality_tasks`` (plain Python + jsonschema)
to score answers the same way. The prompts come from ``bench_quality.py --export``: the token ids
smc-steer's one prompt rule gives (chat template applied), so both libraries condition on the same
tokens, with the same EOS and the same embedded model (the converted safetensors directory).

For each task and seed: genlm-control's AWRS token sampler with its ``JsonSchema`` potential
(whitespace as genlm-control allows it), ``sampler.smc(n_particles=N, ess_threshold, max_tokens)``;
the record has bench_quality's fields (accuracy = posterior-weighted field accuracy, validity,
empty, log_ml = genlm-control's log Ẑ, wall_s) under the method name ``genlm-control:awrs``, so

    python benchmarks/bench_quality.py --summarize OURS.jsonl PEER.jsonl

puts both in one table.

    python benchmarks/bench_quality.py --tasks ada,json-00 --export /tmp/tasks.jsonl
    GENLM_VENV/bin/python benchmarks/peer_genlm_control.py --tasks-file /tmp/tasks.jsonl \\
        --particles 16 --seeds 0,1 --jsonl PEER.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import quality_tasks as qt  # noqa: E402


async def run(args: argparse.Namespace) -> None:
    from genlm.control import AWRS, JsonSchema, PromptedLLM

    exported = [json.loads(ln) for ln in Path(args.tasks_file).read_text().splitlines() if ln.strip()]
    if not exported:
        raise SystemExit(f"{args.tasks_file} lists no tasks: write it with bench_quality.py --export")
    by_name = {t.name: t for t in qt.select(",".join(e["task"] for e in exported))}
    llm = PromptedLLM.from_name(exported[0]["model_dir"], backend="hf")
    eos_ids = list(llm.token_maps.eos_idxs)
    if eos_ids != exported[0]["eos_token_ids"]:
        raise SystemExit(f"genlm-control's EOS ids {eos_ids} differ from smc-steer's "
                         f"{exported[0]['eos_token_ids']}: the targets would differ")
    sink = open(args.jsonl, "a") if args.jsonl else None
    print(f"# peer_genlm_control: {platform.platform()}, python {platform.python_version()}")
    for e in exported:
        task = by_name[e["task"]]
        llm.prompt_ids = e["prompt_ids"]
        potential = JsonSchema(e["schema"]).coerce(llm, f=b"".join)
        for n in args.particles:
            for seed in args.seeds:
                t0 = time.perf_counter()
                seqs = await AWRS(llm, potential, seed=seed).smc(
                    n_particles=n, ess_threshold=args.ess_threshold, max_tokens=e["max_tokens"])
                wall = time.perf_counter() - t0
                post = dict(seqs.decoded_posterior)
                acc = val = 0.0
                for text, prob in post.items():
                    answer, valid = qt.parse_answer(task, text, constrained=True)
                    acc += prob * qt.score(task, answer)
                    val += prob * valid
                best = max(post, key=post.get) if post else ""
                rec = {"task": task.name, "family": task.family, "method": "genlm-control:awrs", "N": n,
                       "seed": seed, "ess_threshold": args.ess_threshold, "accuracy": acc, "validity": val,
                       "empty": not post, "log_ml": float(seqs.log_ml), "wall_s": wall, "best": best[:300],
                       "finished": None}
                print(f"{task.name} N={n} s={seed}: acc={acc:.2f} empty={not post} "
                      f"log_ml={rec['log_ml']:.1f} {wall:.1f}s | {best[:70]!r}", flush=True)
                if sink:
                    sink.write(json.dumps(rec, ensure_ascii=False) + "\n")
                    sink.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks-file", required=True, help="written by bench_quality.py --export")
    ap.add_argument("--particles", default="16")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--ess-threshold", type=float, default=0.5)
    ap.add_argument("--jsonl", help="append one record per run to this file")
    args = ap.parse_args()
    args.particles = [int(x) for x in args.particles.split(",")]
    args.seeds = [int(x) for x in args.seeds.split(",")]
    warnings.simplefilter("ignore")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
