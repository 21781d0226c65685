"""The HTTP surface: OpenAI's chat-completions API (JSON and server-sent events) plus session and health views.

Built on FastAPI/starlette because they are what OpenAI-compatible servers in Python use (vLLM, SGLang's
frontends) and give streaming responses and disconnect detection without hand-written HTTP.
"""

from __future__ import annotations

import asyncio
import hmac
import json

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from nexus.errors import NexusError
from nexus.serve.engine import Cancelled, Completion, Engine, Job
from nexus.serve.protocol import ApiError, completion_id, now, parse_chat_request

MAX_BODY_BYTES = 64 * 2**20  # far above any conversation the model's positions allow


def _usage(c: Completion) -> dict:
    return {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
            "total_tokens": c.prompt_tokens + c.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": c.cached_tokens}}


def _nexus(c: Completion) -> dict:
    return {"session_id": c.session_id, "rebuilt": c.rebuilt, "stats": c.stats}


def _as_api_error(exc: BaseException) -> ApiError:
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, NexusError):
        return ApiError(400, str(exc))
    return ApiError(500, f"The server failed on this request: {type(exc).__name__}: {exc}", kind="server_error")


def create_app(engine: Engine, api_key: str | None = None) -> FastAPI:
    app = FastAPI(title="nexus serve", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError):
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        what = "No such endpoint" if exc.status_code == 404 else "Method not allowed"
        return JSONResponse(ApiError(exc.status_code, f"{what}: {request.method} {request.url.path}.").body(),
                            status_code=exc.status_code)

    @app.middleware("http")
    async def authenticate(request: Request, call_next):
        if api_key is not None and request.url.path.startswith("/v1"):
            given = request.headers.get("authorization", "")
            token = given[7:] if given.lower().startswith("bearer ") else ""
            if not hmac.compare_digest(token.encode(), api_key.encode()):
                err = ApiError(401, "Missing or wrong API key; send 'Authorization: Bearer KEY' with the key the "
                                    "server was started with.", code="invalid_api_key", kind="authentication_error")
                return JSONResponse(err.body(), status_code=401)
        return await call_next(request)

    @app.get("/health")
    async def health():
        return engine.health()

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": engine.served_model, "object": "model", "created": now(),
                                            "owned_by": "nexus"}]}

    @app.get("/v1/sessions")
    async def sessions():
        return {"object": "list", "data": engine.store.snapshot()}

    @app.get("/v1/sessions/{session_id}")
    async def session(session_id: str):
        for s in engine.store.snapshot():
            if s["id"] == session_id:
                return s
        raise ApiError(404, f"No session {session_id!r}; GET /v1/sessions lists the live ones.", code="not_found")

    @app.delete("/v1/sessions/{session_id}")
    async def delete_session(session_id: str):
        # queued behind the session's pending requests, so a delete never cuts a reply in half
        if not await asyncio.wrap_future(engine.call(lambda: engine.store.delete(session_id))):
            raise ApiError(404, f"No session {session_id!r}; GET /v1/sessions lists the live ones.", code="not_found")
        return {"id": session_id, "object": "session", "deleted": True}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        size = request.headers.get("content-length", "")
        if size.isdigit() and int(size) > MAX_BODY_BYTES:
            raise ApiError(413, f"The request body is {int(size) / 2**20:.0f} MiB, over this server's "
                                f"{MAX_BODY_BYTES // 2**20} MiB limit; send a shorter conversation.")
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"The request body is not valid JSON ({exc}).") from exc
        req = parse_chat_request(body, engine.served_model, engine.default_max_tokens,
                                 request.headers.get("x-session-id"))
        if req.stream:
            return StreamingResponse(_stream(engine, req), media_type="text/event-stream")
        job = Job(req)
        done = asyncio.wrap_future(engine.submit(job))
        while not (await asyncio.wait({done}, timeout=0.5))[0]:
            if await request.is_disconnected():
                job.cancel.set()  # the worker stops this decode at its next token
        try:
            c = done.result()
        except Cancelled:
            return JSONResponse(ApiError(499, "The client closed the request.").body(), status_code=499)
        except BaseException as exc:
            raise _as_api_error(exc) from exc
        body_out = {
            "id": completion_id(), "object": "chat.completion", "created": now(), "model": engine.served_model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": c.content},
                         "finish_reason": c.finish_reason, "logprobs": None}],
            "usage": _usage(c), "nexus": _nexus(c),
        }
        return JSONResponse(body_out, headers={"X-Session-Id": c.session_id})

    return app


def _sse(obj) -> str:
    return f"data: {json.dumps(obj)}\n\n"


async def _stream(engine: Engine, req):
    """OpenAI's chunk stream: a role chunk, content chunks, a finish chunk, optional usage, then [DONE]."""
    loop = asyncio.get_running_loop()
    texts: asyncio.Queue = asyncio.Queue()
    job = Job(req, on_text=lambda t: loop.call_soon_threadsafe(texts.put_nowait, t))
    done = asyncio.wrap_future(engine.submit(job))
    cid, created = completion_id(), now()

    def chunk(delta: dict, finish=None, **extra) -> str:
        return _sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": engine.served_model,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}], **extra})

    try:
        yield chunk({"role": "assistant", "content": ""})
        while True:
            getter = asyncio.ensure_future(texts.get())
            finished, _ = await asyncio.wait({getter, done}, return_when=asyncio.FIRST_COMPLETED)
            if getter in finished:
                yield chunk({"content": getter.result()})
                continue
            getter.cancel()
            while not texts.empty():
                yield chunk({"content": texts.get_nowait()})
            break
        try:
            c = done.result()
        except BaseException as exc:
            yield _sse(_as_api_error(exc).body())
            yield "data: [DONE]\n\n"
            return
        yield chunk({}, c.finish_reason, nexus=_nexus(c))
        if req.include_usage:
            yield _sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": engine.served_model,
                        "choices": [], "usage": _usage(c)})
        yield "data: [DONE]\n\n"
    finally:
        job.cancel.set()  # a no-op once the reply is complete; stops the decode when the client went away
