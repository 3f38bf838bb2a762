"""A lean load generator for OpenAI-style streaming chat endpoints.

The benchmark client shares two cores with the server under test, so it must cost
as little as possible: raw asyncio sockets, one connection per request
(``Connection: close``), and no JSON parsing of the stream while it runs. It only
looks for the first event with non-empty ``content`` (the time to first token) and,
once the response has ended, for the usage event that says how many tokens came
(``stream_options.include_usage``). Works with chunked (Hypercorn) and
close-delimited (``http.server``) bodies alike: the patterns it looks for never
contain a chunk-size line, and the search overlaps reads.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

# Compact (msgspec) and spaced (json.dumps) JSON alike.
_CONTENT = re.compile(rb'"content": ?"(?!")')
_COMPLETION_TOKENS = re.compile(rb'"completion_tokens": ?(\d+)')
_CACHED_TOKENS = re.compile(rb'"cached_tokens": ?(\d+)')
_OVERLAP = 32  # bytes of the previous read searched again, for patterns split across reads


@dataclass
class Result:
    """One request as the client saw it. Times are ``time.perf_counter()`` seconds."""

    start: float
    end: float = 0.0
    first_token: float | None = None
    tokens: int = 0
    cached_tokens: int = 0
    error: str | None = None
    body: bytes = b""

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.start


@dataclass
class Run:
    """Many requests sent by ``streams`` concurrent clients."""

    streams: int
    results: list[Result] = field(default_factory=list)
    wall: float = 0.0

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.results if r.error is None)

    @property
    def errors(self) -> int:
        return sum(r.error is not None for r in self.results)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.wall if self.wall else 0.0

    def ttft_percentile(self, q: float) -> float:
        """The ``q``-th percentile (0 to 100) of the times to first token, in seconds."""
        return percentile([r.ttft for r in self.results if r.ttft is not None], q)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def chat_body(model: str, messages: list[dict[str, str]], max_tokens: int) -> bytes:
    """A greedy streaming chat request that reports its usage at the end."""
    return json.dumps(
        {
            "model": model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()


async def stream_chat(port: int, body: bytes, *, keep_body: bool = False) -> Result:
    """POST ``body`` to ``/v1/chat/completions`` on 127.0.0.1 and read the stream."""
    result = Result(start=time.perf_counter())
    writer = None
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        parts: list[bytes] = []
        tail = b""
        while data := await reader.read(65536):
            if result.first_token is None:
                window = tail + data
                if _CONTENT.search(window) is not None:
                    result.first_token = time.perf_counter()
                tail = window[-_OVERLAP:]
            parts.append(data)
        result.end = time.perf_counter()
        raw = b"".join(parts)
        _judge(result, raw)
        if keep_body:
            result.body = raw
    except OSError as exc:
        result.end = time.perf_counter()
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        if writer is not None:
            writer.close()
    return result


def _judge(result: Result, raw: bytes) -> None:
    head, _, rest = raw.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"?"
    if status != b"200":
        result.error = f"HTTP {status.decode(errors='replace')}: {rest[:200]!r}"
        return
    if b'data: {"error"' in rest:
        result.error = "error event: " + rest[rest.find(b'data: {"error"') :][:200].decode()
        return
    if b"data: [DONE]" not in rest:
        result.error = "the stream ended without [DONE]"
        return
    counts = _COMPLETION_TOKENS.findall(rest)
    if not counts:
        result.error = "no usage in the stream"
        return
    result.tokens = int(counts[-1])
    cached = _CACHED_TOKENS.findall(rest)
    result.cached_tokens = int(cached[-1]) if cached else 0


def stream_text(raw: bytes) -> str:
    """The generated text of a streamed chat response (parsed after the fact)."""
    text = []
    for line in raw.split(b"\n"):
        if not line.startswith(b"data: {"):
            continue
        for choice in json.loads(line[6:]).get("choices", []):
            text.append((choice.get("delta") or {}).get("content") or "")
    return "".join(text)


async def closed_loop(
    port: int,
    streams: int,
    requests_per_stream: int,
    body_for: Callable[[int], bytes],
) -> Run:
    """``streams`` clients, each sending ``requests_per_stream`` requests one after
    the other (request ``i`` has the body ``body_for(i)``)."""
    run = Run(streams)

    async def client(index: int) -> None:
        for k in range(requests_per_stream):
            run.results.append(await stream_chat(port, body_for(index * requests_per_stream + k)))

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(streams)))
    run.wall = time.perf_counter() - started
    return run


def summarize(run: Run) -> dict[str, Any]:
    """The figures the report prints for one HTTP run."""
    return {
        "tok_s": run.tokens_per_second,
        "ttft_p50_ms": run.ttft_percentile(50) * 1000,
        "ttft_p99_ms": run.ttft_percentile(99) * 1000,
        "errors": run.errors,
        "requests": len(run.results),
        "tokens": run.tokens,
    }
