"""Command line: ``python -m smc generate (--prompt TEXT | --messages FILE.json) [--system TEXT]
(--regex R | --grammar F | --json-schema F | --choice S [S ...])``, ``python -m smc serve [--model NAME]
[--backend hf|vllm] [--host H] [--port P] [--api-key KEY] [--reasoning]`` (smc.api.server, docs/serving.md),
and ``python -m smc batch -i IN.jsonl -o OUT.jsonl [--ray [ADDRESS]]`` (smc.api.batch,
smc.api.batch_ray, docs/batch.md).

The prompt follows the one prompt rule (smc.backends.prompts): ``--prompt`` text goes through
the model's chat template when it has one; ``--messages`` is a JSON list of
``{"role", "content"}`` messages (system prompt, few-shot turns) and needs a chat template;
``--system`` puts a system turn first (with ``--prompt``: the conversation system + user).

Prints the posterior over finished texts (or, with ``--json``, one JSON object: samples,
posterior, log_ml, ess, stats; a log value of -inf is written as null). Bad input gets one line
on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from potentials import Grammar, JSONSchema, Regex
from potentials.choice import Choice
from samplers import SAMPLERS
from smc.api.batch import BatchSummary, arun_job, default_model_name, open_job, resolve_factory
from smc.api.batch_ray import run_batch_ray
from smc.api.generation import generate, run_sync
from smc.api.openai import Limits, Reasoning
from smc.api.request import Request
from smc.api.server import EMBEDDED_NAME, serve
from smc.backends.loading import load_lm
from smc.backends.prompts import chat_messages, check_messages, check_text
from smc.core import defaults
from smc.engine.search import METHODS


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage dump
        raise _UsageError(message)


class _UsageError(Exception):
    pass


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m smc", description="Constrained generation by SMC.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    g = sub.add_parser("generate", help="sample constrained text from an LM")
    g.add_argument("--prompt", metavar="TEXT", help="prompt text (one user turn when the model has a chat template)")
    g.add_argument("--messages", type=Path, metavar="FILE.json",
                   help='JSON list of chat messages [{"role": ..., "content": ...}, ...] '
                        "(instead of --prompt)")
    g.add_argument("--system", metavar="TEXT", help="system message put before the prompt")
    which = g.add_mutually_exclusive_group(required=True)
    which.add_argument("--regex", help="regular expression the output must match")
    which.add_argument("--grammar", type=Path, help="Lark grammar file the output must parse with")
    which.add_argument("--json-schema", type=Path, help="JSON Schema file the output must satisfy")
    which.add_argument("--choice", nargs="+", metavar="S", help="the output is one of these strings")
    g.add_argument("--strict", action="store_true",
                   help="with --json-schema: close the schema's open objects (no keys it does not "
                        "name), as xgrammar and OpenAI's strict mode do; outputs stay valid under it")
    g.add_argument("--particles", type=int, default=None, help=f"N (default {defaults.PARTICLES})")
    g.add_argument("--max-tokens", type=int, default=None, help=f"default {defaults.MAX_TOKENS}")
    g.add_argument("--seed", type=int, default=None, help=f"default {defaults.SEED}")
    g.add_argument("--islands", type=int, default=None,
                   help="independent SMC islands, a divisor of --particles (default: islands of "
                        f"at least {defaults.ISLAND_SIZE} particles, at most {defaults.ISLANDS}; "
                        "1 is one population)")
    g.add_argument("--finish-share", type=float, default=None,
                   help="bank this share of the EOS mass wherever the text could end (0 <= S < 1; "
                        "every complete text the particles pass becomes a sample)")
    g.add_argument("--lookahead", type=float, default=None,
                   help="steer toward texts short to complete, RATE nats per byte of detour; it "
                        "acts on a --regex with backreferences (same target; default 1.0; 0: off)")
    g.add_argument("--per-byte", type=float, default=None,
                   help="the budget twist's nats per byte still to write: it keeps the particles "
                        "from following one that is behind in the document (same target; "
                        "with --method beam it ranks the beams; "
                        f"default {defaults.PER_BYTE} for a --json-schema run, else 0)")
    g.add_argument("--temperature", type=float, default=None,
                   help="T > 0: the target's LM is softmax(logits / T) at every step (default 1)")
    g.add_argument("--top-p", type=float, default=None,
                   help="0 < P <= 1: the target's LM keeps, per step, the most probable tokens of "
                        "mass >= P (default 1: all)")
    g.add_argument("--sampler", choices=sorted(SAMPLERS), default=None, help=f"default {defaults.SAMPLER}")
    g.add_argument("--ess-threshold", type=float, default=None,
                   help=f"resample when ESS < this * N (default {defaults.ESS_THRESHOLD}; 0: never)")
    g.add_argument("--resampling", default=None, help=f"scheme (default {defaults.RESAMPLING})")
    g.add_argument("--resampling-power", type=float, default=None,
                   help="0 < A <= 1: draw ancestors by the weights to the power A, the children "
                        f"carrying the rest (default {defaults.RESAMPLING_POWER} under a JSON Schema, "
                        "else 1)")
    g.add_argument("--method", choices=list(METHODS), default=None,
                   help="smc (default); beam / top_k: --particles best sequences (deterministic); "
                        "steer: without-replacement steering (see docs/beam.md)")
    g.add_argument("--n-beam", type=int, default=None, help="children kept per particle (--method steer)")
    g.add_argument("--max-expansions", type=int, default=None,
                   help=f"most particles --method top_k expands (default {defaults.MAX_EXPANSIONS})")
    g.add_argument("--model", default=None, help="HF model id or directory (default: embedded SmolLM2)")
    g.add_argument("--backend", choices=["hf", "vllm", "mlx"], default="hf")
    g.add_argument("--checkpoint", type=Path, default=None,
                   help="write the run's state here after every step (smc.resume continues it)")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    s = sub.add_parser("serve", help="serve the model over an OpenAI-compatible HTTP API")
    s.add_argument("--model", default=None, help="HF model id or directory (default: embedded SmolLM2)")
    s.add_argument("--backend", choices=["hf", "vllm", "mlx"], default="hf")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY")
    s.add_argument("--served-model-name", default=None,
                   help="the model's name in requests and /v1/models (default: --model, or "
                        f"{EMBEDDED_NAME!r})")
    s.add_argument("--max-particles", type=int, default=Limits.max_particles,
                   help=f"most particles per request (default {Limits.max_particles})")
    s.add_argument("--max-running", type=int, default=Limits.max_running,
                   help=f"most runs at once; later requests wait (default {Limits.max_running})")
    s.add_argument("--reasoning", action="store_true",
                   help="chat answers think first (<think>...</think>, returned as reasoning_content) "
                        "unless a request turns it off (reasoning: false, or chat_template_kwargs "
                        "enable_thinking: false)")
    s.add_argument("--reasoning-max-bytes", type=int, default=None, metavar="B",
                   help="default bound on the reasoning's UTF-8 bytes (default: only max_tokens)")
    b = sub.add_parser("batch", help="answer an OpenAI batch file (JSONL), resumably")
    b.add_argument("-i", "--input", type=Path, required=True, metavar="IN.jsonl",
                   help='requests, one per line: {"custom_id", "method": "POST", "url", "body"}')
    b.add_argument("-o", "--output", type=Path, required=True, metavar="OUT.jsonl",
                   help="results, one line per custom_id; an existing file is resumed")
    b.add_argument("--model", default=None, help="HF model id or directory (default: embedded SmolLM2)")
    b.add_argument("--backend", choices=["hf", "vllm", "mlx"], default="hf")
    b.add_argument("--lm-factory", default=None, metavar="MODULE:FUNCTION",
                   help="build the LM by calling this function (instead of --model/--backend)")
    b.add_argument("--lm-kwargs", default=None, metavar="JSON",
                   help='keyword arguments of the LM loader, e.g. \'{"tensor_parallel_size": 2}\'')
    b.add_argument("--served-model-name", default=None,
                   help="the one model name bodies may give (default: --model, or "
                        f"{EMBEDDED_NAME!r}); a body naming another is an error line")
    b.add_argument("--concurrency", type=int, default=defaults.BATCH_CONCURRENCY,
                   help="requests in flight at once per process (per Ray worker with --ray); "
                        f"default {defaults.BATCH_CONCURRENCY}")
    b.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="per-request time limit: a request past it is an error line (408)")
    b.add_argument("--retry-errors", action="store_true",
                   help="run the output's error lines again (default: keep them)")
    b.add_argument("--ray", nargs="?", const=True, default=None, metavar="ADDRESS",
                   help="run on a Ray cluster (ADDRESS, else RAY_ADDRESS, else a local Ray)")
    b.add_argument("--workers", type=int, default=None,
                   help="Ray actors (default: one per GPU, else one per --cpus-per-worker CPUs)")
    b.add_argument("--cpus-per-worker", type=float, default=1.0, help="CPUs each Ray actor reserves")
    b.add_argument("--gpus-per-worker", type=float, default=None,
                   help="GPUs each Ray actor reserves (default 1 on a cluster with GPUs; a "
                        "tensor-parallel vLLM engine needs its tensor_parallel_size)")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _read(path: Path, what: str) -> str:
    """The UTF-8 text of ``path``; ValueError naming the file when it cannot be read as such."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read {what} file {str(path)!r}: {e.strerror or e}") from e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{what} file {str(path)!r} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})"
        ) from None


