"""The ``tools`` of a Responses API request: function tools, namespaces, hosted tools.

* ``function`` tools are offered to the model as they are.
* ``namespace`` tools (``{"type": "namespace", "name": "crm", "tools": [functions…]}``,
  as Codex CLI sends them) are groups of function tools. The model sees each member
  as one flat function named ``<namespace>__<name>``; its calls go back to the client
  as ``function_call`` items with ``name`` and ``namespace`` apart, and such items in
  the input are flattened again for the prompt.
* ``web_search`` (and ``web_search_preview``) and ``mcp`` tools are run by the
  gateway itself (:mod:`...reply.tool_loop`): they become server tool specs.
* ``tool_search`` (run by the server) searches the ``function`` tools marked
  ``defer_loading``: they are not the model's functions until a search finds them
  (or a ``tool_search_output`` of the input loaded them).
* Other tools that OpenAI's servers run or that need their own call item types
  (``file_search``, ``code_interpreter``, ``computer_use_preview``,
  ``image_generation``, ``local_shell``, ``custom`` …) cannot run here: they are
  left out of the model's tools, and the gateway logs a notice (once per type).
* Any other ``type`` is a 400 naming it.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import msgspec

from mlx_gateway.supervisor.api.responses.schemas import ResponsesFunctionTool
from mlx_gateway.supervisor.engine.tools import Function
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.http import validation_error
from mlx_gateway.supervisor.reply.serve import SEPARATOR, ServerToolSpec

logger = logging.getLogger(__name__)

HOSTED_TOOL_TYPES = frozenset(
    {
        "web_search",
        "web_search_2025_08_26",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "computer",
        "computer_use_preview",
        "image_generation",
        "mcp",
        "local_shell",
        "shell",
        "apply_patch",
        "custom",
        "programmatic_tool_calling",
    }
)
"""Tool types this gateway leaves out (with a logged notice) instead of refusing."""

_NAMESPACE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_noticed: set[str] = set()


def flat_name(namespace: str | None, name: str) -> str:
    """The name the model sees for ``name`` in ``namespace`` (``name`` without one)."""
    return f"{namespace}{SEPARATOR}{name}" if namespace else name


@dataclass
class RequestTools:
    """What a request's ``tools`` became: the model's functions, the response's
    ``tools`` field, and the way back from a flat name to (namespace, name)."""

    functions: list[Function] = field(default_factory=list)
    listing: list[dict[str, Any]] = field(default_factory=list)
    origins: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Flat name → (namespace, name), for members of namespaces only."""
    dropped: list[str] = field(default_factory=list)
    server: list[ServerToolSpec] = field(default_factory=list)
    """Tools the gateway runs: web search, MCP servers."""

    def origin(self, flat: str) -> tuple[str | None, str]:
        """(namespace or None, name) of a call the model made under ``flat``."""
        namespace, name = self.origins.get(flat, (None, flat))
        return namespace, name


def _function(raw: Any, param: str) -> ResponsesFunctionTool:
    if not isinstance(raw, dict):
        raise BadRequest(f"Invalid value for '{param}': a tool must be an object.", param=param)
    try:
        return msgspec.convert(raw, ResponsesFunctionTool)
    except msgspec.ValidationError as exc:
        error = validation_error(str(exc))
        where = f"{param}.{error.param}" if error.param else param
        raise BadRequest(f"Invalid value for '{where}': {exc}.", param=where) from None


def _listed(tool: ResponsesFunctionTool) -> dict[str, Any]:
    listed = {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "strict": tool.strict,
    }
    if tool.defer_loading:
        listed["defer_loading"] = True
    return listed


def _model_function(tool: ResponsesFunctionTool, name: str, note: str | None) -> Function:
    description = tool.description
    if note:
        description = f"{note} {description}" if description else note
    return Function(name, tool.parameters or {}, description, bool(tool.strict))


def request_tools(raw: list[dict[str, Any]] | None, loaded: Collection[str] = ()) -> RequestTools:
    """Check and sort the request's ``tools`` (see the module's docstring);
    ``loaded``: deferred tools that earlier searches loaded."""
    out = RequestTools()
    seen: dict[str, str] = {}
    deferred: list[Function] = []

    def add(
        tool: ResponsesFunctionTool, namespace: str | None, note: str | None, param: str
    ) -> None:
        flat = flat_name(namespace, tool.name)
        if flat in seen:
            raise BadRequest(
                f"Invalid value for '{param}': the function name '{flat}' is given twice "
                f"(also at '{seen[flat]}'); give every tool a distinct name.",
                param=param,
            )
        seen[flat] = param
        out.functions.append(_model_function(tool, flat, note))
        if namespace:
            out.origins[flat] = (namespace, tool.name)

    for i, tool in enumerate(raw or []):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind == "function":
            function = _function(tool, f"tools[{i}]")
            add(function, None, None, f"tools[{i}]")
            out.listing.append(_listed(function))
            if function.defer_loading and function.name not in loaded:
                deferred.append(out.functions.pop())
        elif kind == "tool_search" and tool.get("execution") != "client":
            out.server.append(ServerToolSpec("tool_search", type="tool_search"))
            out.listing.append(tool)
        elif kind == "tool_search":  # the client's own search: its calls have no item here
            out.dropped.append(kind)
        elif kind == "namespace":
            out.listing.append(_namespace(tool, i, add, out.dropped))
        elif isinstance(kind, str) and kind.startswith("web_search"):
            out.server.append(_web_search(tool, i))
            out.listing.append(tool)
        elif kind == "mcp":
            out.server.append(_mcp(tool, i))
            out.listing.append(tool)
        elif isinstance(kind, str) and kind in HOSTED_TOOL_TYPES:
            out.dropped.append(kind)
        else:
            raise BadRequest(
                f"Invalid value for 'tools[{i}].type': {kind!r} is not a tool type this "
                "gateway knows (it runs 'function' tools and 'namespace' groups of them, "
                "and leaves out hosted tools such as 'web_search').",
                param=f"tools[{i}].type",
            )
    if deferred:
        _defer(out, deferred)
    for kind in out.dropped:
        if kind not in _noticed:
            _noticed.add(kind)
            logger.warning(
                "Responses API: leaving out the %r tool: it runs on OpenAI's servers (or "
                "needs its own call items), and this gateway only runs function tools; "
                "further %r tools are left out silently",
                kind,
                kind,
            )
    return out


