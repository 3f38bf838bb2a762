"""A worker that speaks the real protocol over real ZeroMQ, without MLX.

Started exactly like the real worker (``--endpoint --spec --parent-pid``). Its
behaviour at start comes from the last segment of the spec's ``model_path``:

* ``fake/ok``: ready at once.
* ``fake/slow-start``: ready after 1.5 s (sends Progress meanwhile).
* ``fake/load-error``: reports a load Error ("download failed: offline") and exits 3.
* ``fake/die-on-load``: dies by SIGKILL while loading.
* ``fake/no-ready``: never sends Ready (start timeout).
* ``fake/ignore-sigterm``: ignores Shutdown and SIGTERM (needs SIGKILL).
* ``fake/error-first``: ready at once, and every ``Generate`` fails before its
  first reply (an Error 500: a model that errors before its first byte).

On ``Shutdown(grace)`` it behaves as the real serve loop: running requests go on
until the grace ends, then each still running ends with ``Done("cancelled")`` and
the process exits.
* ``fake/reasoner``: like ``ok``, and its Ready reports thinking markers
  (``<think>``/``</think>``) and the ``json_tools`` tool-call format, as a real
  worker does for a Qwen3 model.
* ``fake/mlxparsed``: like ``ok``; its Ready reports the ``longcat`` tool-call
  format (one only mlx-lm parses), and with ``Generate.parse_tools`` its ``say``
  sends each ``<tool_call>{"name", "arguments"}</tool_call>`` as ``Chunk.tool_calls``
  instead of text, as a real worker's tokenizer parser does.

The environment variable ``FAKE_RSS`` sets the memory it reports (bytes).

Per request, the last message's text (or the prompt) decides:

* ``crash``: emits a few chunks, then the process kills itself with SIGKILL.
* ``die <seconds>``: nothing for ``<seconds>`` after Started, then the process kills
  itself with SIGKILL: a request that kills every worker it runs on.
* ``hang``: never answers (a cancel still ends it).
* ``drip``: one chunk, then nothing more (a cancel still ends it): a person's
  answer that has its first token and streams on.
* ``stuck``: as a model whose forward pass blocks: after Started nothing more
  happens on any request (cancels included), while the heartbeats go on and report
  the step ``decode of N requests`` stalled since then.
* ``reject``: an Error 400 before Started (like a context overflow); ``reject
  bloat``: the same, and the memory it reports grows eightfold (as a real worker's
  after tokenizing a huge prompt only to refuse it).
* ``grow``: answers like any echo; the memory it reports doubles at its end.
* ``overflow <limit> …``: a context overflow in a context of ``<limit>`` tokens, as
  the real worker reports it (with ``Error.overflow``: the message's words as the
  prompt's tokens, ``max_tokens``, the limit).
* ``say <text>``: sends ``<text>`` exactly, four characters per step (canned tool
  calls and thinking blocks); with ``chat_template_kwargs.enable_thinking`` its
  Started says the prompt opened a thinking block.
* ``roles``: says the roles of all the request's messages (``system user …``).
* ``repeat <text>`` as the first message: every request of that conversation is
  ``<text>`` (a tool loop whose model calls a tool in every round).
* ``tools``: says the names of the tools its chat template gets (``a b …``).
* ``results``: says the text of the request's tool messages, word by word (text
  parts of a list, each other part as ``<type>``).
* ``media``: says the parts of the messages that have a list of them, as
  ``<role>:<type>``, then ``frames=<n>`` and ``png=<n>`` (payload frames, and those
  that are PNG files): what a vision worker would decode.
* ``priority``: says the request's priority (``interactive`` or ``batch``).
* ``script <a> ;; <b> ;; …`` as the first message, or as the last line of the first
  user message (after a client's own preamble, as Claude Code's system reminder): a
  tool loop's round n (n assistant messages so far) is piece n, the last one from
  then on.
* ``prefill <seconds> …``: a long prompt: after Started, nothing for ``<seconds>``
  but one ``Prefilled`` progress (half the prompt's words) halfway, then it echoes
  the words like any other text.
* anything else: echoes the words back, one per step, ``max_tokens`` capping them
  (finish ``length``), else finish ``stop``; ``sampling.stop`` strings end it early.

An ``Embed`` gets a row ``[words, 1.0]`` for each text (``fake/error-first``: an
Error 500). A ``CountTokens`` is answered at once with the number of words in all messages and
in the JSON of the chat template's tools; a
``Tokenize`` with one token per word of its text (ids 0, 1, …; the words as pieces),
a ``Detokenize`` with its ids joined by spaces.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import zmq

from mlx_gateway.protocol.frames import pack, unpack_request
from mlx_gateway.protocol.messages import (
    Batch,
    Cancel,
    Chunk,
    ContextOverflow,
    CountTokens,
    Detokenize,
    Done,
    Embed,
    Embeddings,
    Error,
    Generate,
    Heartbeat,
    Memory,
    ModelFacts,
    Ping,
    Prefilled,
    Progress,
    Ready,
    Shutdown,
    Started,
    StepProgress,
    Tokenize,
    Tokens,
    Usage,
)
from mlx_gateway.protocol.spec import decode_spec

STEP = 0.02  # seconds per generated "token"


@dataclass
class Active:
    request_id: str
    words: list[str]
    max_tokens: int | None
    prompt_tokens: int
    behaviour: str
    sent: int = 0
    verbatim: bool = False
    calls: list[tuple[str, str]] = field(default_factory=list)
    prefill_until: float = 0.0
    halfway: float | None = None
    """When to send the one ``Prefilled`` of a ``prefill`` request."""


def _script_of(messages: list[dict[str, Any]]) -> str | None:
    """The ``script …`` of a conversation: its first message, or the last line of
    its first user message."""
    first = messages[0].get("content", "")
    if isinstance(first, str) and first.startswith("script "):
        return first.removeprefix("script ")
    user = next((m.get("content") for m in messages if m.get("role") == "user"), None)
    if isinstance(user, str):
        last = user.rstrip().rsplit("\n", 1)[-1]
        if last.startswith("script "):
            return last.removeprefix("script ")
    return None


def text_of(msg: Generate) -> str:
    if msg.messages:
        first = msg.messages[0].get("content", "")
        if isinstance(first, str) and first.startswith("repeat "):
            return first.removeprefix("repeat ")  # every round of a tool loop says it
        script = _script_of(msg.messages)
        if script is not None:
            rounds = script.split(" ;; ")  # round n says piece n
            done = sum(1 for m in msg.messages if m.get("role") == "assistant")
            return rounds[min(done, len(rounds) - 1)]
        content = msg.messages[-1].get("content", "")
        if isinstance(content, list):
            return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
        return str(content)
    if isinstance(msg.prompt, list):
        return " ".join(str(t) for t in msg.prompt)
    return msg.prompt or ""


def _said(content: Any) -> str:
    """A message's text: a list's text parts, each other part as ``<type>``."""
    if not isinstance(content, list):
        return str(content)
    return " ".join(
        str(p.get("text", "")) if p.get("type") == "text" else f"<{p.get('type')}>"
        for p in content
        if isinstance(p, dict)
    )


def overflow_error(request: Generate, text: str) -> Error:
    words = text.split()
    limit = int(words[1])
    max_tokens = request.sampling.max_tokens
    return Error(
        request_id=request.request_id,
        status=400,
        type="invalid_request_error",
        param="messages" if len(words) >= limit else "max_tokens",
        code="context_length_exceeded",
        message=f"This model's maximum context length is {limit} tokens.",
        overflow=ContextOverflow(len(words), max_tokens, limit),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--spec", required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    args = parser.parse_args()
    spec = decode_spec(args.spec)
    mode = spec.model_path.rsplit("/", 1)[-1]
    print(f"fake worker {os.getpid()} mode={mode}", flush=True)

    sock = zmq.Context().socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, spec.worker_id.encode())
    sock.setsockopt(zmq.LINGER, 1000)
    sock.connect(args.endpoint)

    def send(msg: object) -> None:
        sock.send_multipart(pack(msg))  # type: ignore[arg-type]

    if mode == "ignore-sigterm":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if mode == "slow-start":
        for i in range(3):
            send(Progress(stage="load", fraction=i / 3))
            time.sleep(0.5)
    elif mode == "load-error":
        print("loading model...", flush=True)
        send(Error(message="download failed: offline", status=503))
        time.sleep(0.2)  # not a wait: the fake lingers before it exits
        sys.exit(3)
    elif mode == "die-on-load":
        print("about to die while loading", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "no-ready":
        while True:
            time.sleep(1)
    # The memory it "uses", as a real worker would measure and report it.
    rss = int(os.environ.get("FAKE_RSS", "1000000"))
    extra = {}
    if mode == "reasoner":
        extra = {"think_start": "<think>", "think_end": "</think>", "tool_parser": "json_tools"}
    if mode == "mlxparsed":
        extra = {"tool_parser": "longcat"}
    send(
        Ready(
            pid=os.getpid(),
            facts=ModelFacts(context_length=256, model_type="fake", extra=extra),
            memory=Memory(rss=rss),
        )
    )

    active: dict[str, Active] = {}
    shutting_down_at: float | None = None
    last_beat = time.monotonic()
    steps = 0
    finished = 0  # requests that ended with Done (heartbeats report it)
    stuck_since: float | None = None

    def progress() -> StepProgress:
        if stuck_since is None:
            return StepProgress(steps=steps, longest=STEP)
        what = f"decode of {len(active)} requests"
        return StepProgress(steps, what, time.monotonic() - stuck_since, STEP)

    while True:
        if os.getppid() != args.parent_pid:
            print("gateway gone; exiting", flush=True)
            return
        if sock.poll(int(STEP * 1000)):
            try:
                request, frames = unpack_request(sock.recv_multipart())
            except Exception as exc:
                print(f"malformed message ignored: {exc}", flush=True)
                continue
            match request:
                case Generate() if shutting_down_at is not None:
                    send(
                        Error(
                            request_id=request.request_id,
                            status=503,
                            message="the worker is shutting down",
                        )
                    )
                case Generate():
                    text = text_of(request)
                    behaviour = text.strip().split()[0] if text.strip() else ""
                    if mode == "error-first":
                        send(
                            Error(
                                request_id=request.request_id,
                                status=500,
                                message="the model failed before its first token",
                            )
                        )
                        continue
                    if behaviour == "reject":
                        if "bloat" in text:
                            rss *= 8
                        send(
                            Error(
                                request_id=request.request_id,
                                status=400,
                                type="invalid_request_error",
                                param="messages",
                                code="context_length_exceeded",
                                message="too long",
                            )
                        )
                        continue
                    if behaviour == "overflow":
                        send(overflow_error(request, text))
                        continue
                    words = text.split()
                    thinking = bool(request.chat_template_kwargs.get("enable_thinking"))
                    started = Started(request_id=request.request_id, prompt_tokens=len(words))
                    started.reasoning = behaviour == "say" and thinking
                    send(started)
                    item = Active(
                        request.request_id,
                        words,
                        request.sampling.max_tokens,
                        len(words),
                        behaviour,
                    )
                    if behaviour == "hang":  # tests wait for this line, not a fixed time
                        print(f"hanging {request.request_id}", flush=True)
                    if behaviour == "stuck":
                        print(f"step stuck in {request.request_id}", flush=True)
                        stuck_since = time.monotonic()
                    if behaviour in ("prefill", "die"):
                        seconds = float(words[1]) if len(words) > 1 else 1.0
                        item.prefill_until = time.monotonic() + seconds
                        item.halfway = time.monotonic() + seconds / 2
                    if behaviour == "roles":
                        item.words = [str(m.get("role")) for m in request.messages or []]
                    if behaviour == "adapters":  # the LoRA adapters it was asked for
                        item.words = list(request.adapters) or ["base"]
                    if behaviour == "priority":  # the priority it was sent with
                        item.words = [request.priority]
                    if behaviour == "tools":
                        tools = request.chat_template_kwargs.get("tools") or []
                        item.words = [str(t["function"]["name"]) for t in tools]
                    if behaviour == "results":
                        item.words = [
                            word
                            for m in request.messages or []
                            if m.get("role") == "tool"
                            for word in _said(m.get("content", "")).split()
                        ]
                    if behaviour == "media":
                        item.words = [
                            f"{m.get('role')}:{part.get('type')}"
                            for m in request.messages or []
                            if isinstance(m.get("content"), list)
                            for part in m["content"]
                        ]
                        pngs = sum(1 for f in frames if bytes(f).startswith(b"\x89PNG"))
                        item.words += [f"frames={len(frames)}", f"png={pngs}"]
                    if behaviour == "say":
                        rest = text.split("say", 1)[1].lstrip()
                        if request.parse_tools:
                            for body in re.findall(r"<tool_call>(.*?)</tool_call>", rest, re.S):
                                call = json.loads(body)
                                item.calls.append((call["name"], json.dumps(call["arguments"])))
                            rest = re.sub(r"<tool_call>.*?</tool_call>", "", rest, flags=re.S)
                        item.words = [rest[i : i + 4] for i in range(0, len(rest), 4)] or [""]
                        item.verbatim = True
                    active[request.request_id] = item
                case CountTokens(request_id=rid):
                    count = sum(
                        len(str(m.get("content", "")).split()) for m in request.messages or []
                    )
                    tools = request.chat_template_kwargs.get("tools")
                    count += len(json.dumps(tools).split()) if tools else 0
                    send(Done(request_id=rid, finish_reason="counted", usage=Usage(count, 0)))
                case Embed(request_id=rid) if mode == "error-first":
                    send(Error(request_id=rid, status=500, message="the model failed"))
                case Embed(request_id=rid, texts=texts):
                    counts = [float(len(t.split())) for t in texts]
                    matrix = struct.pack(
                        f"<{2 * len(texts)}f", *(v for c in counts for v in (c, 1))
                    )
                    header = Embeddings(request_id=rid, rows=len(texts), dims=2)
                    sock.send_multipart(pack(header, [matrix]))  # type: ignore[arg-type]
                    usage = Usage(int(sum(counts)), 0)
                    send(Done(request_id=rid, finish_reason="stop", usage=usage))
                case Tokenize(request_id=rid):
                    words = (request.text or "").split()
                    pieces = words if request.with_pieces else []
                    send(Tokens(request_id=rid, tokens=list(range(len(words))), pieces=pieces))
                    send(Done(request_id=rid, finish_reason="stop"))
                case Detokenize(request_id=rid, tokens=ids):
                    send(Tokens(request_id=rid, text=" ".join(str(t) for t in ids)))
                    send(Done(request_id=rid, finish_reason="stop"))
                case Cancel(request_id=rid) if stuck_since is not None:
                    print(f"cancel for {rid}: the step is stuck", flush=True)
                case Cancel(request_id=rid) if rid not in active:
                    print(f"cancel for {rid}: not running", flush=True)
                case Cancel(request_id=rid) if rid in active:
                    print(f"cancelled {rid}", flush=True)
                    item = active.pop(rid)
                    send(
                        Done(
                            request_id=rid,
                            finish_reason="cancelled",
                            usage=Usage(item.prompt_tokens, item.sent),
                        )
                    )
                case Shutdown(grace=grace) if mode != "ignore-sigterm":
                    # As the real serve loop: running work may finish within the
                    # grace, then whatever is left ends with Done("cancelled").
                    until = time.monotonic() + max(grace, 0.0)
                    shutting_down_at = min(shutting_down_at or until, until)
                case Ping():
                    beat = Heartbeat(len(active), memory=Memory(rss=rss), step=progress())
                    beat.finished = finished
                    send(beat)
                case _:
                    pass
        if shutting_down_at is not None and (not active or time.monotonic() >= shutting_down_at):
            for item in active.values():
                send(
                    Done(
                        request_id=item.request_id,
                        finish_reason="cancelled",
                        usage=Usage(item.prompt_tokens, item.sent),
                    )
                )
            print("shutdown", flush=True)
            return
        chunks, ended = [], []
        if active and stuck_since is None:
            steps += 1
        for item in active.values() if stuck_since is None else ():
            if item.behaviour == "hang" or (item.behaviour == "drip" and item.sent):
                continue
            if item.halfway is not None and time.monotonic() >= item.halfway:
                item.halfway = None
                half = item.prompt_tokens // 2
                send(Prefilled(request_id=item.request_id, done=half, total=item.prompt_tokens))
            if time.monotonic() < item.prefill_until:
                continue
            if item.behaviour == "die":
                print(f"dying on purpose in {item.request_id}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            if item.behaviour == "crash" and item.sent >= 3:
                print("crashing on purpose", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            word = item.words[item.sent % len(item.words)] if item.words else "x"
            item.sent += 1
            text = word if item.verbatim else word + " "
            chunk = Chunk(request_id=item.request_id, text=text, tokens=1)
            if item.sent >= len(item.words):
                chunk.tool_calls = item.calls
            chunks.append(chunk)
            if item.max_tokens is not None and item.sent >= item.max_tokens:
                ended.append((item, "length"))
            elif item.behaviour not in ("crash", "drip") and item.sent >= len(item.words):
                ended.append((item, "stop"))
        if chunks:
            send(Batch(chunks=chunks))
        for item, reason in ended:
            del active[item.request_id]
            finished += 1
            if item.behaviour == "grow":
                rss *= 2
            send(
                Done(
                    request_id=item.request_id,
                    finish_reason=reason,
                    usage=Usage(prompt_tokens=item.prompt_tokens, completion_tokens=item.sent),
                )
            )
        if time.monotonic() - last_beat > spec.heartbeat_interval:
            last_beat = time.monotonic()
            beat = Heartbeat(len(active), memory=Memory(rss=rss), step=progress())
            beat.finished = finished
            send(beat)


if __name__ == "__main__":
    main()
