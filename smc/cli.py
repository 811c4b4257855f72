"""Command line: ``python -m smc generate (--prompt TEXT | --messages FILE.json) [--system TEXT]
(--regex R | --grammar F | --json-schema F)``.

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

from samplers import SAMPLERS


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
    g.add_argument("--particles", type=int, default=16)
    g.add_argument("--max-tokens", type=int, default=32)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--islands", type=int, default=None,
                   help="independent SMC islands, a divisor of --particles (default: 4 from 16 "
                        "particles on, else 1; 1 is one population)")
    g.add_argument("--finish-share", type=float, default=0.0,
                   help="bank this share of the EOS mass wherever the text could end (0 <= S < 1; "
                        "every complete text the particles pass becomes a sample)")
    g.add_argument("--lookahead", type=float, default=None,
                   help="steer toward texts short to complete, RATE nats per byte of detour; it "
                        "acts on a --regex with backreferences (same target; default 1.0; 0: off)")
    g.add_argument("--sampler", choices=sorted(SAMPLERS), default="awrs")
    g.add_argument("--method", choices=["smc", "beam", "top_k", "steer"], default="smc",
                   help="smc (default); beam / top_k: --particles best sequences (deterministic); "
                        "steer: without-replacement steering (see docs/beam.md)")
    g.add_argument("--n-beam", type=int, default=None, help="children kept per particle (--method steer)")
    g.add_argument("--model", default=None, help="HF model id or directory (default: embedded SmolLM2)")
    g.add_argument("--backend", choices=["hf", "vllm", "mlx"], default="hf")
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
    from smc.backends.prompts import chat_messages, check_messages, check_text

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
        from potentials import Regex
        from smc.backends.prompts import check_text

        return Regex(check_text(args.regex, "--regex"))
    if args.grammar is not None:
        from potentials import Grammar

        return Grammar(_read(args.grammar, "grammar"))
    from potentials import JSONSchema

    text = _read(args.json_schema, "JSON Schema")
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"JSON Schema file {str(args.json_schema)!r} is not valid JSON: {e}") from e
    return JSONSchema(schema)


def _generate(args: argparse.Namespace) -> int:
    from smc.generation import check_generate_args, generate
    from smc.loading import load_lm
    from smc.search import check_method

    prompt = _prompt(args)
    constraint = _constraint(args)
    check_generate_args(
        prompt, args.particles, args.max_tokens, 0.5, args.sampler, "multinomial", args.seed,
        islands=args.islands, finish_share=args.finish_share, method=args.method,
        lookahead=args.lookahead, constraint=constraint,
    )
    check_method(args.method, args.n_beam)
    lm = load_lm(args.model, backend=args.backend)
    result = generate(
        prompt,
        constraint,
        lm=lm,
        particles=args.particles,
        max_tokens=args.max_tokens,
        seed=args.seed,
        sampler=args.sampler,
        progress=False if args.quiet else None,
        method=args.method,
        n_beam=args.n_beam,
        islands=args.islands,
        finish_share=args.finish_share,
        lookahead=args.lookahead,
    )
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
