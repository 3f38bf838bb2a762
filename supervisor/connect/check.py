"""``connect --check``: after writing, ask the gateway for the chosen model (with the
key the client was given) and compare its context with what the client needs.

It generates nothing: it reads ``GET /v1/models/{id}`` (the worker's own context
length once it ran) and weighs it against the client's measured first request
(:mod:`.needs`). A model's prefill speed is not measured by the gateway, so "too
slow" is not judged.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from mlx_gateway.supervisor.connect.needs import fits_note
from mlx_gateway.supervisor.connect.target import Target


def check(target: Target) -> tuple[bool, str]:
    """Whether the client can work with the model, and the line saying so."""
    quoted = urllib.parse.quote(target.model, safe="/")
    request = urllib.request.Request(f"{target.v1}/models/{quoted}")
    if target.key:
        request.add_header("Authorization", f"Bearer {target.key}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            entry = json.load(response)
    except urllib.error.HTTPError as exc:
        return False, f"check: FAILED: {target.v1} answered {exc.code} for {target.model}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return False, f"check: FAILED: cannot ask {target.v1} about {target.model}: {exc}"
    window = entry.get("context_window") if isinstance(entry, dict) else None
    if not isinstance(window, int):
        return True, (
            f"check: OK: {target.model} answers; its context length is not known until it "
            "has loaded (run --check again then)"
        )
    needs = target.needs
    if needs is None:
        return True, f"check: OK: {target.model} answers, context {window:,} tokens"
    if (problem := fits_note(target.model, window, needs)) is not None:
        return False, f"check: TOO LONG: {problem}"
    return True, (
        f"check: OK: {target.model}'s {window:,}-token context holds {needs.label}'s first "
        f"request (about {needs.tokens:,} tokens) with {window - needs.tokens:,} to spare"
    )
