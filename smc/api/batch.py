"""``python -m smc batch``: OpenAI's batch file format, run in one process; ``generate_many``.

Input: one JSON object per line, ``{"custom_id", "method": "POST", "url", "body"}`` with url
``/v1/chat/completions`` or ``/v1/completions`` and the body the HTTP server takes (translated by
``smc.api.openai``, so one body means one run wherever it is sent). Output: one line per input
line, ``{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error": null}``;
the body is the server's response (status 200) or its OpenAI error object (4xx/5xx).

Concurrency. Up to K requests run at once (``concurrency``) as tasks of one event loop on one
backend, seen through its ``GatheredLM`` view (``smc.backends.batching``): the population
steps of runs stepping in the same loop turns go to the backend as one call (one forward
pass), and its prefix cache serves their shared prompt prefixes. Each run draws only from its own generator,
seeded by its own request (the body's seed, else ``defaults.SEED``: the server's rule), so its
result is a function of (request, model) alone, not of K, of its neighbours, or of a resume,
up to the float rounding of batched forwards (docs/batch.md gives the measured rate).

Resume. Every output line is encoded whole and written by one ``write`` on an O_APPEND file,
then fsync'ed; a crash can leave at most one trailing partial line, which the next start
drops. On start the output is read: a custom_id already there is not run again (an error line
too, unless ``retry_errors``), so the same command after a kill finishes the job with every
custom_id exactly once.
"""

from __future__ import annotations

import asyncio
import fcntl
import importlib
import itertools
import json
import logging
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence, TypeVar

from tqdm.auto import tqdm

from potentials.base import Potential
from smc.api.generation import arun, as_request, check_lm, run_sync
from smc.api.openai import ApiError, Call, Limits, dumps, parse_call, preflight, response_body, run_call
from smc.api.request import Request
from smc.api.server import EMBEDDED_NAME, as_api_error
from smc.backends.base import LMBackend
from smc.backends.batching import gathered
from smc.backends.loading import load_lm
from smc.core import defaults
from smc.core.errors import InvalidArgument, InvalidArgumentType, RequestTimeout, SmcSteerError
from smc.engine.loop import MAX_PARTICLES
from smc.engine.result import Result

log = logging.getLogger("smc.batch")
T = TypeVar("T")
R = TypeVar("R")

#: the urls a batch line may name -> the body's kind in smc.api.openai
URLS = {"/v1/chat/completions": "chat", "/v1/completions": "completion"}
#: the keys of an input line (OpenAI's batch input format)
LINE_KEYS = ("custom_id", "method", "url", "body")
#: what one request may ask of the runner: the person running a batch owns the machine, so the
#: bounds are the library's own rather than the public server's
LIMITS = Limits(max_particles=MAX_PARTICLES, max_n=1024, max_body_bytes=64 << 20,
                max_constraint_bytes=16 << 20)
#: problems of an input file listed in its error message (the count is always given)
SHOWN_PROBLEMS = 5


class BatchFileError(InvalidArgument):
    """The input or output file of a batch cannot be used as it is; nothing was run."""


# ---------------------------------------------------------------------------- input
@dataclass(frozen=True)
class BatchLine:
    """One line of the input file.

    Attributes:
        custom_id: the caller's id of the request (unique in the file).
        raw: the line's JSON object (method, url and body are checked when it runs, so that a
            bad one becomes an error line and the others go on).
        line: its 1-based line number.
    """

    custom_id: str
    raw: Mapping[str, Any]
    line: int