def _prompt(args: argparse.Namespace):
    """The prompt the flags describe: text, or a list of chat messages (--messages, --system)."""
    if args.prompt is None and args.messages is None:
        raise ValueError("the following arguments are required: --prompt (or --messages FILE.json)")
    if args.prompt is not None and args.messages is not None:
        raise ValueError("give either --prompt or --messages, not both")
    system = None if args.system is None else check_text(args.system, "--system")
    if args.messages is None:
        text = check_text(args.prompt, "--prompt")
        return text if system is None else chat_messages(text, system)
    source = _read(args.messages, "messages")
    try:
        data = json.loads(source)
    except json.JSONDecodeError as e:
        raise ValueError(f"messages file {str(args.messages)!r} is not valid JSON: {e}") from e
    messages = check_messages(data, "--messages")
    if system is not None:
        if messages[0]["role"] == "system":
            raise ValueError("--system is given but the --messages file already starts with a "
                             "system message")
        messages = chat_messages(messages, system)
    return messages


def _constraint(args: argparse.Namespace):
    if args.strict and args.json_schema is None:
        raise ValueError("--strict applies to --json-schema")
    if args.regex is not None:
        return Regex(check_text(args.regex, "--regex"))
    if args.grammar is not None:
        return Grammar(_read(args.grammar, "grammar"))
    if args.choice is not None:
        return Choice([check_text(s, "--choice") for s in args.choice])
    text = _read(args.json_schema, "JSON Schema")
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"JSON Schema file {str(args.json_schema)!r} is not valid JSON: {e}") from e
    return JSONSchema(schema, strict=args.strict)


