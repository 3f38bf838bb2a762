"""A chat-completions body as the worker gets it: messages (images read), the chat
template's variables (tools, thinking), the payload files. Shared by the completion
itself and its token count, so both render exactly the same prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from mlx_gateway.supervisor.engine.conversation import for_template
from mlx_gateway.supervisor.engine.requests import ChatCompletionRequest, messages_to_builtins
from mlx_gateway.supervisor.engine.thinking import Thinking, from_effort
from mlx_gateway.supervisor.engine.tools import ToolSpec, tool_spec
from mlx_gateway.supervisor.engine.turns import template_kwargs
from mlx_gateway.supervisor.engine.vision_input import ImageInputs
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.reply.inputs import prepare_images


@dataclass
class ChatInput:
    tools: ToolSpec
    inputs: ImageInputs
    thinking: Thinking
    kwargs: dict[str, Any]


async def chat_input(
    request: Request, req: ChatCompletionRequest, handle: ModelHandle
) -> ChatInput:
    """Check and convert ``req``'s conversation for ``handle``'s model."""
    tools = tool_spec(req.tools, req.tool_choice, req.parallel_tool_calls)
    messages = for_template(messages_to_builtins(req.messages))
    inputs = await prepare_images(request, handle, messages)
    thinking = from_effort(req.reasoning_effort, req.enable_thinking, req.thinking_budget)
    kwargs = template_kwargs(req.chat_template_kwargs, tools, thinking.enabled)
    return ChatInput(tools, inputs, thinking, kwargs)
