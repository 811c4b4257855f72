"""MaskBench (github.com/guidance-ai/jsonschemabench, maskbench/data) through JSONSchema.

For every schema file {"schema", "tests": [{"valid", "data"}]} of the corpus: compile
JSONSchema(schema, whitespace="flexible") lifted to the embedded model's tokenizer; for every
test, x = json.dumps(data, ensure_ascii=False) is tokenized and forced token by token
(logw_subset of the one forced token: the "check" time), with the full next-token mask
(logw_next: the "mask" time) taken before every --mask-every-th token, where the mask's entry
for the forced token must agree with the check (counted); then EOS (complete).
Times are the worker thread's CPU time (time.thread_time), which a machine shared with other
jobs inflates far less than wall-clock time; the mask's wall-clock time is reported beside it,
and its CPU time less the garbage collector's passes that ran inside it (``gc.callbacks``: a
pass lands in whichever call allocates past the threshold, so that figure shows the masks'
own cost).
The first mask of a worker builds the vocabulary tables shared by all schemas (seconds); the
worker builds them before its first schema so no schema's figure includes that.

A schema passes
    with the EOS check      when every valid instance has all its tokens accepted and complete
                            == 0, and every invalid one has a token rejected or complete == -inf;
    with the prefix rule    (MaskBench's own) when every valid instance has all its tokens
                            accepted, and every invalid one has a token rejected (its last
                            included): EOS is never asked.
Counted besides: compile errors (a ValueError/TypeError from the constructor: the schema is
refused with a message), crashes (any other exception), timeouts (--timeout seconds per schema,
enforced by killing the worker process that runs it), and how often a test's label disagrees
with ``jsonschema``'s validator for the schema's declared draft (with format checking).

Usage (from the repository root):
    python benchmarks/bench_maskbench.py [--corpus DIR] [--split S] [--every K] [--limit N]
        [--timeout 60] [--mask-every 4] [--out results.jsonl] [--summary-only results.jsonl]
Without options (as `make bench` runs it) a stratified sample: every 50th file, masks before
every 4th token (a few minutes). The whole corpus: --every 1 (--mask-every 0 to count passes
only, about 20 minutes on 2 cores). Without the corpus (../shared/corpora/maskbench) it says so
and exits 0; a --corpus that does not exist is an error.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import re
import sys
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# ../shared/corpora/maskbench beside the checkout (a worktree one level deeper looks higher up)
_CANDIDATES = [ROOT.parent / "shared" / "corpora" / "maskbench",
               ROOT.parent.parent / "shared" / "corpora" / "maskbench"]
DEFAULT_CORPUS = next((c for c in _CANDIDATES if c.is_dir()), _CANDIDATES[0])


def split_of(name: str) -> str:
    """The MaskBench split of a file name: Github_easy_12.json -> Github_easy,
    Glaiveai2K---calculate_area_3.json -> Glaiveai2K."""
    return re.sub(r"_[0-9]+\.json$", "", name.split("---")[0])


class TokenizerOnly:
    """What ``Lifted`` needs of an LM (vocabulary bytes, EOS and special ids), no model."""

    def __init__(self) -> None:
        from transformers import AutoTokenizer

        from smc.backends.vocab import build_vocab
        from smc.backends.loading import embedded_model_dir

        self.tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
        self.vocab, special = build_vocab(self.tokenizer, len(self.tokenizer))
        self.eos_token_ids = [int(self.tokenizer.eos_token_id)]
        self.special_token_ids = frozenset(special - set(self.eos_token_ids))

    def encode(self, text: str) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if b"".join(self.vocab[i] for i in ids) != text.encode("utf-8", "surrogatepass"):
            raise RuntimeError("the tokenizer does not round-trip the instance")
        return ids


def declared_verdict(schema, data) -> bool | None:
    """jsonschema's verdict for the schema's declared draft, with format checking
    (None when jsonschema itself cannot decide)."""
    import jsonschema

    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        return bool(cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(data))
    except Exception:
        return None


def run_schema(lm: TokenizerOnly, path: Path, mask_every: int) -> dict:
    import asyncio

    from potentials import JSONSchema
    from potentials.lift import Lifted

    doc = json.loads(path.read_text(encoding="utf-8"))
    out: dict = {"name": path.name, "split": split_of(path.name), "tests": [],
                 "check_us": [], "mask_us": [], "mask_wall_us": [], "mask_gc_us": [],
                 "mask_vs_check": 0}
    t0 = time.perf_counter()
    try:
        pot = JSONSchema(doc["schema"], whitespace="flexible")
    except (ValueError, TypeError) as err:
        out["status"], out["error"] = "compile_error", str(err).splitlines()[0][:300]
        return out
    lifted = Lifted(pot, lm)
    out["compile_s"] = time.perf_counter() - t0

    async def force(ids: list[int]) -> tuple[int | None, bool]:
        for i, t in enumerate(ids):
            ctx = tuple(ids[:i])
            row = None
            if mask_every and i % mask_every == 0:
                g, s, c = GC_TIME[0], time.perf_counter(), time.thread_time()
                row = await lifted.logw_next(ctx)
                out["mask_us"].append((time.thread_time() - c) * 1e6)
                out["mask_wall_us"].append((time.perf_counter() - s) * 1e6)
                out["mask_gc_us"].append((GC_TIME[0] - g) * 1e6)
            c = time.thread_time()
            w = (await lifted.logw_subset(ctx, [t]))[0]
            out["check_us"].append((time.thread_time() - c) * 1e6)
            if row is not None and (row[t] == -np.inf) != (w == -np.inf):
                out["mask_vs_check"] += 1  # the mask and the check disagree on this token
            if w == -np.inf:
                return i, False
        return None, (await lifted.complete(tuple(ids))) == 0.0

    for test in doc["tests"]:
        text = json.dumps(test["data"], ensure_ascii=False)
        ids = lm.encode(text)
        died, complete_ok = asyncio.run(force(ids))
        out["tests"].append({
            "valid": bool(test["valid"]),
            "jsonschema": declared_verdict(doc["schema"], test["data"]),
            "tokens": len(ids),
            "died_at": died,
            "complete": complete_ok,
        })
    out["status"] = "ok"
    return out


#: CPU seconds the garbage collector has spent in this process, and when its pass began
GC_TIME = [0.0, 0.0]


def _time_gc(phase: str, info: dict) -> None:
    if phase == "start":
        GC_TIME[1] = time.thread_time()
    else:
        GC_TIME[0] += time.thread_time() - GC_TIME[1]


def worker(conn, mask_every: int) -> None:
    import asyncio
    import gc

    gc.callbacks.append(_time_gc)

    from potentials import JSONSchema
    from potentials.lift import Lifted

    lm = TokenizerOnly()
    # the vocabulary tries and plain-token tables, shared by every lifted potential (a string
    # with a pattern builds the plain tokens' byte and character tries)
    warm = Lifted(JSONSchema(True), lm)
    asyncio.run(warm.logw_next(()))
    asyncio.run(warm.logw_next(tuple(lm.encode('"a'))))
    asyncio.run(Lifted(JSONSchema({"pattern": "^a"}), lm).logw_next(tuple(lm.encode('"'))))
    conn.send("ready")
    while True:
        path = conn.recv()
        if path is None:
            return
        try:
            res = run_schema(lm, Path(path), mask_every)
        except BaseException as err:  # a crash is a result to count, not a reason to stop
            res = {"name": Path(path).name, "split": split_of(Path(path).name),
                   "status": "crash", "error": f"{type(err).__name__}: {err}"[:300],
                   "trace": traceback.format_exc()[-1500:], "tests": [],
                   "check_us": [], "mask_us": [], "mask_wall_us": []}
        conn.send(res)


class Runner:
    """One worker process; a schema that runs past the timeout kills it (a new one starts)."""

    def __init__(self, mask_every: int):
        self.mask_every = mask_every
        self.proc = None

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker, args=(child, self.mask_every), daemon=True)
        self.proc.start()
        if not self.conn.poll(300) or self.conn.recv() != "ready":
            raise RuntimeError("the worker process did not start")

    def run(self, path: Path, timeout: float) -> dict:
        if self.proc is None or not self.proc.is_alive():
            self.start()
        self.conn.send(str(path))
        if self.conn.poll(timeout):
            try:
                return self.conn.recv()
            except EOFError:
                pass  # the worker died (e.g. out of memory): a crash
            status = "crash"
        else:
            status = "timeout"
        self.proc.kill()
        self.proc.join()
        self.proc = None
        return {"name": path.name, "split": split_of(path.name), "status": status,
                "tests": [], "check_us": [], "mask_us": [], "mask_wall_us": []}

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.conn.send(None)
            self.proc.join(10)


def verdicts(res: dict) -> dict:
    """Per-schema outcome counts under both rules."""
    v = Counter()
    for t in res["tests"]:
        prefix_accepts = t["died_at"] is None
        eos_accepts = prefix_accepts and t["complete"]
        if t["valid"]:
            v["valid_rejected_eos"] += not eos_accepts
            v["valid_rejected_prefix"] += not prefix_accepts
            if not eos_accepts and t["jsonschema"] is True:
                v["valid_rejected_jsonschema_accepts"] += 1
        else:
            v["invalid_accepted_eos"] += eos_accepts
            v["invalid_accepted_prefix"] += prefix_accepts
    return v


def summarize(results: list[dict]) -> str:
    by_split: dict = defaultdict(list)
    for r in results:
        by_split[r["split"]].append(r)
    rows = []
    head = ("split", "schemas", "pass_eos", "pass_prefix", "compile_err", "crash", "timeout",
            "valid_rej", "valid_rej_js_ok", "inval_acc_eos", "inval_acc_prefix", "label!=js")
    for split in sorted(by_split) + ["TOTAL"]:
        rs = results if split == "TOTAL" else by_split[split]
        c = Counter()
        for r in rs:
            c[r["status"]] += 1
            if r["status"] != "ok":
                continue
            v = verdicts(r)
            c["pass_eos"] += v["valid_rejected_eos"] == 0 and v["invalid_accepted_eos"] == 0
            c["pass_prefix"] += (v["valid_rejected_prefix"] == 0
                                 and v["invalid_accepted_prefix"] == 0)
            for k in ("valid_rejected_eos", "valid_rejected_jsonschema_accepts",
                      "invalid_accepted_eos", "invalid_accepted_prefix"):
                c[k] += v[k]
            c["label_vs_js"] += sum(t["jsonschema"] is not None and t["jsonschema"] != t["valid"]
                                    for t in r["tests"])
        rows.append((split, len(rs), c["pass_eos"], c["pass_prefix"], c["compile_error"],
                     c["crash"], c["timeout"], c["valid_rejected_eos"],
                     c["valid_rejected_jsonschema_accepts"], c["invalid_accepted_eos"],
                     c["invalid_accepted_prefix"], c["label_vs_js"]))
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    lines = ["  ".join(str(x).rjust(w) for x, w in zip(row, widths)) for row in [head, *rows]]
    check = np.concatenate([r["check_us"] for r in results] + [np.zeros(0)])
    mask = np.concatenate([r["mask_us"] for r in results] + [np.zeros(0)])
    if len(mask):
        lines.append(f"masks disagreeing with the single-token check of the forced token: "
                     f"{sum(r.get('mask_vs_check', 0) for r in results)} of {len(mask)}")
    wall = np.concatenate([r.get("mask_wall_us", []) for r in results] + [np.zeros(0)])
    in_gc = np.concatenate([r.get("mask_gc_us", []) for r in results] + [np.zeros(0)])
    own = mask - in_gc if len(in_gc) == len(mask) else np.zeros(0)
    for name, xs in (("single-token check (CPU time)", check),
                     ("full next-token mask (CPU time)", mask),
                     ("full next-token mask (wall clock)", wall),
                     ("full next-token mask (CPU time less the collector's passes in it)", own)):
        if len(xs):
            p = np.percentile(xs, [50, 90, 99])
            lines.append(f"{name}: n={len(xs)}  p50 {p[0]:.0f} us  p90 {p[1]:.0f} us  "
                         f"p99 {p[2]:.0f} us  max {xs.max():.0f} us")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, default=None,
                    help=f"the maskbench folder (default: {DEFAULT_CORPUS})")
    ap.add_argument("--split", action="append", help="only these splits (repeatable)")
    ap.add_argument("--every", type=int, default=50, help="every K-th file (after --split)")
    ap.add_argument("--offset", type=int, default=0, help="start at this file (with --every)")
    ap.add_argument("--limit", type=int, default=None, help="at most N files")
    ap.add_argument("--name", action="append", help="only these file names (repeatable)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per schema")
    ap.add_argument("--mask-every", type=int, default=4,
                    help="time the full mask before every K-th forced token (0: never)")
    ap.add_argument("--out", type=Path, help="write one JSON line per schema here")
    ap.add_argument("--summary-only", type=Path, help="summarize an earlier --out file")
    ap.add_argument("--failures", action="store_true", help="list failing schemas")
    args = ap.parse_args()

    if args.summary_only:
        results = [json.loads(x) for x in args.summary_only.read_text().splitlines() if x]
    else:
        corpus = args.corpus or DEFAULT_CORPUS
        if not corpus.is_dir():
            msg = f"MaskBench corpus not found at {corpus}"
            if args.corpus is not None:
                sys.exit(f"error: {msg}")
            print(f"skipped: {msg} (pass --corpus DIR; see ../shared/corpora/README.md)")
            return
        files = sorted(corpus.glob("*.json"))
        if args.split:
            files = [f for f in files if split_of(f.name) in args.split]
        if args.name:
            files = [f for f in files if f.name in args.name]
        if args.every < 1 or args.mask_every < 0 or args.timeout <= 0:
            sys.exit("error: --every must be >= 1, --mask-every >= 0 and --timeout > 0")
        files = files[args.offset::args.every][: args.limit]
        print(f"# {len(files)} schemas from {corpus} (every {args.every}, offset {args.offset}), "
              f"timeout {args.timeout:g} s, "
              + (f"masks before every {args.mask_every}-th token" if args.mask_every
                 else "no masks"),
              flush=True)
        runner = Runner(args.mask_every)
        results = []
        sink = args.out.open("w") if args.out else None
        t0 = time.time()
        try:
            for k, f in enumerate(files):
                res = runner.run(f, args.timeout)
                results.append(res)
                if sink:
                    sink.write(json.dumps(res) + "\n")
                    sink.flush()
                if (k + 1) % 100 == 0:
                    print(f"[{k + 1}/{len(files)} schemas, {time.time() - t0:.0f} s]",
                          file=sys.stderr)
        finally:
            runner.close()
            if sink:
                sink.close()
    print(summarize(results))
    if args.failures:
        for r in results:
            v = verdicts(r)
            bad = {k: n for k, n in v.items() if n}
            if r["status"] != "ok" or bad:
                print(r["name"], r["status"], r.get("error", ""), dict(bad))


if __name__ == "__main__":
    main()
