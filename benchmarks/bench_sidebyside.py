"""Side by side on JSONSchemaBench: smc-steer and the peer engines on the same work, CPU or GPU.

The work. A stratified sample of MaskBench's copy of the JSONSchemaBench schemas
(``../shared/corpora/maskbench``; split = the file-name prefix before the number, the BFCL_*
files one split "BFCL"): per split, ``min(--per-split, split size)`` files drawn without
replacement by ``random.Random(--seed)`` from the sorted file names. Every engine gets, for
every schema S, the same

    prompt      JSONSchemaBench's own zero-shot wording (epfl-dlab/jsonschemabench, its chat
                formatter with no examples): the system turn "You need to generate a JSON
                object that matches the schema below." and the user turn json.dumps(S), read
                by smc-steer's one prompt rule (chat template applied) into ``prompt_ids``;
                every engine is given those ids
    model       the embedded SmolLM2-135M-Instruct, the converted safetensors directory, loaded
                by transformers in float32 on --device (default cpu, every run recorded before
                the GPU section of RESULTS; the masking peers get the same device, and
                genlm-control runs on the CPU only)
    max_tokens  one budget for all (--max-tokens, default 256). Measured on the corpus: the
                shortest listed valid instance of a schema, json.dumps compact, is at most 32
                tokens for 33% of the schemas, 64 for 54%, 128 for 73%, 256 for 85% and 512
                for 94% (720 schemas, every split); JSONSchemaBench's own runs give 500.
                A schema whose prompt and max_tokens do not fit the model's context (8,192
                tokens), or whose prompt is longer than --max-prompt-tokens (none by default;
                a reduced form's cap), is passed over in the draw: the next schema of the
                split is taken.

The engines (rows):

    smc-steer           smc.generate(prompt_ids, JSONSchema(S)) at its defaults (N = 16 in 4
                        islands, AWRS, flexible whitespace), in this process
    smc-steer:N=1       the same with particles=1 (one AWRS particle: a proper sample of one)
    smc-steer:T=0       temperature=0: the most likely valid output within max_tokens by its
                        search (exact top-k within 128 expansions, else beam 4), the decoding
                        JSONSchemaBench runs every engine with (greedy)
    smc-steer:strict    JSONSchema(S, strict=True): open objects and tuples closed where that
                        only narrows S (potentials.json.strict; xgrammar's default strict_mode
                        and outlines close them too); every output is still checked against S
    smc-steer:strict+T=0  both
    smc-steer:twist     the defaults with the budget twist asked for (per_byte =
                        smc.core.defaults.PER_BYTE): the row that measured the twist in every
                        island before it was the default (d656305; before, only a run in one
                        population got it); since then the same run as smc-steer
    smc-steer:multinomial  the defaults with multinomial resampling (the default before
                        d656305; against systematic, the default since)
    llguidance          llguidance's matcher on the HF tokenizer, as a transformers logits
                        processor (benchmarks/peers/masking.py)
    xgrammar            xgr.contrib.hf.LogitsProcessor
    outlines            outlines.from_transformers + outlines.Generator(model, JsonSchema(S))
    genlm-control       its JsonSchema potential with AWRS SMC, N = 10, ESS threshold 0.5
                        (benchmarks/peers/genlm_control.py)

each peer in its own virtual environment under ``.venv-peers/<engine>/`` (``--setup``;
benchmarks/peers/venvs.py), run by ``subprocess`` with that venv's python. The masking peers
decode greedily: model.generate with the model's own generation config (which samples nothing),
as each one's transformers example calls it.

The columns, per split and in total:

    accepted     the schema compiled (no compile error)
    finished     an output ended within max_tokens: with EOS, or at the budget as a complete
                 JSON text (smc-steer forces EOS there and keeps the text when the constraint
                 accepts it complete; a masking engine's text that parses as JSON at the budget
                 counts the same way)
    valid        the output parses and jsonschema's validator for the schema's draft ($schema;
                 none: 2020-12), with format checking, accepts it
    ttft s       time to first token, read as the constraint's compile time (the engine's
                 schema -> grammar/automaton step for this schema; per-vocabulary tables
                 shared by all schemas are built once beforehand and not counted), median
    wall s       wall time of one request, compile included, all particles, mean
    tokens       tokens of the output, mean over finished outputs
    logp         log p_LM(output, EOS | prompt_ids), computed here for every engine from the
                 output's token ids by one forward pass of the same model: mean over the valid
                 outputs
    log Ẑ        the SMC engines' estimate of log Z = log p(the output satisfies S) (of the
                 target restricted to max_tokens), median over accepted schemas, -inf where no
                 sample finished

and the failure classes: every schema where smc-steer (defaults) gives no valid output while
some engine does, with smc-steer's reason (compile error, no finished sample, invalid output,
crash).

    python benchmarks/bench_sidebyside.py --setup [--engines llguidance,xgrammar,outlines]
    python benchmarks/bench_sidebyside.py --records runs.jsonl [--per-split 20] [--seed 0] [--smc-seed 0]
        [--max-tokens 256] [--engines smc-steer,smc-steer:N=1,llguidance,...] [--splits A,B]
    python benchmarks/bench_sidebyside.py --summarize runs.jsonl [--markdown]
    python benchmarks/bench_sidebyside.py --export tasks.jsonl [selection options]
    python benchmarks/bench_sidebyside.py --tasks tasks.jsonl --device cuda --records runs.jsonl [--engines ...]
    python benchmarks/bench_sidebyside.py --quick --records smoke.jsonl

Records are appended to --records as they finish (one JSON object per engine x task); a run
skips the pairs already there (resume). ``--smc-seed S`` samples smc-steer's rows with seed S
(default 0, every recorded run), recorded as rows ``ENGINE@seed=S`` of their own. ``--quick`` is the smoke form: 3 schemas, max_tokens
8, the smc-steer rows and each peer whose venv already exists; it is also what the script runs
with no options at all (as ``make bench`` runs it). Without the corpus at its default place
(../shared/corpora/maskbench) it says so and exits 0; a --corpus that does not exist is an error.
``--tasks FILE`` runs the tasks an ``--export`` wrote (on a machine without the corpus: the same
draw, prompt ids and budget; the file's model directory is replaced by this machine's converted
copy of the embedded model).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from peers import venvs  # noqa: E402
from peers.masking import UNUSABLE  # noqa: E402
from smc.core import defaults  # noqa: E402

_CANDIDATES = [ROOT.parent / "shared" / "corpora" / "maskbench",
               ROOT.parent.parent / "shared" / "corpora" / "maskbench"]
DEFAULT_CORPUS = next((c for c in _CANDIDATES if c.is_dir()), _CANDIDATES[0])

#: JSONSchemaBench's zero-shot system turn (the user turn is json.dumps(schema))
SYSTEM = "You need to generate a JSON object that matches the schema below."
MAX_TOKENS = 256
PER_SPLIT = 20
#: smc-steer's rows: engine -> (smc.generate settings, JSONSchema options)
SMC_ROWS = {
    "smc-steer": ({}, {}),
    "smc-steer:N=1": ({"particles": 1}, {}),
    "smc-steer:T=0": ({"temperature": 0.0}, {}),
    "smc-steer:strict": ({}, {"strict": True}),
    "smc-steer:strict+T=0": ({"temperature": 0.0}, {"strict": True}),
    "smc-steer:twist": ({"per_byte": defaults.PER_BYTE}, {}),
    "smc-steer:multinomial": ({"resampling": "multinomial"}, {}),
}
SMC_ENGINES = tuple(SMC_ROWS)
MASKING_ENGINES = ("llguidance", "xgrammar", "outlines")
PEER_ENGINES = (*MASKING_ENGINES, "genlm-control")
ALL_ENGINES = (*SMC_ENGINES, *PEER_ENGINES)
#: the runner script of each peer, run with that peer's venv python
RUNNERS = {**{e: ROOT / "benchmarks" / "peers" / "masking.py" for e in MASKING_ENGINES},
           "genlm-control": ROOT / "benchmarks" / "peers" / "genlm_control.py"}
QUICK = {"n_tasks": 3, "max_tokens": 8}


# ---------------------------------------------------------------------------- the work
def split_of(name: str) -> str:
    """The split of a corpus file: Github_easy_12.json -> Github_easy, BFCL_java_3.json -> BFCL,
    Glaiveai2K---calculate_area_3.json -> Glaiveai2K."""
    split = re.sub(r"_[0-9]+\.json$", "", name.split("---")[0])
    return "BFCL" if split.startswith("BFCL") else split


def select(corpus: Path, per_split: int, seed: int, splits: list[str] | None = None,
           fits=lambda path: True) -> list[Path]:
    """min(per_split, |split|) files of every split: the first ones of a random.Random(seed)
    permutation of the split's sorted names (splits in sorted order, each permuted whether
    selected or not), so a larger per_split only adds schemas, and --splits picks the same ones.
    A file for which ``fits`` is false is passed over and the next one of the permutation taken."""
    if not corpus.is_dir():
        raise SystemExit(f"no corpus at {corpus}: pass --corpus DIR (MaskBench's data folder)")
    by_split: dict[str, list[Path]] = defaultdict(list)
    for p in sorted(corpus.glob("*.json")):
        by_split[split_of(p.name)].append(p)
    if splits:
        unknown = sorted(set(splits) - set(by_split))
        if unknown:
            raise SystemExit(f"unknown splits {unknown}: the corpus has {sorted(by_split)}")
    rng = random.Random(seed)
    chosen = []
    for split in sorted(by_split):
        order = list(by_split[split])
        rng.shuffle(order)  # a whole permutation: the draw at k is the start of the draw at k + 1
        if not splits or split in splits:
            chosen += sorted(itertools.islice((p for p in order if fits(p)), per_split))
    return chosen


def messages_for(schema) -> list[dict[str, str]]:
    """The prompt every engine sees for ``schema`` (see the module docstring)."""
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": json.dumps(schema)}]


def make_tasks(lm, files: list[Path], max_tokens: int) -> list[dict]:
    """The task file's lines (benchmarks/peers read them): prompt ids by smc-steer's prompt rule."""
    from smc.backends.loading import embedded_model_dir
    from smc.backends.prompts import encode_prompt

    tasks = []
    for p in files:
        schema = json.loads(p.read_text(encoding="utf-8"))["schema"]
        messages = messages_for(schema)
        ids = list(encode_prompt(lm, messages))
        tasks.append({"task_id": p.stem, "split": split_of(p.name), "schema": schema,
                      "prompt_ids": ids, "prompt_text": lm.tokenizer.decode(ids), "messages": messages,
                      "model_dir": str(embedded_model_dir()),
                      "eos_token_ids": list(lm.eos_token_ids), "max_tokens": max_tokens})
    return tasks


def read_tasks(path: Path) -> list[dict]:
    """The tasks of an ``--export`` file, their model directory this machine's copy of the
    embedded model (the file names the exporting machine's)."""
    from smc.backends.loading import embedded_model_dir

    tasks = read_jsonl(path)
    if not tasks:
        raise SystemExit(f"{path} holds no tasks (write one with --export)")
    here = str(embedded_model_dir())
    return [{**t, "model_dir": here} for t in tasks]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]


