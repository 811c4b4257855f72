"""``python -m smc serve``: an OpenAI-compatible HTTP server for one loaded model (FastAPI).

Routes: ``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions``,
``GET /health``. Bodies are translated by ``smc.api.openai`` (the batch runner's translation
too); every run is ``await arun(...)`` in the server's one event loop, so concurrent requests
share the backend: the HF backend's auto-batching puts their particles in the same forward
passes, and its prefix cache serves their shared prompt prefixes.

Errors are OpenAI's error object ``{"error": {"message", "type", "param", "code"}}`` with a 4xx
status naming the problem (docs/serving.md lists them); a failure of the server itself is a 500
with the same shape and no traceback (the traceback goes to the server's log). A client that
disconnects cancels its run.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from typing import Any, AsyncIterator, Awaitable, TypeVar

import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.requests import Request as HttpRequest

from smc.api.openai import (ApiError, Call, Limits, Outcome, Reasoning, chunk, delta_choice, dumps, new_id,
                            parse_body, parse_call, preflight, response_body, run_call, settled_text,
                            smc_field, usage)
from smc.backends.base import LMBackend
from smc.backends.loading import load_lm
from smc.core.errors import SmcSteerError
from smc.engine.checkpoint import Run

log = logging.getLogger("smc.server")
T = TypeVar("T")

#: the model name /v1/models lists for the embedded model
EMBEDDED_NAME = "smollm2-135m-instruct"


class ClientGone(Exception):
    """The client disconnected before its answer was ready."""


def error_response(err: ApiError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status)


def as_api_error(e: BaseException) -> ApiError:
    """A client's mistake found while building or running its request: a 400 naming it."""
    if isinstance(e, ApiError):
        return e
    text = str(e).strip()
    return ApiError(text.splitlines()[0] if text else type(e).__name__, 400)


async def disconnected(http: HttpRequest) -> None:
    """Returns when the client has disconnected (its body was read before)."""
    while (await http.receive())["type"] != "http.disconnect":
        pass


