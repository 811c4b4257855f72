"""The masking engines of bench_sidebyside.py: llguidance, xgrammar and outlines, each through its
own transformers integration, on the task file's prompt ids.

Runs in the engine's own venv (``.venv-peers/<engine>``, built by ``bench_sidebyside.py
--setup``) and imports nothing of smc-steer. For every task (one JSON line: schema, prompt_ids,
model_dir, eos_token_ids, max_tokens) it compiles the schema (timed: ``compile_s``), then
generates with ``model.generate(prompt_ids, max_new_tokens=max_tokens, logits_processor=...)``
under the model's own generation config, which for the embedded model is greedy decoding (the
way each engine's transformers example calls generate: no sampling arguments). Per engine:

    llguidance  LLMatcher(from_tokenizer(tok), LLMatcher.grammar_from_json_schema(S)) and a
                transformers LogitsProcessor that fills llguidance's token bitmask
                (llguidance.torch.fill_next_token_bitmask / apply_token_bitmask_inplace) and
                consumes each chosen token: the matcher loop of llguidance's Python docs, as
                llguidance ships no processor class of its own
    xgrammar    GrammarCompiler(TokenizerInfo.from_huggingface(tok, vocab_size=config's))
                .compile_json_schema(S) and xgr.contrib.hf.LogitsProcessor
    outlines    outlines.from_transformers(model, tok) and outlines.Generator(model,
                outlines.types.JsonSchema(S)), called on the task's chat messages
                (outlines.inputs.Chat: outlines applies the chat template itself); the prompt
                ids it gives the model are checked to be the task's, and the output ids are
                read from the sequences model.generate returned

Before any task, llguidance's reading of the token ids is checked against the tokenizer's
(``check_token_bytes``); an engine that misreads them exits with UNUSABLE, and every task gets
that reason. A schema the engine refuses (an exception while compiling, or llguidance's
matcher in its error state) is ``accepted: false`` with the error text. An output is ``finished`` when it ended with
EOS within max_tokens, or reached max_tokens as one complete JSON text (``ended_by``: "eos" or
"budget"); ``token_ids`` exclude the EOS.

The model runs on ``--device`` (default cpu; bench_sidebyside.py passes its own), in float32.

    .venv-peers/xgrammar/bin/python benchmarks/peers/masking.py --engine xgrammar \\
        --tasks-file tasks.jsonl --out records.jsonl [--device cuda]
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import sys
import time
import warnings

ENGINES = ("llguidance", "xgrammar", "outlines")
#: the exit status of a runner whose engine cannot run on this model at all (``check_token_bytes``):
#: bench_sidebyside.py then gives every task of the engine that reason at once
UNUSABLE = 3


def versions(engine: str) -> dict[str, str]:
    names = ["torch", "transformers", engine] + (["outlines-core"] if engine == "outlines" else [])
    return {n: md.version(n) for n in names}


class Engine:
    """Compile a schema (``compile``) and decode one output (``generate``) for one engine."""

    def __init__(self, engine: str, model, tokenizer, eos_ids: list[int]) -> None:
        import torch

        self.name, self.model, self.tok, self.eos_ids, self.torch = engine, model, tokenizer, eos_ids, torch
        self.device = model.device
        if engine == "llguidance":
            import llguidance.hf

            self.lltok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=model.config.vocab_size)
            check_token_bytes(self.lltok.decode_bytes, tokenizer)
        elif engine == "xgrammar":
            import xgrammar as xgr

            info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=model.config.vocab_size)
            self.compiler = xgr.GrammarCompiler(info)
        else:
            import outlines

            self.outlines_model = outlines.from_transformers(model, tokenizer)

    def compile(self, schema):
        if self.name == "llguidance":
            import llguidance

            grammar = llguidance.LLMatcher.grammar_from_json_schema(schema)
            matcher = llguidance.LLMatcher(self.lltok, grammar, log_level=0)
            if matcher.is_error():
                raise ValueError(matcher.get_error())
            return matcher
        if self.name == "xgrammar":
            return self.compiler.compile_json_schema(json.dumps(schema))
        import outlines
        from outlines.types import JsonSchema

        return outlines.Generator(self.outlines_model, JsonSchema(schema))

    def generate(self, compiled, prompt_ids: list[int], messages: list[dict], max_tokens: int) -> list[int]:
        """The generated ids (EOS included when the output ended)."""
        torch = self.torch
        input_ids = torch.tensor([prompt_ids], device=self.device)
        kw = {"max_new_tokens": max_tokens, "attention_mask": torch.ones_like(input_ids)}
        if self.name == "xgrammar":
            import xgrammar as xgr

            out = self.model.generate(input_ids, logits_processor=[xgr.contrib.hf.LogitsProcessor(compiled)], **kw)
            return out[0, len(prompt_ids):].tolist()
        if self.name == "llguidance":
            out = self.model.generate(input_ids, logits_processor=[LLGuidanceProcessor(compiled)], **kw)
            return out[0, len(prompt_ids):].tolist()
        # outlines takes text or chat messages: read back the ids model.generate received and returned
        from outlines.inputs import Chat

        seen = []
        inner = self.model.generate

        def spy(*args, **kwargs):
            out = inner(*args, **kwargs)
            seen.append((kwargs.get("input_ids", args[0] if args else None), out))
            return out

        self.model.generate = spy
        try:
            compiled(Chat(messages), max_new_tokens=max_tokens)
        finally:
            self.model.generate = inner
        given, out = seen[-1]
        sequences = out.sequences if hasattr(out, "sequences") else out
        if given[0].tolist() != list(prompt_ids):
            raise RuntimeError("outlines read the chat messages into other prompt ids than the task's")
        return sequences[0, given.shape[1]:].tolist()


#: text whose tokens every engine must read back as these bytes: whitespace, punctuation and
#: multi-byte characters, where a tokenizer's decoder and its byte-level vocabulary can disagree
PROBE = '{\n  "name": "Ada Lovelace",\n\t"city": "Zürich — 日本", "n": [1, 2.5]}\r\n'


def check_token_bytes(decode_bytes, tokenizer) -> None:
    """Raise RuntimeError unless ``decode_bytes`` (the engine's reading of token ids) reads the
    ids ``tokenizer`` encodes PROBE into back as PROBE's bytes. transformers 5.17 writes the
    embedded GGUF's tokenizer.json with a byte-fallback decoder over a byte-level vocabulary,
    and llguidance's ``from_tokenizer`` then reads the newline token as the two bytes of "Ċ":
    every mask it computes is for other text than the model writes. smc-steer's conversion
    writes the byte-level decoder whatever the release (``set_byte_level_decoder``); a model
    directory converted otherwise can still carry the other."""
    want = PROBE.encode("utf-8")
    ids = tokenizer.encode(PROBE, add_special_tokens=False)
    at = 0
    for i in ids:
        got = decode_bytes([i])
        if want[at:at + len(got)] != got:
            raise RuntimeError(f"the engine reads token {i} as {got!r} where the text has {want[at:at + len(got)]!r}: "
                               "the tokenizer's decoder does not match its vocabulary (give tokenizer.json "
                               "the decoder its vocabulary needs: a byte-level one for a byte-level BPE)")
        at += len(got)
    if at != len(want):
        raise RuntimeError(f"the engine reads {PROBE!r} as {decode_bytes(ids)!r}")


def complete_json(text: str) -> bool:
    """Whether ``text`` is one whole JSON value: an output cut by the budget that is already
    complete counts as finished, as smc-steer's forced EOS at the budget keeps such a text."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


class LLGuidanceProcessor:
    """A transformers logits processor over one LLMatcher (batch of one): consume the token
    chosen at the previous step, then mask the logits to the matcher's allowed tokens."""

    def __init__(self, matcher) -> None:
        import llguidance.torch as lt

        self.matcher, self.lt, self.started = matcher, lt, False
        self.bitmask = None

    def __call__(self, input_ids, scores):
        if self.started:
            if not self.matcher.consume_token(int(input_ids[0, -1])):
                raise RuntimeError(f"llguidance refused its own token: {self.matcher.get_error()}")
        self.started = True
        if self.bitmask is None:
            self.bitmask = self.lt.allocate_token_bitmask(1, scores.shape[-1])
        self.lt.fill_next_token_bitmask(self.matcher, self.bitmask, 0)
        # the matcher fills a mask in host memory; the logits may be on a GPU
        self.lt.apply_token_bitmask_inplace(scores, self.bitmask.to(scores.device))
        return scores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", required=True, choices=ENGINES)
    ap.add_argument("--tasks-file", required=True)
    ap.add_argument("--out", required=True, help="append one record per task to this JSONL file")
    ap.add_argument("--device", default="cpu", help="where the model runs (cpu, cuda, cuda:N)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    tasks = [json.loads(ln) for ln in open(args.tasks_file, encoding="utf-8") if ln.strip()]
    if not tasks:
        raise SystemExit(f"{args.tasks_file} lists no tasks")
    model_dir = tasks[0]["model_dir"]
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(args.device)
    model.eval()
    eos_ids = tasks[0]["eos_token_ids"]
    if model.generation_config.do_sample:
        raise SystemExit("the model's generation config samples: the runs are meant greedy")
    try:
        engine = Engine(args.engine, model, tok, eos_ids)
    except RuntimeError as err:
        print(f"{args.engine} cannot run on this model: {err}", file=sys.stderr)
        raise SystemExit(UNUSABLE) from None
    vers = versions(args.engine)
    with open(args.out, "a", encoding="utf-8") as sink:
        for t in tasks:
            rec = {"engine": args.engine, "task_id": t["task_id"], "split": t["split"], "accepted": False,
                   "error": None, "finished": False, "text": None, "token_ids": None, "compile_s": None,
                   "wall_s": None, "tokens": None, "log_z": None, "versions": vers}
            t0 = time.perf_counter()
            try:
                compiled = engine.compile(t["schema"])
            except Exception as err:  # the engine's refusal, whatever its type, is the result
                rec["error"] = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:300] if str(err).strip() else ''}"
            else:
                rec["accepted"] = True
                rec["compile_s"] = time.perf_counter() - t0
                try:
                    with torch.no_grad():
                        ids = engine.generate(compiled, t["prompt_ids"], t["messages"], t["max_tokens"])
                except Exception as err:
                    rec["error"] = f"crash: {type(err).__name__}: {str(err).strip()[:300]}"
                else:
                    eos = bool(ids) and ids[-1] in eos_ids
                    out_ids = ids[:-1] if eos else ids
                    text = tok.decode(out_ids)
                    finished = eos or complete_json(text)
                    rec.update(finished=finished, ended_by="eos" if eos else "budget", token_ids=out_ids,
                               tokens=len(out_ids), text=text if finished else None,
                               unfinished_text=None if finished else text[:300])
                rec["wall_s"] = time.perf_counter() - t0
            sink.write(json.dumps(rec, ensure_ascii=False) + "\n")
            sink.flush()


if __name__ == "__main__":
    main()