# ---------------------------------------------------------------------------- smc-steer rows
def smc_versions() -> dict[str, str]:
    import torch
    import transformers

    import smc

    return {"smc-steer": smc.__version__, "torch": torch.__version__,
            "transformers": transformers.__version__}


def smc_row_name(engine: str, seed: int) -> str:
    """The row of smc-steer engine ``engine`` run with sampling seed ``seed``: the engine's name
    for seed 0 (every recorded run), else ``engine@seed=S``, so each seed is a row of its own."""
    return engine if seed == 0 else f"{engine}@seed={seed}"


def run_smc(lm, task: dict, engine: str, seed: int = 0) -> dict:
    """One smc-steer request: compile JSONSchema(S) (timed: the ttft column), then generate
    with sampling seed ``seed``."""
    import smc
    from potentials import JSONSchema

    settings, options = SMC_ROWS[engine]
    rec = {"engine": smc_row_name(engine, seed), "task_id": task["task_id"], "split": task["split"], "accepted": False,
           "error": None, "finished": False, "text": None, "token_ids": None, "compile_s": None,
           "wall_s": None, "tokens": None, "log_z": None, "versions": smc_versions()}
    # each request starts cold, as a peer's does: nothing cached from another row's run
    lm.clear_cache()
    t0 = time.perf_counter()
    try:
        constraint = JSONSchema(task["schema"], **options)
    except (ValueError, TypeError, RecursionError) as err:
        rec["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
        return rec
    rec["accepted"] = True
    rec["compile_s"] = time.perf_counter() - t0
    try:
        r = generate(lm, task, constraint, {**settings, "seed": seed})
    except Exception as err:  # a crash is a result of the benchmark, with its reason
        rec["error"] = f"crash: {type(err).__name__}: {str(err).splitlines()[0][:300] if str(err) else ''}"
        rec["traceback"] = traceback.format_exc(limit=4)[-1500:]
        rec["wall_s"] = time.perf_counter() - t0
        return rec
    rec["wall_s"] = time.perf_counter() - t0
    post = r.posterior
    rec["log_z"] = float(r.log_ml) if math.isfinite(r.log_ml) else None
    if post:
        best = next(iter(post))
        sample = max((s for s in r.samples if s.finished and s.text == best), key=lambda s: s.log_weight)
        rec.update(finished=True, text=best, token_ids=list(sample.token_ids),
                   tokens=len(sample.token_ids), texts=list(post), weights=list(post.values()))
    elif r.samples:  # what the particles were writing when the budget ran out
        rec["unfinished_text"] = max(r.samples, key=lambda s: len(s.token_ids)).text[:300]
    return rec


def generate(lm, task: dict, constraint, settings: dict):
    """smc.generate for one row; temperature 0 as the server answers it
    (``smc.api.generation.arun_most_probable``)."""
    import smc
    from smc.api.generation import arun_most_probable
    from smc.api.request import Request

    if settings.get("temperature") != 0:
        return smc.generate(task["prompt_ids"], constraint, lm=lm, max_tokens=task["max_tokens"],
                            progress=False, **settings)
    request = Request(task["prompt_ids"], constraint, max_tokens=task["max_tokens"], seed=settings.get("seed", 0))
    return asyncio.run(arun_most_probable(request, lm))[0]


# ---------------------------------------------------------------------------- peers
def limit_memory(gb: float) -> None:
    """Cap this process's address space at ``gb`` GiB (a peer's compile that would take the
    machine's memory fails inside the peer instead; outlines reached 18 GiB on a Snowplow schema before the kernel killed it)."""
    import resource

    cap = int(gb * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def run_peer(engine: str, tasks: list[dict], request_timeout: float, memory_gb: float,
             device: str = "cpu"):
    """The peer's records for ``tasks``, yielded as its runner writes them: the runner in the
    peer's venv (OMP_NUM_THREADS=1, address space capped at ``memory_gb`` GiB, none for 0),
    its model on ``device``. A task with no record after ``request_timeout`` seconds (or whose
    runner dies) gets a failure record naming why, and the runner restarts after it; a runner
    that exits with ``peers.masking.UNUSABLE`` (the engine misreads the model's tokens) gives
    every task still to do that record at once."""
    if not venvs.exists(engine):
        raise SystemExit(f"no venv for {engine}: run bench_sidebyside.py --setup --engines {engine}")
    runner = RUNNERS[engine]
    if not runner.is_file():
        raise SystemExit(f"{engine}'s runner {runner} is not in this checkout")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PYTHONPATH", None)
    todo = list(tasks)
    with tempfile.TemporaryDirectory() as tmp:
        for attempt in range(len(tasks)):
            if not todo:
                return
            tfile, out, log_path = (Path(tmp) / "tasks.jsonl", Path(tmp) / f"out{attempt}.jsonl",
                                    Path(tmp) / "log.txt")
            write_jsonl(tfile, todo)
            cmd = [str(venvs.python_of(engine)), str(runner), "--tasks-file", str(tfile), "--out", str(out)]
            if engine in MASKING_ENGINES:
                cmd += ["--engine", engine, "--device", device]
            with open(log_path, "w") as log:
                proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True,
                                        preexec_fn=(lambda: limit_memory(memory_gb)) if memory_gb else None)
                seen, last, why = 0, time.monotonic(), None
                try:
                    while True:
                        rc = proc.poll()
                        rows = read_jsonl(out)
                        for r in rows[seen:]:
                            todo = [t for t in todo if t["task_id"] != r["task_id"]]
                            yield r
                        if len(rows) > seen:
                            seen, last = len(rows), time.monotonic()
                        if rc is not None:
                            why = None if rc == 0 else f"runner exited with {rc}"
                            break
                        # the loading of the model counts against the first request
                        if time.monotonic() - last > request_timeout:
                            why = f"time-out: no output in {request_timeout:.0f} s"
                            break
                        time.sleep(0.5)
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
            if todo:
                why = why or "runner ended without a record for it"
                tail = log_path.read_text()[-600:].strip()
                print(f"# {engine} on {todo[0]['task_id']}: {why}\n{tail}", file=sys.stderr)
                if why.startswith("runner exited") and tail:
                    why += f": {tail.splitlines()[-1][:300]}"
                # an engine that cannot run on this model fails every task alike: no restarts
                for t in (list(todo) if rc == UNUSABLE else todo[:1]):
                    todo.remove(t)
                    yield {"engine": engine, "task_id": t["task_id"], "split": t["split"], "accepted": True,
                           "error": why, "finished": False, "text": None, "token_ids": None,
                           "compile_s": None, "wall_s": None, "tokens": None, "log_z": None,
                           "versions": venvs.versions(engine)}


# ---------------------------------------------------------------------------- scoring
class Scorer:
    """valid (jsonschema, the schema's draft, format checking) and log p_LM(output, EOS | prompt)
    by one forward pass of the embedded model in float32, the same for every engine."""

    def __init__(self, device: str = "cpu") -> None:
        import torch
        from transformers import AutoModelForCausalLM

        from smc.backends.loading import embedded_model_dir

        self.torch, self.device = torch, device
        self.model = AutoModelForCausalLM.from_pretrained(embedded_model_dir(), dtype=torch.float32).to(device)
        self.model.eval()

    def logp(self, prompt_ids: list[int], output_ids: list[int], eos: int) -> float:
        torch = self.torch
        ids = list(prompt_ids) + list(output_ids) + [eos]
        with torch.no_grad():
            logits = self.model(torch.tensor([ids], device=self.device)).logits[0].float()
        logprobs = torch.log_softmax(logits[len(prompt_ids) - 1:-1], dim=-1)
        target = torch.tensor(ids[len(prompt_ids):], device=self.device)
        return float(logprobs.gather(1, target[:, None]).sum())

    @staticmethod
    def valid(schema, text: str | None) -> bool:
        from bench_maskbench import declared_verdict

        if text is None:
            return False
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return False
        return bool(declared_verdict(schema, value))

    def score(self, rec: dict, task: dict) -> dict:
        rec["valid"] = rec["finished"] and self.valid(task["schema"], rec["text"])
        rec["logp"] = (self.logp(task["prompt_ids"], rec["token_ids"], task["eos_token_ids"][0])
                       if rec["finished"] and rec.get("token_ids") is not None else None)
        return rec


# ---------------------------------------------------------------------------- summary
def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def _f(x, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def log_zs(engine: str, rs: list[dict]) -> list[float]:
    """log Ẑ of an SMC engine's accepted runs, a run with no finished sample counting as -inf
    (Ẑ = 0); none for a masking engine."""
    if engine not in (*SMC_ENGINES, "genlm-control"):
        return []
    return [-math.inf if r["log_z"] is None else r["log_z"] for r in rs if r["accepted"]]


def table(records: list[dict]) -> str:
    """One markdown table: a row per engine x split, and each engine's total."""
    engines = [e for e in ALL_ENGINES if any(r["engine"] == e for r in records)]
    engines += sorted({r["engine"] for r in records} - set(engines))
    splits = sorted({r["split"] for r in records})
    out = ["| split | engine | n | accepted | finished | valid | ttft s (median) | wall s (mean) "
           "| tokens (mean) | logp of valid (mean) | log Ẑ (median) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for split in [*splits, "total"]:
        for e in engines:
            rs = [r for r in records if r["engine"] == e and (split == "total" or r["split"] == split)]
            if not rs:
                continue
            n = len(rs)
            fin = [r for r in rs if r["finished"]]
            val = [r for r in rs if r.get("valid")]
            out.append(
                f"| {'**total**' if split == 'total' else split} | {e} | {n} "
                f"| {sum(r['accepted'] for r in rs)} | {len(fin)} | {len(val)} "
                f"| {_f(_median([r['compile_s'] for r in rs]), 3)} | {_f(_mean([r['wall_s'] for r in rs]), 1)} "
                f"| {_f(_mean([r['tokens'] for r in fin]), 1)} | {_f(_mean([r.get('logp') for r in val]), 1)} "
                f"| {_f(_median(log_zs(e, rs)), 1)} |")
    return "\n".join(out)


def reason(rec: dict | None) -> str:
    """Why an engine gave no valid output for a task."""
    if rec is None:
        return "not run"
    if not rec["accepted"]:
        return f"compile error: {rec['error']}"
    if rec.get("error"):
        return rec["error"]
    if not rec["finished"]:
        return "no finished output within max_tokens"
    return f"invalid output {rec['text'][:80]!r}"


def failures(records: list[dict], ours: str = "smc-steer") -> list[str]:
    """Tasks where ``ours`` has no valid output and another engine has one, with the reason."""
    by = {(r["engine"], r["task_id"]): r for r in records}
    lines = []
    for tid in sorted({r["task_id"] for r in records}):
        mine = by.get((ours, tid))
        if mine is None or mine.get("valid"):
            continue
        others = sorted(e for (e, t), r in by.items() if t == tid and e != ours and r.get("valid"))
        if others:
            lines.append(f"- {tid} ({mine['split']}): {reason(mine)}; valid from {', '.join(others)}")
    return lines


def coverage(records: list[dict]) -> list[str]:
    """Valid outputs per split and engine (a column per engine), then the coverage goal for
    each smc-steer row: at least the best masking engine on every split, above it in total,
    and its wall time per request against the fastest masking engine's."""
    engines = [e for e in ALL_ENGINES if any(r["engine"] == e for r in records)]
    engines += sorted({r["engine"] for r in records} - set(engines))  # smc-steer rows of other seeds
    splits = sorted({r["split"] for r in records})
    valid = {(e, s): sum(1 for r in records if r["engine"] == e and r["split"] == s and r.get("valid"))
             for e in engines for s in splits}
    out = ["| split | " + " | ".join(engines) + " |", "|---|" + "---|" * len(engines)]
    out += [f"| {s} | " + " | ".join(str(valid[e, s]) for e in engines) + " |" for s in splits]
    out.append("| **total** | " + " | ".join(str(sum(valid[e, s] for s in splits)) for e in engines) + " |")
    masking = [e for e in MASKING_ENGINES if e in engines]
    if not masking:
        return out
    best = max(sum(valid[e, s] for s in splits) for e in masking)
    walls = {e: [r["wall_s"] for r in records if r["engine"] == e and r.get("wall_s") is not None] for e in engines}
    fastest = min(((sum(w) / len(w), e) for e, w in walls.items() if e in masking and w), default=None)
    out.append("")
    for e in engines:
        if e.partition("@")[0] not in SMC_ENGINES:
            continue
        below = [s for s in splits if valid[e, s] < max(valid[m, s] for m in masking)]
        total = sum(valid[e, s] for s in splits)
        wall = sum(walls[e]) / len(walls[e]) if walls[e] else float("nan")
        speed = "no masking engine ran" if fastest is None else \
            f"{wall / fastest[0]:.1f}x the fastest masking engine's ({fastest[1]})"
        out.append(f"- {e}: {total} valid vs the best masking engine's {best}; below the best masking "
                   f"engine on {len(below)} split(s){': ' + ', '.join(below) if below else ''}; wall {speed}")
    return out


def summarize(records: list[dict]) -> str:
    vers: dict[str, dict] = {}
    for r in records:
        vers.setdefault(r["engine"], r.get("versions") or {})
    out = [table(records), "", "Valid outputs per split:", ""] + coverage(records) + ["", "Versions:"]
    out += [f"- {e}: " + ", ".join(f"{k} {v}" for k, v in sorted(v.items())) for e, v in vers.items()]
    for ours in [e for e in SMC_ENGINES if any(r["engine"] == e for r in records)]:
        fails = failures(records, ours)
        out += ["", f"Where {ours} has no valid output and another engine has one ({len(fails)}):"]
        out += fails or ["- none"]
    return "\n".join(out)


def machine() -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "?"
    return (f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}")


# ---------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--per-split", type=int, default=PER_SPLIT)
    ap.add_argument("--splits", help="comma-separated splits (default: all)")
    ap.add_argument("--seed", type=int, default=0, help="the draw of the schemas")
    ap.add_argument("--smc-seed", type=int, default=0,
                    help="smc-steer's sampling seed (rows of a seed other than 0 are named ENGINE@seed=S)")
    ap.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    ap.add_argument("--max-prompt-tokens", type=int,
                    help="pass over schemas whose prompt is longer (a reduced form; default: no cap)")
    ap.add_argument("--engines", help=f"comma-separated, of {', '.join(ALL_ENGINES)} (default: all; "
                                      "with --quick: smc-steer's and each peer whose venv exists)")
    ap.add_argument("--records", type=Path, help="JSONL file the records are appended to (resumed)")
    ap.add_argument("--request-timeout", type=float, default=600.0,
                    help="seconds a peer may take for one request (model loading included for the first)")
    ap.add_argument("--peer-memory-gb", type=float, default=8.0,
                    help="address-space cap of a peer's runner (0: none; CUDA maps more than any such cap)")
    ap.add_argument("--device", default="cpu", help="where every engine's model runs (cpu, cuda, cuda:N)")
    ap.add_argument("--tasks", type=Path, metavar="FILE",
                    help="run the tasks an --export wrote instead of drawing from --corpus")
    ap.add_argument("--setup", action="store_true", help="build the peers' venvs, then exit")
    ap.add_argument("--export", type=Path, metavar="FILE", help="write the task file, then exit")
    ap.add_argument("--summarize", nargs="+", type=Path, metavar="FILE", help="only print the tables")
    ap.add_argument("--quick", action="store_true", help="the smoke form (see the docstring)")
    args = ap.parse_args(argv)

    if args.setup:
        for e in (args.engines.split(",") if args.engines else list(venvs.PEERS)):
            venvs.build(e.strip())
        return []
    if args.summarize:
        records = [r for p in args.summarize for r in read_jsonl(p)]
        print(summarize(records))
        return records
    if not (sys.argv[1:] if argv is None else argv):
        print("# no options (as `make bench` runs it): the quick form, --quick")
        args.quick = True
    if not args.tasks and not args.corpus.is_dir() and args.corpus == DEFAULT_CORPUS:
        print(f"# no corpus at {args.corpus} (MaskBench's data folder): nothing to run; pass --corpus DIR")
        return []
    if args.quick:
        args.max_tokens = QUICK["max_tokens"]
    if args.engines:
        engines = [e.strip() for e in args.engines.split(",") if e.strip()]
        bad = sorted(set(engines) - set(ALL_ENGINES))
        if bad:
            raise SystemExit(f"unknown engines {bad}: choose from {', '.join(ALL_ENGINES)}")
    elif args.quick:
        engines = [*SMC_ENGINES, *(e for e in PEER_ENGINES if venvs.exists(e) and RUNNERS[e].is_file())]
    else:
        engines = list(ALL_ENGINES)
    if args.device != "cpu" and "genlm-control" in engines:
        raise SystemExit("genlm-control runs on the CPU only in this benchmark: leave it out of --engines "
                         f"with --device {args.device}")

    import torch

    import smc

    torch.set_num_threads(1)
    lm = smc.load_lm(device=args.device, dtype="float32")

    def fits(path: Path) -> bool:
        schema = json.loads(path.read_text(encoding="utf-8"))["schema"]
        n = len(lm.encode_chat(messages_for(schema)))
        return n + args.max_tokens <= lm.max_context and n <= (args.max_prompt_tokens or n)

    if args.tasks:
        tasks = read_tasks(args.tasks)
    else:
        files = select(args.corpus, args.per_split, args.seed, args.splits.split(",") if args.splits else None, fits)
        if args.quick:
            files = files[: QUICK["n_tasks"]]
        tasks = make_tasks(lm, files, args.max_tokens)
    if args.export:
        write_jsonl(args.export, tasks)
        print(f"# wrote {len(tasks)} tasks to {args.export}")
        return []
    print(f"# bench_sidebyside: {machine()}")
    print(f"# {len(tasks)} schemas from {len({t['split'] for t in tasks})} splits; engines {engines}; "
          f"max_tokens {tasks[0]['max_tokens'] if tasks else args.max_tokens}; device {args.device}", flush=True)
    saved = read_jsonl(args.records) if args.records else []
    done = {(r["engine"], r["task_id"]) for r in saved}
    by_id = {t["task_id"]: t for t in tasks}
    rows = [smc_row_name(e, args.smc_seed) if e in SMC_ENGINES else e for e in engines]
    records = [r for r in saved if r["task_id"] in by_id and r["engine"] in rows]
    sink = open(args.records, "a", encoding="utf-8") if args.records else None
    scorer = Scorer(args.device)

    def keep(rec: dict) -> None:
        rec = scorer.score(rec, by_id[rec["task_id"]])
        records.append(rec)
        print(f"{rec['engine']:>14} {rec['task_id']:<36} acc={rec['accepted']:d} fin={rec['finished']:d} "
              f"valid={rec['valid']:d} wall={_f(rec['wall_s'], 1)}s | {(rec['text'] or rec['error'] or '')[:60]!r}",
              flush=True)
        if sink:
            sink.write(json.dumps(rec, ensure_ascii=False) + "\n")
            sink.flush()

    try:
        # engine-major: a run cut short has complete rows for its first engines
        for engine, row in zip(engines, rows):
            todo = [t for t in tasks if (row, t["task_id"]) not in done]
            if not todo:
                continue
            if engine in SMC_ENGINES:
                for t in todo:
                    keep(run_smc(lm, t, engine, args.smc_seed))
            else:
                for rec in run_peer(engine, todo, args.request_timeout, args.peer_memory_gb, args.device):
                    keep(rec)
    finally:
        if sink:
            sink.close()
    print(summarize(records))
    return records


if __name__ == "__main__":
    main()
