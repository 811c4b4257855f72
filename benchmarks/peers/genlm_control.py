"""genlm-control 0.4.1 as a peer of smc-steer's benchmarks, on exactly the prompt ids smc-steer
conditions on.

Runs in genlm-control's own virtual environment (``.venv-peers/genlm-control``), never the
project's: it imports nothing of smc-steer. Its recipe is ``REQUIREMENTS``, installed after
``torch==2.13.0`` (the CPU build), which genlm-control's torch requirement then accepts:

    python -m venv .venv-peers/genlm-control
    .venv-peers/genlm-control/bin/python -m pip install torch==2.13.0
    .venv-peers/genlm-control/bin/python -m pip install genlm-control==0.4.1

genlm-control 0.4.1 pulls in no vLLM and no CUDA build (its vLLM backend is imported only when
asked for; on a machine without CUDA ``PromptedLLM.from_name`` picks the transformers backend).

Every task of every mode gives the token ids of the prompt (``prompt_ids``), the EOS ids
(``eos_token_ids``), the converted model directory (``model_dir``) and ``max_tokens``. The model
is ``PromptedLLM.from_name(model_dir, backend="hf")`` with exactly those EOS tokens
(``spawn_new_eos``; a mismatch stops the run, since the targets would differ). Before each task
the prompt's key/value vectors are cached (``AsyncTransformer.cache_kv``, genlm-backend's
documented way to run only the new tokens through the model) and the previous task's cache is
dropped: this changes no distribution, only the time, which it cuts about six-fold on this CPU.

One SMC run is ``AWRS(llm, potential.coerce(llm, f=b"".join), seed=seed).smc(n_particles,
ess_threshold, max_tokens)``. Its posterior is taken over the finished particles (ending in
EOS, weight > 0, UTF-8 text) as genlm-control's ``decoded_posterior`` defines it, normalised
in log space so that tiny weights do not underflow; log Ẑ is genlm-control's ``log_ml``.

Modes (``--mode``):

json (default)
    The side-by-side benchmark's task file (``benchmarks/bench_sidebyside.py --export``): per
    task, genlm-control's ``JsonSchema(schema)`` potential, N = ``--particles`` (default 10,
    as in the first example of genlm-control's README), ESS threshold 0.5, seed ``--seeds``. A schema that genlm-control refuses
    (an exception while building the potential) is ``accepted: false`` with the error. One
    record per task is appended to ``--out`` as soon as it is done (fields of
    bench_sidebyside's records: ``text`` is the finished text of highest posterior mass,
    ``texts``/``weights`` the posterior, ``token_ids`` that text's tokens without the EOS,
    ``compile_s`` the potential's construction, ``wall_s`` the whole request).

quality
    The JSON quality tasks (``benchmarks/bench_quality.py --export``), scored by
    ``quality_tasks`` as bench_quality scores smc-steer, for each ``--particles`` x ``--seeds``;
    records under the method name ``genlm-control:awrs``, so that
    ``bench_quality.py --summarize OURS.jsonl PEER.jsonl`` puts both in one table.

patterns
    genlm-eval's pattern-matching tasks (written by ``benchmarks/bench_patterns.py``): per
    pattern P, genlm-eval's own potential for that task (``PatternPotential`` below), with the
    task's particles, ESS threshold and seed, under a wall-clock limit (``timeout``). Records:
    ``status`` (ok / no_sample / timeout / compile_error), the posterior, log Ẑ, seconds;
    bench_patterns scores them as it scores smc-steer.

exact
    The check that genlm-control's log Ẑ estimates the Z smc-steer's does: per task (fields
    ``texts``, a finite language, besides the common ones), the exact

        Z = sum over texts s, over token sequences t spelling s with |t| < max_tokens, of
            p(t, EOS | prompt)

    (genlm-control's ``max_tokens`` counts the EOS), scored with genlm-control's own LM rows,
    and the mean of Ẑ (and of Ẑ times each text's posterior mass) over the ``--seeds`` runs of
    ``BoolFSA.from_regex`` of the texts, each with its standard error. One record per task and
    N: the exact masses, the means, their standard errors and z-scores.

    .venv-peers/genlm-control/bin/python benchmarks/peers/genlm_control.py \\
        --tasks-file tasks.jsonl --out records.jsonl [--mode json|quality|patterns|exact]
        [--particles 10] [--seeds 0] [--ess-threshold 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata as md
import json
import math
import platform
import re
import string
import sys
import time
import warnings
from pathlib import Path

#: what pip installs into genlm-control's venv after torch==2.13.0 (see the module docstring)
REQUIREMENTS = ["genlm-control==0.4.1"]

#: the packages whose versions a record names
VERSIONED = ("genlm-control", "genlm-backend", "genlm-grammar", "torch", "transformers")

#: genlm-eval's pattern potential writes one printable ASCII character at a time
PRINTABLE = [ord(c) for c in string.printable]


def versions() -> dict[str, str]:
    return {name: md.version(name) for name in VERSIONED}


def read_tasks(path: str) -> list[dict]:
    tasks = [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]
    if not tasks:
        raise SystemExit(f"{path} lists no tasks")
    return tasks


def load_llm(model_dir: str, eos_ids: list[int]):
    """``PromptedLLM`` on the converted model whose EOS tokens are exactly ``eos_ids``."""
    import torch
    from genlm.control import PromptedLLM

    torch.set_num_threads(1)
    llm = PromptedLLM.from_name(model_dir, backend="hf")
    if sorted(llm.token_maps.eos_idxs) != sorted(eos_ids):
        llm = llm.spawn_new_eos([bytes(llm.token_maps.decode[i]) for i in eos_ids])
    if sorted(llm.token_maps.eos_idxs) != sorted(eos_ids):
        raise SystemExit(f"genlm-control's EOS ids {sorted(llm.token_maps.eos_idxs)[:10]} differ "
                         f"from the task's {sorted(eos_ids)[:10]}: the targets would differ")
    return llm


def set_prompt(llm, prompt_ids: list[int]) -> None:
    """Condition ``llm`` on ``prompt_ids``, with their key/value vectors cached (and only theirs)."""
    llm.prompt_ids = list(prompt_ids)
    llm.model.clear_cache()
    llm.model.cache_kv(list(prompt_ids))


async def run_smc(llm, potential, n_particles: int, ess_threshold: float, max_tokens: int,
                  seed: int) -> dict:
    """One AWRS SMC run; its finished posterior, the best text's token ids and log Ẑ.

    Returns {"posterior": {text: mass}, "token_ids": ids of the text of most mass (no EOS) or
    None, "log_z": float, "wall_s": float}.
    """
    from genlm.control import AWRS
    from genlm.control.constant import EndOfSequence

    t0 = time.perf_counter()
    seqs = await AWRS(llm, potential.coerce(llm, f=b"".join), seed=seed).smc(
        n_particles=n_particles, ess_threshold=ess_threshold, max_tokens=max_tokens)
    wall = time.perf_counter() - t0
    posterior, ids_of = finished_posterior(
        seqs.contexts, seqs.log_weights, lambda t: isinstance(t, EndOfSequence))
    best = next(iter(posterior), None)
    return {"posterior": posterior, "token_ids": ids_of.get(best), "log_z": float(seqs.log_ml),
            "wall_s": wall}


def finished_posterior(contexts, log_weights, is_eos) -> tuple[dict[str, float], dict[str, list[int]]]:
    """The posterior over the finished texts of an SMC run, and each text's token ids.

    A context (tokens with a ``token_id``, the last one an EOS when it finished) counts when its
    last token ``is_eos``, its log weight is > -inf, and its bytes decode as UTF-8 (as
    genlm-control's ``decoded_posterior`` filters). With w_i its weight,

        posterior(s) = sum_{i: text_i = s} w_i / sum_{j counted} w_j,

    computed from the log weights (shifted by their maximum), largest first; empty when none
    counts. The token ids are those of the first particle with that text, without the EOS.
    """
    logw: dict[str, float] = {}
    ids_of: dict[str, list[int]] = {}
    for ctx, lw in zip(contexts, log_weights):
        lw = float(lw)
        if not ctx or not is_eos(ctx[-1]) or not lw > -math.inf:
            continue
        try:
            text = b"".join(ctx[:-1]).decode("utf-8")
        except UnicodeDecodeError:
            continue
        prev = logw.get(text, -math.inf)
        hi = max(prev, lw)
        logw[text] = hi + math.log(math.exp(prev - hi) + math.exp(lw - hi))
        ids_of.setdefault(text, [t.token_id for t in ctx[:-1]])
    if not logw:
        return {}, {}
    top = max(logw.values())
    total = sum(math.exp(v - top) for v in logw.values())
    ranked = sorted(logw.items(), key=lambda kv: -kv[1])
    return {t: math.exp(v - top) / total for t, v in ranked}, ids_of


# ---------------------------------------------------------------------------- json
async def run_json(args: argparse.Namespace) -> None:
    from genlm.control import JsonSchema

    tasks = read_tasks(args.tasks_file)
    llm = load_llm(tasks[0]["model_dir"], tasks[0]["eos_token_ids"])
    vers = versions()
    for task in tasks:
        rec = {"engine": "genlm-control", "task_id": task["task_id"], "split": task["split"],
               "accepted": True, "error": None, "finished": False, "text": None,
               "token_ids": None, "compile_s": None, "wall_s": None, "tokens": None,
               "log_z": None, "particles": args.particles[0], "versions": vers}
        t0 = time.perf_counter()
        try:
            potential = JsonSchema(task["schema"])
        except Exception as e:  # genlm-control refuses the schema: reported, not fatal
            rec.update(accepted=False, error=f"{type(e).__name__}: {e}"[:500],
                       compile_s=time.perf_counter() - t0, wall_s=time.perf_counter() - t0)
        else:
            rec["compile_s"] = time.perf_counter() - t0
            set_prompt(llm, task["prompt_ids"])
            try:
                out = await run_smc(llm, potential, args.particles[0], args.ess_threshold,
                                    task["max_tokens"], args.seeds[0])
            except Exception as e:  # an error while sampling fails this request only
                rec["error"] = f"{type(e).__name__}: {e}"[:500]
                llm.model.reset_async_queries()
            else:
                post = out["posterior"]
                best = next(iter(post), None)
                rec.update(finished=best is not None, text=best, token_ids=out["token_ids"],
                           tokens=None if best is None else len(out["token_ids"]),
                           log_z=out["log_z"], texts=list(post), weights=list(post.values()))
            rec["wall_s"] = time.perf_counter() - t0
        with open(args.out, "a") as f:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        print(f"{task['task_id']}: accepted={rec['accepted']} finished={rec['finished']} "
              f"{rec['wall_s']:.1f}s log_z={rec['log_z']} {str(rec['text'])[:60]!r}", flush=True)


# ---------------------------------------------------------------------------- quality
async def run_quality(args: argparse.Namespace) -> None:
    from genlm.control import JsonSchema

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import quality_tasks as qt

    exported = read_tasks(args.tasks_file)
    by_name = {t.name: t for t in qt.select(",".join(e["task"] for e in exported))}
    llm = load_llm(exported[0]["model_dir"], exported[0]["eos_token_ids"])
    print(f"# genlm_control (quality): {platform.platform()}, python {platform.python_version()}")
    for e in exported:
        task = by_name[e["task"]]
        set_prompt(llm, e["prompt_ids"])
        potential = JsonSchema(e["schema"])
        for n in args.particles:
            for seed in args.seeds:
                out = await run_smc(llm, potential, n, args.ess_threshold, e["max_tokens"], seed)
                post = out["posterior"]
                acc = val = 0.0
                for text, prob in post.items():
                    answer, valid = qt.parse_answer(task, text, constrained=True)
                    acc += prob * qt.score(task, answer)
                    val += prob * valid
                best = next(iter(post), "")
                rec = {"task": task.name, "family": task.family, "method": "genlm-control:awrs",
                       "N": n, "seed": seed, "ess_threshold": args.ess_threshold, "accuracy": acc,
                       "validity": val, "empty": not post, "log_ml": out["log_z"],
                       "wall_s": out["wall_s"], "best": best[:300], "finished": None}
                print(f"{task.name} N={n} s={seed}: acc={acc:.2f} empty={not post} "
                      f"log_ml={rec['log_ml']:.1f} {out['wall_s']:.1f}s | {best[:70]!r}", flush=True)
                with open(args.out, "a") as f:
                    f.write(json.dumps(rec, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------------------- patterns
def pattern_potential(pattern: str):
    """genlm-eval's potential for its pattern-matching task, written out for this benchmark.

    Over single printable ASCII characters c_1..c_n (s = their text): prefix(s) = 0 iff the
    `regex` package matches all of s as a partial match from its start
    (``match(s, partial=True)`` ending at len(s)), complete(s) = 0 iff ``fullmatch(s)``, -inf
    otherwise. Coerced to the LM by ``b"".join`` (a token's bytes are its characters), so a
    token holding any other byte is never written.
    """
    import regex
    from genlm.control import Potential

    class PatternPotential(Potential):
        def __init__(self, compiled):
            super().__init__(PRINTABLE)
            self.compiled = compiled

        async def prefix(self, context):
            text = "".join(map(chr, context))
            m = self.compiled.match(text, partial=True)
            return 0.0 if m is not None and m.end() == len(text) else -math.inf

        async def complete(self, context):
            return 0.0 if self.compiled.fullmatch("".join(map(chr, context))) else -math.inf

    return PatternPotential(regex.compile(pattern))


async def run_patterns(args: argparse.Namespace) -> None:
    tasks = read_tasks(args.tasks_file)
    llm = load_llm(tasks[0]["model_dir"], tasks[0]["eos_token_ids"])
    vers = versions()
    for task in tasks:
        rec = {"engine": "genlm-control", "task_id": task["task_id"], "pattern": task["pattern"],
               "versions": vers}
        t0 = time.perf_counter()
        try:
            potential = pattern_potential(task["pattern"])
        except Exception as e:  # the `regex` package refuses the pattern
            rec.update(status="compile_error", error=f"{type(e).__name__}: {e}",
                       seconds=time.perf_counter() - t0, score=0.0)
        else:
            rec["compile_s"] = time.perf_counter() - t0
            set_prompt(llm, task["prompt_ids"])
            try:
                out = await asyncio.wait_for(
                    run_smc(llm, potential, task["particles"], task["ess_threshold"],
                            task["max_tokens"], task["seed"]), task["timeout"])
            except asyncio.TimeoutError:
                llm.model.reset_async_queries()
                rec.update(status="timeout", seconds=time.perf_counter() - t0)
            except Exception as e:  # an error while sampling fails this pattern only
                llm.model.reset_async_queries()
                rec.update(status="crash", error=f"{type(e).__name__}: {e}"[:500],
                           seconds=time.perf_counter() - t0)
            else:
                rec.update(status="ok" if out["posterior"] else "no_sample",
                           seconds=time.perf_counter() - t0, log_ml=out["log_z"],
                           posterior=out["posterior"], texts=sorted(out["posterior"]))
        with open(args.out, "a") as f:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        print(f"[{task['task_id']}] {rec['status']:13s} {rec['seconds']:6.2f}s "
              f"{task['pattern']!r} {rec.get('texts', '')!r:.100}", flush=True)


# ---------------------------------------------------------------------------- exact
def tokenizations(vocab: dict[int, bytes], text: bytes, most: int) -> list[tuple[int, ...]]:
    """Every sequence of at most ``most`` ids of ``vocab`` (id -> non-empty bytes) whose bytes
    concatenate to ``text``."""
    by_first: dict[int, list[int]] = {}
    for i, b in vocab.items():
        by_first.setdefault(b[0], []).append(i)
    out: list[tuple[int, ...]] = []

    def walk(pos: int, acc: tuple[int, ...]) -> None:
        if pos == len(text):
            out.append(acc)
            return
        if len(acc) < most:
            for i in by_first.get(text[pos], ()):
                if text.startswith(vocab[i], pos):
                    walk(pos + len(vocab[i]), acc + (i,))

    walk(0, ())
    return out


def mean_and_se(values: list[float]) -> tuple[float, float]:
    """(mean, standard error of the mean) of ``values``."""
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var / n)


async def run_exact(args: argparse.Namespace) -> None:
    from genlm.control import BoolFSA

    tasks = read_tasks(args.tasks_file)
    llm = load_llm(tasks[0]["model_dir"], tasks[0]["eos_token_ids"])
    decode = llm.token_maps.decode
    eos = set(tasks[0]["eos_token_ids"])
    # genlm-control writes every other token whose bytes spell the text, special ones included
    vocab = {i: bytes(t) for i, t in enumerate(decode) if i not in eos and len(bytes(t)) > 0}
    vers = versions()
    for task in tasks:
        set_prompt(llm, task["prompt_ids"])
        rows: dict[tuple[int, ...], object] = {}

        async def row(ids: tuple[int, ...]):
            if ids not in rows:
                rows[ids] = await llm.logw_next([decode[i] for i in ids])
            return rows[ids]

        exact = {}
        for text in task["texts"]:
            total = 0.0
            for t in tokenizations(vocab, text.encode(), task["max_tokens"] - 1):
                lp = 0.0
                for k in range(len(t)):
                    lp += float((await row(t[:k]))[decode[t[k]]])
                total += math.exp(lp + float((await row(t))[llm.eos]))
            exact[text] = total
        z = sum(exact.values())
        potential = BoolFSA.from_regex("|".join(re.escape(s) for s in task["texts"]))
        for n in args.particles:
            zhats, masses = [], {s: [] for s in task["texts"]}
            for seed in args.seeds:
                out = await run_smc(llm, potential, n, args.ess_threshold, task["max_tokens"], seed)
                zhat = math.exp(out["log_z"]) if out["log_z"] > -math.inf else 0.0
                zhats.append(zhat)
                for s in masses:
                    masses[s].append(zhat * out["posterior"].get(s, 0.0))
            mean, se = mean_and_se(zhats)
            per_text = {s: mean_and_se(v) for s, v in masses.items()}
            rec = {"task": task.get("task", "exact"), "N": n, "runs": len(zhats),
                   "ess_threshold": args.ess_threshold, "max_tokens": task["max_tokens"],
                   "exact": exact, "exact_z": z, "mean_zhat": mean, "se": se,
                   "z_score": (mean - z) / se if se > 0 else None,
                   "per_text": {s: {"mean": m, "se": e, "z_score": (m - exact[s]) / e if e > 0 else None}
                                for s, (m, e) in per_text.items()},
                   "versions": vers}
            with open(args.out, "a") as f:
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            print(f"{rec['task']} N={n} runs={len(zhats)}: mean Ẑ {mean:.6g} (SE {se:.2g}) against "
                  f"Z {z:.6g}, z = {rec['z_score']:+.2f}; per text "
                  + ", ".join(f"{s} {v['z_score']:+.2f}" for s, v in rec["per_text"].items()), flush=True)


def int_list(spec: str) -> list[int]:
    """'0,3,5-7' -> [0, 3, 5, 6, 7]: comma-separated integers and inclusive ranges A-B."""
    out: list[int] = []
    for part in spec.split(","):
        lo, dash, hi = part.partition("-")
        out.extend(range(int(lo), int(hi) + 1) if dash else [int(lo)])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks-file", required=True,
                    help="bench_sidebyside.py --export (json), bench_quality.py --export "
                         "(quality), bench_patterns.py's task file (patterns), or a finite "
                         "language's (exact: prompt_ids, eos_token_ids, model_dir, max_tokens, texts)")
    ap.add_argument("--out", required=True, help="append one JSON record per task (run) here")
    ap.add_argument("--mode", choices=("json", "quality", "patterns", "exact"), default="json")
    ap.add_argument("--particles", default="10",
                    help="N (json: the first; quality, exact: comma-separated; patterns: the task's)")
    ap.add_argument("--seeds", default="0",
                    help="comma-separated, ranges A-B included (json: the first)")
    ap.add_argument("--ess-threshold", type=float, default=0.5)
    args = ap.parse_args()
    args.particles = int_list(args.particles)
    args.seeds = int_list(args.seeds)
    warnings.simplefilter("ignore")
    run = {"json": run_json, "quality": run_quality, "patterns": run_patterns,
           "exact": run_exact}[args.mode]
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