def _defer(out: RequestTools, deferred: list[Function]) -> None:
    """Give the deferred functions to the request's tool search."""
    for i, spec in enumerate(out.server):
        if spec.kind == "tool_search":
            out.server[i] = dataclasses.replace(spec, deferred=deferred)
            return
    raise BadRequest(
        "Invalid value for 'tools': a function with defer_loading needs a "
        "{'type': 'tool_search'} tool beside it.",
        param="tools",
    )


def _namespace(tool: dict[str, Any], i: int, add: Any, dropped: list[str]) -> dict[str, Any]:
    name = tool.get("name")
    if not isinstance(name, str) or not _NAMESPACE.match(name) or SEPARATOR in name:
        raise BadRequest(
            f"Invalid value for 'tools[{i}].name': a namespace needs a name of 1 to 64 "
            f"letters, digits, '_', '.' or '-', without '{SEPARATOR}' (got {name!r}).",
            param=f"tools[{i}].name",
        )
    members = tool.get("tools")
    if not isinstance(members, list):
        raise BadRequest(
            f"Invalid value for 'tools[{i}].tools': a namespace needs a list of tools.",
            param=f"tools[{i}].tools",
        )
    description = tool.get("description")
    description = description if isinstance(description, str) else ""
    note = f"({name}: {description})" if description else None
    listed = []
    for j, member in enumerate(members):
        param = f"tools[{i}].tools[{j}]"
        kind = member.get("type") if isinstance(member, dict) else None
        if kind != "function":
            if isinstance(kind, str) and kind in HOSTED_TOOL_TYPES:
                dropped.append(kind)  # e.g. a custom tool inside the namespace
                continue
            raise BadRequest(
                f"Invalid value for '{param}.type': a namespace holds 'function' tools, "
                f"not {kind!r}.",
                param=f"{param}.type",
            )
        function = _function(member, param)
        add(function, name, note, param)
        listed.append(_listed(function))
    return {"type": "namespace", "name": name, "description": description, "tools": listed}


def _web_search(tool: dict[str, Any], i: int) -> ServerToolSpec:
    filters = tool.get("filters")
    allowed = filters.get("allowed_domains") if isinstance(filters, dict) else None
    if allowed is not None and not (
        isinstance(allowed, list) and all(isinstance(d, str) for d in allowed)
    ):
        raise BadRequest(
            f"Invalid value for 'tools[{i}].filters.allowed_domains': a list of domains.",
            param=f"tools[{i}].filters.allowed_domains",
        )
    return ServerToolSpec("web_search", type=tool["type"], allowed_domains=list(allowed or []))


def _mcp(tool: dict[str, Any], i: int) -> ServerToolSpec:
    param = f"tools[{i}]"
    label = tool.get("server_label")
    if not isinstance(label, str) or not _NAMESPACE.match(label) or SEPARATOR in label:
        raise BadRequest(
            f"Invalid value for '{param}.server_label': an MCP tool needs a label of 1 to 64 "
            f"letters, digits, '_', '.' or '-', without '{SEPARATOR}' (got {label!r}).",
            param=f"{param}.server_label",
        )
    url = tool.get("server_url")
    if url is not None and not isinstance(url, str):
        raise BadRequest(f"Invalid value for '{param}.server_url'.", param=f"{param}.server_url")
    headers = tool.get("headers") or {}
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise BadRequest(
            f"Invalid value for '{param}.headers': an object of strings.", param=f"{param}.headers"
        )
    allowed = tool.get("allowed_tools")
    if isinstance(allowed, dict):  # {"tool_names": [...]}
        allowed = allowed.get("tool_names")
    if allowed is not None and not (
        isinstance(allowed, list) and all(isinstance(n, str) for n in allowed)
    ):
        raise BadRequest(
            f"Invalid value for '{param}.allowed_tools': a list of tool names.",
            param=f"{param}.allowed_tools",
        )
    approval = tool.get("require_approval", "always")
    if isinstance(approval, dict):  # {"never": {"tool_names": [...]}} and the like
        never = approval.get("never")
        approval = "never" if isinstance(never, dict) and not approval.get("always") else "always"
    if approval not in ("always", "never"):
        raise BadRequest(
            f"Invalid value for '{param}.require_approval': 'always' or 'never'.",
            param=f"{param}.require_approval",
        )
    return ServerToolSpec(
        "mcp",
        type="mcp",
        name=label,
        server_url=url,
        headers=dict(headers),
        allowed_tools=allowed,
        require_approval=approval,
    )