def read_input(path: str | os.PathLike) -> list[BatchLine]:
    """The lines of a batch input file; BatchFileError, before any work, when a line is not a
    JSON object with a non-empty string custom_id, or a custom_id repeats (a result could not
    be told apart from another's). Blank lines are skipped."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise BatchFileError(f"cannot read the input file {os.fspath(path)!r}: {e.strerror or e}") from None
    problems: list[str] = []
    lines: list[BatchLine] = []
    first: dict[str, int] = {}
    with f:
        for number, data in enumerate(f, 1):
            if not data.strip():
                continue
            try:
                obj = json.loads(data)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                problems.append(f"line {number} is not valid JSON ({e})")
                continue
            cid = obj.get("custom_id") if isinstance(obj, dict) else None
            if not isinstance(obj, dict):
                problems.append(f"line {number} is not a JSON object")
            elif not isinstance(cid, str) or not cid:
                problems.append(f"line {number} has no custom_id (a non-empty string)")
            elif cid in first:
                problems.append(f"line {number} repeats the custom_id {cid!r} of line {first[cid]}")
            else:
                first[cid] = number
                lines.append(BatchLine(cid, obj, number))
    if problems:
        more = f"; and {len(problems) - SHOWN_PROBLEMS} more" if len(problems) > SHOWN_PROBLEMS else ""
        raise BatchFileError(f"the input file {os.fspath(path)!r} has {len(problems)} bad line(s), "
                             f"nothing was run: {'; '.join(problems[:SHOWN_PROBLEMS])}{more}")
    return lines


# ---------------------------------------------------------------------------- output
def result_line(custom_id: str, status: int, body: Mapping[str, Any]) -> dict[str, Any]:
    """One output line in OpenAI's batch form: the response's status and body (an error's
    body is its OpenAI error object), ``error`` null (it is for requests never run)."""
    return {"id": f"batch_req_{uuid.uuid4().hex}", "custom_id": custom_id,
            "response": {"status_code": status, "request_id": f"req_{uuid.uuid4().hex}", "body": dict(body)},
            "error": None}


def is_error_line(obj: Mapping[str, Any]) -> bool:
    """An output line that did not answer its request (status other than 200, or an error)."""
    response = obj.get("response")
    return obj.get("error") is not None or not isinstance(response, dict) or response.get("status_code") != 200


#: how every line this runner writes begins (a trailing partial line must, to be dropped)
LINE_START = b'{"id": '


class ResultWriter:
    """Appends output lines to a file, each whole: its encoding is written by one ``write`` on a
    file opened O_APPEND, then fsync'ed, so a crash leaves at most one trailing partial line.
    Holds an exclusive ``flock`` on the file while open: two runners never write one output."""

    def __init__(self, path: str | os.PathLike, fsync: bool = True):
        self.path, self.fsync = os.fspath(path), fsync
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise BatchFileError(f"cannot open the output file {self.path!r}: {e.strerror or e}") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise BatchFileError(f"another batch run is writing {self.path!r} (it holds the file's "
                                 "lock); wait for it to end or stop it") from None

    def write(self, obj: Mapping[str, Any]) -> None:
        data = (dumps(obj) + "\n").encode()
        n = os.write(self.fd, data)
        if n != len(data):  # disk full: the next start drops the partial line
            raise OSError(f"short write to {self.path!r}: {n} of {len(data)} bytes (disk full?)")
        if self.fsync:
            os.fsync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # releases the lock
            self.fd = -1

    def __enter__(self) -> "ResultWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_output(fd: int, path: str) -> tuple[dict[str, dict[str, Any]], int]:
    """(custom_id -> output line, length of the complete lines in bytes) of an output file
    open at ``fd``; BatchFileError when a complete line is not an output line, a custom_id
    repeats, or the bytes after the last newline are not the start of one of this runner's
    lines (then the file is not a batch output, and is left untouched)."""
    size = os.fstat(fd).st_size
    data = os.pread(fd, size, 0) if size else b""
    cut = data.rfind(b"\n") + 1
    tail = data[cut:]
    if tail and not (LINE_START.startswith(tail[:len(LINE_START)])):
        raise BatchFileError(f"the output file {path!r} ends with bytes that are not the start of a "
                             "result line: it is not a batch output; choose another -o")
    answered: dict[str, dict[str, Any]] = {}
    for number, data_line in enumerate(data[:cut].split(b"\n")[:-1], 1):
        if not data_line.strip():
            continue
        try:
            obj = json.loads(data_line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            obj = None
        cid = obj.get("custom_id") if isinstance(obj, dict) else None
        if not isinstance(cid, str) or "response" not in obj:
            raise BatchFileError(f"line {number} of the output file {path!r} is not a result line: "
                                 "the file is not a batch output (or was edited); choose another -o")
        if cid in answered:
            raise BatchFileError(f"the output file {path!r} answers the custom_id {cid!r} twice "
                                 f"(line {number}); it was not written by this runner")
        answered[cid] = obj
    return answered, cut


# ---------------------------------------------------------------------------- jobs
@dataclass
class BatchJob:
    """An input file and its output, read and repaired, ready to run: the lines still to
    answer, and the writer that holds the output's lock.

    Attributes:
        lines: every line of the input.
        pending: the lines to run now (not answered in the output, or error lines retried).
        already: the custom_ids answered before and kept.
        kept_errors: of those, the error lines kept (run again with ``retry_errors``).
        retried: error lines taken out of the output to run again.
        dropped_partial: bytes of a trailing partial line (a crash's) dropped from the output.
        writer: the output's writer.
    """

    lines: list[BatchLine]
    pending: list[BatchLine]
    already: int
    kept_errors: int
    retried: int
    dropped_partial: int
    writer: ResultWriter

    def close(self) -> None:
        self.writer.close()

    def __enter__(self) -> "BatchJob":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_job(input: str | os.PathLike, output: str | os.PathLike, *, retry_errors: bool = False,
             fsync: bool = True) -> BatchJob:
    """Read the input (``read_input``), lock and read the output, drop a crash's trailing
    partial line, and work out what is left to run. With ``retry_errors`` the output's error
    lines are taken out (the file is rewritten beside itself and renamed over, so a crash
    leaves the old or the new file, never a mix) and their requests run again.

    BatchFileError, before any work, for a bad input, an output that is not a batch output,
    an output answering custom_ids the input does not have (another job's output), or the same
    file for both."""
    lines = read_input(input)
    if Path(output).exists() and Path(output).resolve() == Path(input).resolve():
        raise BatchFileError("the input and output are the same file; give another -o")
    writer = ResultWriter(output, fsync)
    try:
        answered, cut = read_output(writer.fd, writer.path)
        dropped = os.fstat(writer.fd).st_size - cut
        if dropped:
            log.warning("dropping a partial last line (%d bytes) of %s left by a crash", dropped, writer.path)
            os.ftruncate(writer.fd, cut)
            os.fsync(writer.fd)
        ids = {line.custom_id for line in lines}
        foreign = [cid for cid in answered if cid not in ids]
        if foreign:
            raise BatchFileError(
                f"the output file {writer.path!r} answers {len(foreign)} custom_id(s) that are not in the "
                f"input (e.g. {foreign[0]!r}): it is another job's output; choose another -o")
        errors = [cid for cid, obj in answered.items() if is_error_line(obj)]
        retried = 0
        if retry_errors and errors:
            writer = rewrite_without(writer, answered, set(errors), fsync)
            for cid in errors:
                del answered[cid]
            retried = len(errors)
        pending = [line for line in lines if line.custom_id not in answered]
        return BatchJob(lines, pending, len(answered), 0 if retry_errors else len(errors), retried,
                        dropped, writer)
    except BaseException:
        writer.close()
        raise


def rewrite_without(writer: ResultWriter, answered: Mapping[str, Mapping[str, Any]], drop: set[str],
                    fsync: bool) -> ResultWriter:
    """The output without the lines of ``drop``: written to a temporary file beside it, fsync'ed
    and renamed over it (atomic), then opened and locked again."""
    tmp = f"{writer.path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        for cid, obj in answered.items():
            if cid not in drop:
                f.write((dumps(obj) + "\n").encode())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, writer.path)
    writer.close()
    return ResultWriter(writer.path, fsync)


# ---------------------------------------------------------------------------- one request
@dataclass(frozen=True)
class Answer:
    """A request's output line and what the progress bar counts of it.

    Attributes:
        custom_id: the request's id.
        line: the output line (``result_line``).
        ok: status 200.
        tokens: tokens the run's particles generated (the LM's work).
        completion_tokens: tokens of the answer's choices (the response's usage).
        seconds: wall time of the request, from its start to its answer.
    """

    custom_id: str
    line: dict[str, Any]
    ok: bool
    tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


def call_of(raw: Mapping[str, Any], model_name: str, limits: Limits = LIMITS) -> Call:
    """The Call of an input line: ApiError for a method other than POST, a url the runner does
    not serve, an unknown key, a body that is not an object or that the server would refuse
    (``parse_call``, with 404 for another model), and for ``stream`` (a batch has no stream)."""
    extra = [k for k in raw if k not in LINE_KEYS]
    if extra:
        raise ApiError(f"unknown key {extra[0]!r} in the batch line; the keys are {', '.join(LINE_KEYS)}",
                       param=extra[0])
    if raw.get("method") != "POST":
        raise ApiError(f"method must be \"POST\", got {raw.get('method')!r}", 405, param="method")
    url = raw.get("url")
    if url not in URLS:
        raise ApiError(f"the url {url!r} is not served by the batch runner; use {' or '.join(URLS)}", 404,
                       param="url", code="unknown_url")
    body = raw.get("body")
    if not isinstance(body, dict):
        raise ApiError(f"body must be a JSON object, got {type(body).__name__}", param="body")
    call = parse_call(body, URLS[url], model_name, limits)
    if call.stream:
        raise ApiError("stream is not supported in a batch (each result is one line)", param="stream")
    return call


def timeout_error(timeout: float) -> ApiError:
    return ApiError(f"the request ran past the per-request time limit of {timeout:g} s and was "
                    "cancelled", 408, code="request_timeout", type="timeout_error")


async def answer(item: BatchLine, lm: LMBackend, model_name: str, *, timeout: float | None = None,
                 limits: Limits = LIMITS) -> Answer:
    """Run one input line on ``lm`` and return its output line; never raises for the request's
    own failure: a bad request is its 4xx error line, a run past ``timeout`` seconds a 408, a
    failure of the runner a 500 (the traceback goes to the log), and the other requests go on."""
    start = time.perf_counter()
    try:
        call = call_of(item.raw, model_name, limits)
        preflight(call, lm)
        run = run_call(call, lm)
        outcome = await (run if timeout is None else asyncio.wait_for(run, timeout))
    except TimeoutError:
        return failed(item, timeout_error(float(timeout or 0)), start)
    except (SmcSteerError, ValueError, TypeError) as e:
        return failed(item, as_api_error(e), start)
    except Exception as e:  # noqa: BLE001  (one request's failure never stops the batch)
        log.exception("request %r failed", item.custom_id)
        err = ApiError(f"internal error while running the request ({type(e).__name__}: {e})", 500,
                       type="internal_server_error")
        return failed(item, err, start)
    body = response_body(call, outcome, model_name)
    return Answer(item.custom_id, result_line(item.custom_id, 200, body), True,
                  int(outcome.result.stats.get("tokens", 0)), body["usage"]["completion_tokens"],
                  time.perf_counter() - start)


def failed(item: BatchLine, err: ApiError, start: float) -> Answer:
    return Answer(item.custom_id, result_line(item.custom_id, err.status, err.body()), False,
                  seconds=time.perf_counter() - start)


# ---------------------------------------------------------------------------- running many
def shared_forwards(lm: LMBackend, concurrency: int) -> LMBackend:
    """``lm`` seen through its ``GatheredLM`` view when several runs will be in flight: the
    population steps of runs stepping in the same loop turns then share one forward pass.
    The view refers to ``lm`` weakly: the caller keeps ``lm`` while it uses the view."""
    return gathered(lm, max_calls=concurrency) if concurrency > 1 and lm is not None else lm


async def in_flight(items: Iterable[T], run: Callable[[T], Awaitable[R]], limit: int
                    ) -> AsyncIterator[tuple[T, R | BaseException]]:
    """``run(item)`` for every item, at most ``limit`` at once, started in order; yields
    (item, its result or the exception it raised) as each ends (in start order among those
    ending together). Closing the generator cancels the runs still in flight."""
    it = iter(items)
    order = itertools.count()
    running: dict[asyncio.Task[R], tuple[int, T]] = {}

    def fill() -> None:
        for item in itertools.islice(it, limit - len(running)):
            running[asyncio.ensure_future(run(item))] = (next(order), item)

    try:
        fill()
        while running:
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            ended = sorted(((running.pop(t), t) for t in done), key=lambda x: x[0][0])
            fill()  # start the next ones before the caller handles these
            for (_, item), task in ended:
                error = task.exception()
                yield item, (error if error is not None else task.result())
    finally:
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)


class Progress:
    """A tqdm bar over a dataset: requests done of the total, failed, and tokens per second
    (tokens generated by the particles since the bar began: the LM's throughput)."""

    def __init__(self, total: int, initial: int = 0, progress: bool | None = None, failed: int = 0):
        self.failed, self.tokens, self.start = failed, 0, time.perf_counter()
        # redrawn twice a second on a terminal; every 30 s into a log file (an overnight job's
        # log would otherwise hold one redraw per request)
        interval = 0.5 if sys.stderr.isatty() else 30.0
        self.bar = tqdm(total=total, initial=initial, unit="req", delay=0 if progress else 2.0,
                        disable=progress is False, dynamic_ncols=True, mininterval=interval)
        self.bar.set_postfix(failed=failed, refresh=False)

    def update(self, ok: bool, tokens: int) -> None:
        self.failed += not ok
        self.tokens += tokens
        rate = self.tokens / max(time.perf_counter() - self.start, 1e-9)
        self.bar.set_postfix(failed=self.failed, tok_s=f"{rate:.0f}", refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def check_concurrency(concurrency: Any) -> int:
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise InvalidArgument(f"concurrency must be an integer >= 1 (requests in flight), got {concurrency!r}")
    return concurrency


def check_timeout(timeout: Any) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise InvalidArgument(f"timeout must be a number of seconds > 0 (or None), got {timeout!r}")
    return float(timeout)


@dataclass(frozen=True)
class BatchSummary:
    """What a batch run did.

    Attributes:
        total: custom_ids in the input.
        already: answered before this run and kept (error lines among them: ``kept_errors``).
        kept_errors: error lines of earlier runs kept in the output.
        retried: error lines of earlier runs run again (``retry_errors``).
        succeeded: requests answered with status 200 by this run.
        failed: requests answered with an error line by this run.
        dropped_partial: bytes of a crash's trailing partial line dropped from the output.
        tokens: tokens generated by the particles in this run.
        completion_tokens: tokens of the answers written by this run.
        wall_time_s: this run's wall time, from the first request to the last line.
        reassigned: requests run again on another worker after theirs died (Ray).
    """

    total: int
    already: int
    kept_errors: int
    retried: int
    succeeded: int
    failed: int
    dropped_partial: int
    tokens: int
    completion_tokens: int
    wall_time_s: float
    reassigned: int = 0

    @property
    def complete(self) -> bool:
        """Every custom_id of the input has its line in the output."""
        return self.already + self.succeeded + self.failed == self.total


class Tally:
    """Counts of the answers written, for the summary."""

    def __init__(self) -> None:
        self.succeeded = self.failed = self.tokens = self.completion_tokens = self.reassigned = 0
        self.start = time.perf_counter()

    def add(self, a: Answer) -> None:
        self.succeeded += a.ok
        self.failed += not a.ok
        self.tokens += a.tokens
        self.completion_tokens += a.completion_tokens

    def summary(self, job: BatchJob) -> BatchSummary:
        return BatchSummary(len(job.lines), job.already, job.kept_errors, job.retried, self.succeeded,
                            self.failed, job.dropped_partial, self.tokens, self.completion_tokens,
                            time.perf_counter() - self.start, self.reassigned)


async def arun_job(job: BatchJob, lm: LMBackend, model_name: str, *,
                   concurrency: int = defaults.BATCH_CONCURRENCY, timeout: float | None = None,
                   progress: bool | None = None, limits: Limits = LIMITS) -> BatchSummary:
    """Answer every pending line of ``job`` on ``lm``, at most ``concurrency`` at once, writing
    each output line as its request ends (an interrupt loses only the runs in flight)."""
    check_concurrency(concurrency)
    timeout = check_timeout(timeout)
    view = shared_forwards(lm, concurrency)  # refers to lm weakly: lm stays referenced here
    tally = Tally()
    bar = Progress(len(job.lines), job.already, progress, job.kept_errors)
    runs = in_flight(job.pending, lambda item: answer(item, view, model_name, timeout=timeout, limits=limits),
                     concurrency)
    try:
        async for _, got in runs:
            if isinstance(got, BaseException):  # answer() turns every request's failure into a line
                raise got
            job.writer.write(got.line)
            tally.add(got)
            bar.update(got.ok, got.tokens)
    finally:
        await runs.aclose()
        bar.close()
    return tally.summary(job)


async def arun_batch(input: str | os.PathLike, output: str | os.PathLike, lm: LMBackend | None = None, *,
                     model_name: str | None = None, concurrency: int = defaults.BATCH_CONCURRENCY,
                     timeout: float | None = None, retry_errors: bool = False,
                     progress: bool | None = None, fsync: bool = True) -> BatchSummary:
    """Run a batch file in this process (async); see ``run_batch``."""
    check_concurrency(concurrency)
    check_timeout(timeout)
    if model_name is not None and not isinstance(model_name, str):
        raise InvalidArgumentType(f"model_name must be a string, got {model_name!r}")
    with open_job(input, output, retry_errors=retry_errors, fsync=fsync) as job:
        if lm is None:
            lm = load_lm()
        else:
            check_lm(lm)
        return await arun_job(job, lm, model_name or default_model_name(None), concurrency=concurrency,
                              timeout=timeout, progress=progress)


def run_batch(input: str | os.PathLike, output: str | os.PathLike, lm: LMBackend | None = None, *,
              model_name: str | None = None, concurrency: int = defaults.BATCH_CONCURRENCY,
              timeout: float | None = None, retry_errors: bool = False, progress: bool | None = None,
              fsync: bool = True) -> BatchSummary:
    """Answer every request of an OpenAI batch input file, appending OpenAI batch output lines.

    Args:
        input: the input file (JSONL: custom_id, method, url, body).
        output: the output file; created, or resumed: the custom_ids it answers are skipped.
        lm: the backend (default: the embedded model).
        model_name: the one model the runner serves: a body naming another is a 404 error line
            (default: the embedded model's name).
        concurrency: requests in flight at once (their particles share forward passes).
        timeout: per-request wall-time limit in seconds (a 408 error line past it).
        retry_errors: run the output's error lines again instead of keeping them.
        progress: tqdm bar (None: after 2 s; False: never).
        fsync: fsync each line (off only for benchmarks on throwaway files).

    Returns a BatchSummary. BatchFileError before any work for a bad input file or an output
    that is not this job's."""
    return run_sync(lambda: arun_batch(input, output, lm, model_name=model_name, concurrency=concurrency,
                                       timeout=timeout, retry_errors=retry_errors, progress=progress,
                                       fsync=fsync))


def default_model_name(model: str | os.PathLike | None) -> str:
    """The served name of a model: its name or path as given, or the embedded model's."""
    return EMBEDDED_NAME if model is None else os.fspath(model)


def resolve_factory(spec: str | Callable[..., LMBackend]) -> Callable[..., LMBackend]:
    """An LM factory from ``"module:function"`` (imported here, e.g. in a Ray worker) or a
    callable as it is; InvalidArgument naming what cannot be found."""
    if callable(spec):
        return spec
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise InvalidArgument(f"an LM factory is a callable or 'module:function', got {spec!r}")
    module, name = spec.split(":")
    try:
        factory = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise InvalidArgument(f"cannot load the LM factory {spec!r}: {e}") from None
    if not callable(factory):
        raise InvalidArgumentType(f"the LM factory {spec!r} is not callable")
    return factory


# ---------------------------------------------------------------------------- generate_many
def requests_of(items: Sequence[Any], constraint: Any, settings: Mapping[str, Any]) -> list[Request]:
    """The Request of each item: a Request as it is, a mapping of ``generate``'s arguments
    (prompt, constraint, settings; over the shared ones), or a prompt (with the shared
    constraint and settings). Errors name the item: ``requests[i]: ...``."""
    if isinstance(items, (str, bytes, Mapping, Request)) or not isinstance(items, Iterable):
        raise InvalidArgumentType(f"requests must be a list of requests or prompts, got {type(items).__name__}")
    out = []
    for i, item in enumerate(items):
        try:
            if isinstance(item, Request):
                out.append(as_request(item, constraint, dict(settings)))
            elif isinstance(item, Mapping):
                if "prompt" not in item:
                    raise InvalidArgument("a request given as a mapping needs a 'prompt' (its keys are "
                                          "generate's arguments)")
                fields = dict(item)
                prompt, own = fields.pop("prompt"), fields.pop("constraint", constraint)
                out.append(as_request(prompt, own, {**settings, **fields}))
            else:
                out.append(as_request(item, constraint, dict(settings)))
        except (InvalidArgument, InvalidArgumentType) as e:
            raise type(e)(f"requests[{i}]: {e}") from None
    return out


async def agenerate_many(
    requests: Sequence[Any],
    constraint: Potential | dict[str, Any] | None = None,
    *,
    lm: LMBackend | None = None,
    concurrency: int = defaults.BATCH_CONCURRENCY,
    timeout: float | None = None,
    progress: bool | None = None,
    return_exceptions: bool = False,
    **settings: Any,
) -> list[Result | BaseException]:
    """Run many generations at once (async); see ``generate_many``."""
    batch = requests_of(requests, constraint, settings)
    check_concurrency(concurrency)
    timeout = check_timeout(timeout)
    if not isinstance(return_exceptions, bool):
        raise InvalidArgumentType(f"return_exceptions must be True or False, got {return_exceptions!r}")
    if lm is None:
        lm = load_lm()
    else:
        check_lm(lm)
    view = shared_forwards(lm, concurrency)  # refers to lm weakly: lm stays referenced here
    results: list[Any] = [None] * len(batch)

    async def one(i: int) -> Result:
        run = arun(batch[i], view, False)
        try:
            return await (run if timeout is None else asyncio.wait_for(run, timeout))
        except TimeoutError:
            raise RequestTimeout(f"requests[{i}] ran past the time limit of {timeout:g} s and was cancelled") from None

    bar = Progress(len(batch), 0, progress)
    runs = in_flight(range(len(batch)), one, concurrency)
    try:
        async for i, got in runs:
            if isinstance(got, BaseException):
                if not isinstance(got, RequestTimeout):
                    got.add_note(f"in requests[{i}]")
                if not return_exceptions:
                    raise got
            results[i] = got
            bar.update(not isinstance(got, BaseException),
                       0 if isinstance(got, BaseException) else int(got.stats.get("tokens", 0)))
    finally:
        await runs.aclose()
        bar.close()
    return results


def generate_many(
    requests: Sequence[Any],
    constraint: Potential | dict[str, Any] | None = None,
    *,
    lm: LMBackend | None = None,
    concurrency: int = defaults.BATCH_CONCURRENCY,
    timeout: float | None = None,
    progress: bool | None = None,
    return_exceptions: bool = False,
    **settings: Any,
) -> list[Result | BaseException]:
    """Run many generations, ``concurrency`` at once on one backend, and return their Results in
    the order of ``requests``.

    Runs in flight share the backend's batched forward passes and prefix cache; each draws from
    its own generator seeded by its own request, so ``generate_many([r, ...])[0]`` equals
    ``generate(r)`` (exactly on a ToyLM; on a real model up to the float rounding of batched
    forwards, docs/batch.md).

    Args:
        requests: Requests, prompts (with the shared ``constraint`` and ``settings``), or
            mappings of ``generate``'s arguments (``{"prompt": ..., "constraint": ...,
            "particles": ...}``, over the shared ones). Every one is built and validated
            before any work; an error names its index.
        constraint: the constraint of the items that do not give their own.
        lm: the backend (default: the embedded model, loaded once).
        concurrency: runs in flight at once.
        timeout: per-run wall-time limit in seconds (``smc.core.errors.RequestTimeout``).
        progress: tqdm bar over the requests (None: after 2 s; False: never).
        return_exceptions: as ``asyncio.gather``: False raises the first failure (the runs in
            flight are cancelled); True puts each failure's exception in its place.
        **settings: the Request's settings for the items that are not Requests.
    """
    return run_sync(lambda: agenerate_many(requests, constraint, lm=lm, concurrency=concurrency,
                                           timeout=timeout, progress=progress,
                                           return_exceptions=return_exceptions, **settings))
