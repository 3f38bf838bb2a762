"""An lm backend in process that records what it emitted and the token ids it
generated (observed by wrapping ``Scheduler._advance`` and ``Scheduler._take_plain``,
the methods that take each token; the generation itself is untouched)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from mlx_gateway.protocol.messages import Batch, Done, Generate, Reply, SamplingParams
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.lm.backend import LmBackend

PROMPTS = {
    "a": "hello world",
    "b": "The quick brown fox jumps over the lazy dog. " * 3,
    "c": "One, two, three: count the steps",
    "d": "Models stream tokens; the gateway relays them to every client. " * 5,
}


class Recorder:
    """A backend plus everything it emitted and every token id it generated."""

    def __init__(
        self,
        model: Path,
        *,
        solo: bool = True,
        prefill_step_size: int = 2048,
        solo_check: bool = True,
        **options: object,
    ) -> None:
        spec = WorkerSpec(
            worker_id="w",
            kind="lm",
            model_path=str(model),
            served_model_name="tiny",
            max_concurrency=int(options.pop("max_concurrency", 4)),  # type: ignore[call-overload]
            prefill_step_size=prefill_step_size,
            options=dict(options),
        )
        self.replies: list[Reply] = []
        self.backend = LmBackend()
        self.backend.load(spec, self.replies.append)
        if solo_check:
            assert self.backend.scheduler.solo_enabled  # a llama: a plain KVCache per layer
            self.backend.scheduler.solo_enabled = solo
        self.tokens: dict[str, list[int]] = defaultdict(list)
        advance, take_plain = self.backend.scheduler._advance, self.backend.scheduler._take_plain

        def spy(active, token, *rest):  # type: ignore[no-untyped-def]
            self.tokens[active.request_id].append(token)
            return advance(active, token, *rest)

        def spy_plain(active, token):  # type: ignore[no-untyped-def]
            self.tokens[active.request_id].append(token)
            take_plain(active, token)

        self.backend.scheduler._advance = spy  # type: ignore[method-assign]
        self.backend.scheduler._take_plain = spy_plain  # type: ignore[method-assign]

    def submit(
        self, request_id: str, content: str, max_tokens: int = 24, **sampling: object
    ) -> None:
        self.backend.submit(
            Generate(
                request_id=request_id,
                messages=[{"role": "user", "content": content}],
                sampling=SamplingParams(max_tokens=max_tokens, temperature=0.0, **sampling),  # type: ignore[arg-type]
            ),
            [],
        )

    def step(self, n: int = 1) -> None:
        for _ in range(n):
            self.backend.step()

    def run(self) -> None:
        for _ in range(10_000):
            if not self.backend.has_work():
                return
            self.backend.step()
        raise AssertionError("the backend never went idle")

    def done(self, request_id: str) -> Done:
        return next(r for r in self.replies if isinstance(r, Done) and r.request_id == request_id)

    def text(self, request_id: str) -> str:
        return "".join(
            c.text
            for r in self.replies
            if isinstance(r, Batch)
            for c in r.chunks
            if c.request_id == request_id
        )

    def close(self) -> None:
        self.backend.close()