#: flag -> Request field, for the settings that are passed only when given (the Request holds
#: the defaults, smc.core.defaults)
SETTING_FLAGS = ("particles", "max_tokens", "seed", "islands", "finish_share", "lookahead", "per_byte",
                 "sampler", "ess_threshold", "resampling", "resampling_power", "method", "n_beam", "max_expansions",
                 "checkpoint", "temperature", "top_p")


def request_of(args: argparse.Namespace) -> Request:
    """The Request the flags describe (validated: the same rules as ``smc.generate``)."""
    settings = {k: getattr(args, k) for k in SETTING_FLAGS if getattr(args, k) is not None}
    return Request(_prompt(args), _constraint(args), **settings)


def _serve(args: argparse.Namespace) -> int:
    if not 0 <= args.port < 65536:
        raise ValueError(f"--port must be in [0, 65535], got {args.port}")
    for flag, value in (("--max-particles", args.max_particles), ("--max-running", args.max_running)):
        if value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    if args.reasoning_max_bytes is not None and args.reasoning_max_bytes < 1:
        raise ValueError(f"--reasoning-max-bytes must be >= 1, got {args.reasoning_max_bytes}")
    serve(args.model, args.backend, host=args.host, port=args.port, api_key=args.api_key,
          limits=Limits(max_particles=args.max_particles, max_running=args.max_running),
          name=args.served_model_name, reasoning=Reasoning(args.reasoning, args.reasoning_max_bytes))
    return 0


