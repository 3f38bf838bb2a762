"""Tool search: tools a request marks ``defer_loading`` are not rendered into the
prompt. The model sees their names in the description of one search tool,
``tool_search``; a search answers the names of the tools that match, and those
tools are offered to the model from the next round on (:mod:`...reply.tool_loop`).

Two ways to match, as Anthropic's two search tools do: a regular expression
(``tool_search_tool_regex_*``: Python's ``re.search``, case-insensitive) over
each tool's name, description and argument names, or keywords
(``tool_search_tool_bm25_*`` and OpenAI's ``tool_search``) ranked by BM25 over the
same text. Pure functions: the count of a prompt renders the same search tool
as the turn does.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Sequence

from mlx_gateway.supervisor.engine.parsers.tool_calls import Function
from mlx_gateway.supervisor.engine.server_tools import ServerToolSpec

NAME = "tool_search"
"""The name the model calls the search tool by, whatever the surface names it."""
MAX_MATCHES = 5
"""Most tools one search loads (Anthropic's answers three to five)."""

_WORD = re.compile(r"[a-z0-9]+")


def search_function(deferred: Sequence[Function], regex: bool) -> Function:
    """The function the model sees: its argument, and the names it can find."""
    names = ", ".join(f.name for f in deferred)
    if regex:
        argument = "pattern"
        about = "A Python regular expression, matched case-insensitively against each tool's "
    else:
        argument = "query"
        about = "Keywords, ranked against each tool's "
    parameters = {
        "type": "object",
        "properties": {
            argument: {"type": "string", "description": f"{about}name and description."}
        },
        "required": [argument],
    }
    description = (
        "Load tools before calling them: these tools exist but are not loaded yet: "
        f"{names}. Search for the ones you need; the tools found can be called next."
    )
    return Function(NAME, parameters, description)


def is_regex(spec: ServerToolSpec) -> bool:
    """Whether the search matches a regular expression (else keywords)."""
    return "regex" in spec.type


def spec_function(spec: ServerToolSpec) -> Function:
    """The search tool the model sees for a ``tool_search`` spec."""
    return search_function(spec.deferred, is_regex(spec))


def _text(function: Function) -> str:
    properties = function.parameters.get("properties")
    arguments = " ".join(properties) if isinstance(properties, dict) else ""
    return f"{function.name}\n{function.description or ''}\n{arguments}"


def _words(text: str) -> list[str]:
    return _WORD.findall(text.replace("_", " ").lower())


def matching(deferred: Sequence[Function], query: str, regex: bool) -> list[Function]:
    """The deferred tools ``query`` finds, best first (at most :data:`MAX_MATCHES`);
    a bad regular expression raises :class:`re.error`."""
    if regex:
        pattern = re.compile(query, re.IGNORECASE)
        return [f for f in deferred if pattern.search(_text(f))][:MAX_MATCHES]
    return _bm25(deferred, query)[:MAX_MATCHES]


def _bm25(
    deferred: Sequence[Function], query: str, k1: float = 1.2, b: float = 0.75
) -> list[Function]:
    documents = [Counter(_words(_text(f))) for f in deferred]
    if not documents:
        return []
    average = sum(sum(d.values()) for d in documents) / len(documents) or 1.0
    terms = set(_words(query))
    scored = []
    for function, words in zip(deferred, documents, strict=True):
        length = sum(words.values())
        score = 0.0
        for term in terms:
            tf = words[term]
            if not tf:
                continue
            having = sum(1 for d in documents if term in d)
            idf = math.log(1 + (len(documents) - having + 0.5) / (having + 0.5))
            score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average))
        if score > 0:
            scored.append((score, function))
    scored.sort(key=lambda pair: -pair[0])
    return [function for _score, function in scored]


def found_text(found: Sequence[Function], query: str) -> str:
    """What the model reads of a search: the tools it can call now, with schemas."""
    if not found:
        return f"No tool matches {query!r}."
    lines = [
        json.dumps(
            {"name": f.name, "description": f.description or "", "parameters": f.parameters},
            ensure_ascii=False,
        )
        for f in found
    ]
    return "Loaded these tools; they can be called now:\n" + "\n".join(lines)