async def until_disconnect(http: HttpRequest, work: Awaitable[T]) -> T:
    """``await work``, cancelled (ClientGone) if the client disconnects first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(disconnected(http))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task in done:
        return task.result()
    task.cancel()
    raise ClientGone()


def create_app(lm: LMBackend, model_name: str, *, api_key: str | None = None,
               limits: Limits = Limits(), reasoning: Reasoning = Reasoning()) -> FastAPI:
    """The ASGI app serving ``lm`` under ``model_name``; with ``api_key``, every route but
    ``/health`` needs ``Authorization: Bearer <api_key>`` (else 401); ``reasoning``: the
    default of chat requests that do not say whether to think first."""
    app = FastAPI(title="smc-steer", docs_url=None, redoc_url=None, openapi_url=None)
    created = int(time.time())
    slots = asyncio.Semaphore(limits.max_running)

    async def run(call: Call, on_step: Any = None) -> Outcome:
        """``run_call`` once one of ``limits.max_running`` slots is free."""
        async with slots:
            return await run_call(call, lm, on_step)

    @app.exception_handler(ApiError)
    async def on_api_error(_: HttpRequest, err: ApiError) -> JSONResponse:
        return error_response(err)

    @app.exception_handler(HTTPException)
    async def on_http_error(_: HttpRequest, err: HTTPException) -> JSONResponse:
        kind = "not_found_error" if err.status_code == 404 else "invalid_request_error"
        return error_response(ApiError(str(err.detail), err.status_code, type=kind))

    @app.exception_handler(Exception)
    async def on_internal_error(_: HttpRequest, err: Exception) -> JSONResponse:
        log.exception("internal error")
        return error_response(ApiError(f"internal server error ({type(err).__name__})", 500,
                                       type="internal_server_error"))

    def authorize(http: HttpRequest) -> None:
        if api_key is None:
            return
        given = http.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise ApiError("missing or incorrect API key (send Authorization: Bearer <key>)", 401,
                           code="invalid_api_key", type="authentication_error")

    async def read_body(http: HttpRequest) -> dict[str, Any]:
        declared = http.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limits.max_body_bytes:
            raise ApiError(f"the request body is {int(declared):,} bytes, more than the limit of "
                           f"{limits.max_body_bytes:,}", 413, code="body_too_large")
        data = bytearray()
        try:
            async for part in http.stream():
                data += part
                if len(data) > limits.max_body_bytes:
                    break
        except ClientDisconnect:
            raise ClientGone() from None
        return parse_body(bytes(data), limits)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models(http: HttpRequest) -> dict[str, Any]:
        authorize(http)
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{name:path}")
    async def model(http: HttpRequest, name: str) -> dict[str, Any]:
        authorize(http)
        if name != model_name:
            raise ApiError(f"the model {name!r} does not exist", 404, param="model", code="model_not_found")
        return model_card()

    def model_card() -> dict[str, Any]:
        return {"id": model_name, "object": "model", "created": created, "owned_by": "smc-steer",
                "max_model_len": getattr(lm, "max_context", None)}

    async def complete(http: HttpRequest, kind: str) -> Any:
        authorize(http)
        body = await read_body(http)
        call = parse_call(body, kind, model_name, limits, reasoning)
        try:
            preflight(call, lm)
        except (SmcSteerError, ValueError, TypeError) as e:
            raise as_api_error(e) from None
        if call.stream:
            return StreamingResponse(stream(http, call), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        try:
            outcome = await until_disconnect(http, run(call))
        except ClientGone:
            log.info("client disconnected; its run was cancelled")
            return JSONResponse({}, status_code=499)
        except (SmcSteerError, ValueError, TypeError) as e:
            raise as_api_error(e) from None
        return JSONResponse(response_body(call, outcome, model_name), status_code=200)

    async def stream(http: HttpRequest, call: Call) -> AsyncIterator[str]:
        """Server-sent events: the text every candidate answer shares, as it settles, then the
        rest of each choice when the run ends (module docstring of smc.api.openai)."""
        id_, made = new_id(call.kind), int(time.time())
        updates: asyncio.Queue[str] = asyncio.Queue()
        last = [""]

        def on_step(run: Run) -> None:
            text = settled_text(run)
            if len(text) > len(last[0]):
                updates.put_nowait(text)
                last[0] = text

        def event(obj: dict[str, Any]) -> str:
            return f"data: {dumps(obj)}\n\n"

        task = asyncio.ensure_future(run(call, on_step))
        gone = asyncio.ensure_future(disconnected(http))
        sent = ""
        try:
            yield event(chunk(call, id_, made, model_name,
                              [delta_choice(call, i, "", "", first=True) for i in range(call.n)]))
            while True:
                getter = asyncio.ensure_future(updates.get())
                done, _ = await asyncio.wait({task, getter, gone}, return_when=asyncio.FIRST_COMPLETED)
                if gone in done:
                    getter.cancel()
                    log.info("client disconnected; its run was cancelled")
                    return
                if getter not in done:
                    getter.cancel()
                    break
                text = getter.result()
                yield event(chunk(call, id_, made, model_name,
                                  [delta_choice(call, i, sent, text) for i in range(call.n)]))
                sent = text
            try:
                outcome = task.result()
            except (SmcSteerError, ValueError, TypeError) as e:
                yield event(as_api_error(e).body())
                yield "data: [DONE]\n\n"
                return
            except Exception as e:  # noqa: BLE001 - the stream began: the error goes in it
                log.exception("internal error in a streamed run")
                yield event(ApiError(f"internal server error ({type(e).__name__})", 500,
                                     type="internal_server_error").body())
                yield "data: [DONE]\n\n"
                return
            for i, text in enumerate(outcome.texts):
                if not text.startswith(sent):  # cannot happen: the prefix was settled
                    log.error("streamed prefix %r is not a prefix of the answer %r", sent, text)
                    yield event(ApiError("internal error: the streamed text diverged", 500,
                                         type="internal_server_error").body())
                    yield "data: [DONE]\n\n"
                    return
            last_choices = [delta_choice(call, i, sent, text, outcome.finish_reasons[i], final=True,
                                         posterior_probability=outcome.probabilities[i])
                            for i, text in enumerate(outcome.texts)]
            yield event(chunk(call, id_, made, model_name, last_choices, smc=smc_field(call, outcome)))
            if call.include_usage:
                yield event(chunk(call, id_, made, model_name, [], usage=usage(outcome)))
            yield "data: [DONE]\n\n"
        finally:
            # a client gone mid-stream closes this generator: its run stops too
            task.cancel()
            gone.cancel()

    @app.post("/v1/chat/completions")
    async def chat_completions(http: HttpRequest) -> Any:
        return await complete(http, "chat")

    @app.post("/v1/completions")
    async def completions(http: HttpRequest) -> Any:
        return await complete(http, "completion")

    return app


def serve(model: str | None = None, backend: str = "hf", *, host: str = "127.0.0.1", port: int = 8000,
          api_key: str | None = None, limits: Limits = Limits(), name: str | None = None,
          reasoning: Reasoning = Reasoning()) -> None:
    """Load ``model`` (default: the embedded one) and serve it until interrupted."""
    lm = load_lm(model, backend=backend)
    served = name or (EMBEDDED_NAME if model is None else str(model))
    app = create_app(lm, served, api_key=api_key, limits=limits, reasoning=reasoning)
    uvicorn.run(app, host=host, port=port, log_level="info")