def _factory(args: argparse.Namespace) -> tuple[object, tuple, dict]:
    """(factory, args, kwargs) that build the batch's LM: --lm-factory, else load_lm(--model,
    backend=--backend), with --lm-kwargs."""
    kwargs = {}
    if args.lm_kwargs is not None:
        try:
            kwargs = json.loads(args.lm_kwargs)
        except json.JSONDecodeError as e:
            raise ValueError(f"--lm-kwargs is not valid JSON: {e}") from None
        if not isinstance(kwargs, dict):
            raise ValueError("--lm-kwargs must be a JSON object")
    if args.lm_factory is not None:
        if args.model is not None:
            raise ValueError("give --lm-factory or --model, not both")
        return resolve_factory(args.lm_factory), (), kwargs
    return load_lm, (args.model,), {"backend": args.backend, **kwargs}


def _summary_line(s: BatchSummary, output: Path) -> str:
    done = f"{s.succeeded + s.failed} answered ({s.failed} error lines)"
    kept = f", {s.already} already in {output}" if s.already else ""
    errs = f" ({s.kept_errors} error lines kept; --retry-errors runs them again)" if s.kept_errors else ""
    moved = f", {s.reassigned} moved off dead workers" if s.reassigned else ""
    end = "every request has its line" if s.complete else "INCOMPLETE: rerun the same command to resume"
    return f"{done}{kept}{errs}{moved} in {s.wall_time_s:.1f}s; {end}"


def _batch(args: argparse.Namespace) -> int:
    if args.concurrency < 1:
        raise ValueError(f"--concurrency must be >= 1, got {args.concurrency}")
    if args.timeout is not None and not args.timeout > 0:
        raise ValueError(f"--timeout must be > 0 seconds, got {args.timeout}")
    factory, fargs, fkwargs = _factory(args)
    name = args.served_model_name or default_model_name(args.model)
    progress = False if args.quiet else True
    if args.ray is not None:
        summary = run_batch_ray(args.input, args.output, factory, fargs, fkwargs, model_name=name,
                                address=None if args.ray is True else args.ray, workers=args.workers,
                                cpus_per_worker=args.cpus_per_worker, gpus_per_worker=args.gpus_per_worker,
                                in_flight=args.concurrency, timeout=args.timeout,
                                retry_errors=args.retry_errors, progress=progress)
    else:
        if args.workers is not None or args.gpus_per_worker is not None:
            raise ValueError("--workers and --gpus-per-worker are for --ray runs")
        # the files are checked (and the output locked) before the model loads
        with open_job(args.input, args.output, retry_errors=args.retry_errors) as job:
            lm = factory(*fargs, **fkwargs) if job.pending else None
            summary = run_sync(lambda: arun_job(job, lm, name, concurrency=args.concurrency,
                                                timeout=args.timeout, progress=progress))
    print(_summary_line(summary, args.output), file=sys.stderr)
    return 0


def _generate(args: argparse.Namespace) -> int:
    request = request_of(args)  # every bad flag is refused before the model loads
    lm = load_lm(args.model, backend=args.backend)
    result = generate(request, lm=lm, progress=False if args.quiet else None)
    if args.json:
        print(json.dumps(result.to_dict(), ensure_ascii=False))
        return 0
    post = result.posterior
    if not post:
        print("no finished sample satisfies the constraint (log_ml = -inf)")
    for text, prob in post.items():
        print(f"{prob:8.4f}  {text!r}")
    print(f"log_ml = {result.log_ml:.4f}   ess = {result.ess:.2f}   "
          f"time = {result.stats['wall_time_s']:.2f}s")
    return 0


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status: 0, 2 for bad input (one line on stderr), 130 when
    interrupted (one line). Unexpected internal errors still raise, with their traceback."""
    try:
        args = build_parser().parse_args(argv)
        commands = {"serve": _serve, "batch": _batch, "generate": _generate}
        return commands[args.command](args)
    except _UsageError as e:
        print(f"error: {e}", file=sys.stderr)
    except (ValueError, TypeError, OSError, ImportError, KeyError) as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
    except MemoryError as e:
        print(f"error: out of memory ({_one_line(e)}); try fewer --particles or --max-tokens",
              file=sys.stderr)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
