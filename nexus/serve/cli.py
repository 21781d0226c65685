"""`nexus serve`: validate everything a user typed, load the model once, then serve until Ctrl-C."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

import typer

from nexus.errors import NexusError


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_port_free(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise NexusError(f"Cannot listen on {host}:{port} ({exc.strerror}); pick another --port or --host.") from exc


def served_name(model: str) -> str:
    return "embedded" if model == "embedded" else Path(model.rstrip("/")).name


def serve(
    model: str = typer.Option("embedded", help="'embedded' (SmolLM2-135M-Instruct) or a local model dir."),
    policy: str = typer.Option("nexus", help="Eviction policy of every session's stream."),
    param: list[str] = typer.Option([], "--param", "-p", help="Policy parameter KEY=VALUE (repeatable)."),
    budget: str = typer.Option("1024", help="KV budget per session: tokens per layer (1024) or bytes (64MiB)."),
    chunk_size: int = typer.Option(256, help="Prefill chunk size; eviction runs between chunks."),
    host: str = typer.Option("127.0.0.1", help="Address to bind; anything but loopback needs --api-key."),
    port: int = typer.Option(8000, help="TCP port."),
    api_key: str = typer.Option(None, envvar="NEXUS_API_KEY", help="Require 'Authorization: Bearer KEY'."),
    max_sessions: int = typer.Option(8, help="Streams held in memory at once (total KV <= this x budget)."),
    session_ttl: float = typer.Option(3600.0, help="Seconds an idle conversation is remembered."),
    max_tokens: int = typer.Option(512, help="Reply length when a request gives no max_tokens."),
    name: str = typer.Option(None, "--served-model-name", help="Model id clients send (default: the model's name)."),
    seed: int = typer.Option(0, help="Seeds reservoir selection and sampling without a request seed."),
    device: str = typer.Option(None, help="cpu, cuda, cuda:N (default: cuda if available)."),
    dtype: str = typer.Option(None, help="float32 / bfloat16 / float16 (default: fp32 on CPU, bf16 on CUDA)."),
) -> None:
    """An OpenAI-compatible endpoint that keeps one bounded KV stream per conversation."""
    from nexus.runtime.cli import parse_params

    if not 1 <= port <= 65535:
        raise NexusError(f"--port {port} is not a TCP port (1-65535).")
    if not _is_loopback(host) and not api_key:
        raise NexusError(f"--host {host} is reachable from other machines; give --api-key KEY (or NEXUS_API_KEY) "
                         "so only your clients can use the model.")
    for flag, value in (("--max-sessions", max_sessions), ("--chunk-size", chunk_size), ("--max-tokens", max_tokens)):
        if value < 1:
            raise NexusError(f"{flag} must be >= 1, got {value}.")
    if session_ttl <= 0:
        raise NexusError(f"--session-ttl must be > 0 seconds, got {session_ttl}.")
    if model != "embedded" and not (Path(model) / "config.json").is_file():
        raise NexusError(f"--model {model} is not a model directory (no config.json); pass embedded or a local dir.")
    from nexus.runtime import make_policy
    from nexus.runtime.budget import budget_option
    from nexus.runtime.preflight import check_stream_settings

    params = parse_params(param)
    # an unknown policy, parameter, budget, device or dtype is refused before the model loads
    check_stream_settings(model, policy, params, budget, chunk_size, device, dtype)
    budget = budget_option(budget)
    _check_port_free(host, port)

    import uvicorn

    from nexus.runtime import InferenceStream, load_model
    from nexus.serve.app import create_app
    from nexus.serve.engine import Engine

    typer.echo(f"nexus serve: loading {model} ...", err=True)
    mdl, tok = load_model(model, device=device, dtype=dtype)
    engine = Engine(
        mdl, tok,
        make_stream=lambda: InferenceStream(mdl, tok, make_policy(policy, **params), budget=budget,
                                            chunk_size=chunk_size, seed=seed),
        served_model=name or served_name(model), max_sessions=max_sessions, session_ttl=session_ttl,
        default_max_tokens=max_tokens,
    )
    bound = engine.stream_bytes
    typer.echo(f"nexus serve: model {engine.served_model!r}, policy {policy}, budget {engine.budget} tokens/layer, "
               f"KV bound {'none (dense)' if bound is None else f'{bound * max_sessions / 2**20:.1f} MiB'}; "
               f"http://{host}:{port}/v1", err=True)
    uvicorn.run(create_app(engine, api_key=api_key), host=host, port=port, log_level="warning")
