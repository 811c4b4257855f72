"""Command line: ``python -m smc generate (--prompt TEXT | --messages FILE.json) [--system TEXT]
(--regex R | --grammar F | --json-schema F | --choice S [S ...])``.

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
from smc.api.generation import generate
from smc.api.request import Request
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
    g.add_argument("--particles", type=int, default=None, help=f"N (default {defaults.PARTICLES})")
    g.add_argument("--max-tokens", type=int, default=None, help=f"default {defaults.MAX_TOKENS}")
    g.add_argument("--seed", type=int, default=None, help=f"default {defaults.SEED}")
    g.add_argument("--islands", type=int, default=None,
                   help="independent SMC islands, a divisor of --particles (default: 4 from 16 "
                        "particles on, else 1; 1 is one population)")
    g.add_argument("--finish-share", type=float, default=None,
                   help="bank this share of the EOS mass wherever the text could end (0 <= S < 1; "
                        "every complete text the particles pass becomes a sample)")
    g.add_argument("--lookahead", type=float, default=None,
                   help="steer toward texts short to complete, RATE nats per byte of detour; it "
                        "acts on a --regex with backreferences (same target; default 1.0; 0: off)")
    g.add_argument("--sampler", choices=sorted(SAMPLERS), default=None, help=f"default {defaults.SAMPLER}")
    g.add_argument("--ess-threshold", type=float, default=None,
                   help=f"resample when ESS < this * N (default {defaults.ESS_THRESHOLD}; 0: never)")
    g.add_argument("--resampling", default=None, help=f"scheme (default {defaults.RESAMPLING})")
    g.add_argument("--method", choices=list(METHODS), default=None,
                   help="smc (default); beam / top_k: --particles best sequences (deterministic); "
                        "steer: without-replacement steering (see docs/beam.md)")
    g.add_argument("--n-beam", type=int, default=None, help="children kept per particle (--method steer)")
    g.add_argument("--model", default=None, help="HF model id or directory (default: embedded SmolLM2)")
    g.add_argument("--backend", choices=["hf", "vllm"], default="hf")
    g.add_argument("--checkpoint", type=Path, default=None,
                   help="write the run's state here after every step (smc.resume continues it)")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
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
    return JSONSchema(schema)


#: flag -> Request field, for the settings that are passed only when given (the Request holds
#: the defaults, smc.core.defaults)
SETTING_FLAGS = ("particles", "max_tokens", "seed", "islands", "finish_share", "lookahead",
                 "sampler", "ess_threshold", "resampling", "method", "n_beam", "checkpoint")


def request_of(args: argparse.Namespace) -> Request:
    """The Request the flags describe (validated: the same rules as ``smc.generate``)."""
    settings = {k: getattr(args, k) for k in SETTING_FLAGS if getattr(args, k) is not None}
    return Request(_prompt(args), _constraint(args), **settings)


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
        return _generate(args)
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
