"""Request fields of chat completions for tools and structured output.

``tools``, ``tool_choice`` and ``response_format`` as msgspec Structs (so a wrong
shape is a 400 naming the field) and their plain forms for the rest of the
gateway: :class:`~mlx_gateway.supervisor.engine.parsers.tool_calls.Function` and
:class:`OutputSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from mlx_gateway.supervisor.engine.parsers.tool_calls import Function
from mlx_gateway.supervisor.errors import BadRequest

__all__ = ["Function", "OutputSpec", "ToolSpec", "checked_spec", "output_spec", "tool_spec"]

FunctionName = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")]
"""OpenAI's rule for function names (dots allowed too, as some clients use them)."""


class FunctionDefinition(Struct):
    name: FunctionName
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class FunctionTool(Struct, tag="function", tag_field="type"):
    """``{"type": "function", "function": {"name", "description", "parameters", "strict"}}``."""

    function: FunctionDefinition


class NamedFunction(Struct):
    name: FunctionName


class NamedToolChoice(Struct, tag="function", tag_field="type"):
    """``{"type": "function", "function": {"name": …}}``: call exactly this function."""

    function: NamedFunction


ToolChoiceMode = Literal["none", "auto", "required"]


class JsonSchemaSpec(Struct):
    name: Annotated[str, Meta(pattern=r"^[A-Za-z0-9_\-]{1,64}$")]
    schema: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


class TextFormat(Struct, tag="text", tag_field="type"):
    pass


class JsonObjectFormat(Struct, tag="json_object", tag_field="type"):
    pass


class JsonSchemaFormat(Struct, tag="json_schema", tag_field="type"):
    json_schema: JsonSchemaSpec


ResponseFormat = TextFormat | JsonObjectFormat | JsonSchemaFormat


# ---------------------------------------------------------------- plain forms


@dataclass(frozen=True)
class OutputSpec:
    """What the answer must be: free text, any JSON object, or JSON of ``schema``."""

    kind: Literal["text", "json_object", "json_schema"] = "text"
    schema: dict[str, Any] | None = None
    param: str = "response_format"
    """The request field it came from (for errors)."""


@dataclass
class ToolSpec:
    """The tools of a request, whatever API it came through."""

    functions: list[Function] = field(default_factory=list)
    choice: str = "auto"
    """``auto``, ``none``, ``required``, or the name of the one function to call."""
    parallel: bool = True
    placed: list[Function] = field(default_factory=list)
    """Functions the model may call whose definitions stand in the conversation
    itself (where a ``tool_reference`` loaded them) rather than in the template's
    tool list: the prompt before them stays as it was, and so does its cache."""

    @property
    def forced(self) -> bool:
        """The model must call a tool (``required`` or a named function)."""
        return bool(self.parsed()) and self.choice not in ("auto", "none")

    @property
    def active(self) -> bool:
        """Tool calls are parsed out of the answer."""
        return bool(self.functions or self.placed) and self.choice != "none"

    def parsed(self) -> list[Function]:
        """Every function a call in the answer may name."""
        return [*self.functions, *self.placed]

    def callable(self) -> list[Function]:
        """The functions a forced call may name (placed ones too)."""
        if self.choice in ("auto", "none", "required"):
            return self.parsed()
        return [f for f in self.parsed() if f.name == self.choice]


def function_of(definition: FunctionDefinition) -> Function:
    return Function(
        name=definition.name,
        parameters=definition.parameters or {},
        description=definition.description,
        strict=bool(definition.strict),
    )


def tool_spec(
    tools: list[FunctionTool] | None,
    choice: ToolChoiceMode | NamedToolChoice | None,
    parallel: bool | None,
    param: str = "tool_choice",
) -> ToolSpec:
    """The :class:`ToolSpec` of chat completions' ``tools``/``tool_choice``; a named
    function that is not among the tools, or ``required`` without tools, is a 400."""
    functions = [function_of(t.function) for t in tools or []]
    names = [f.name for f in functions]
    if len(set(names)) != len(names):
        raise BadRequest("Function names in 'tools' must be unique.", param="tools")
    return checked_spec(functions, choice_name(choice), parallel, param)


def choice_name(choice: ToolChoiceMode | NamedToolChoice | None) -> str:
    if choice is None:
        return "auto"
    if isinstance(choice, NamedToolChoice):
        return choice.function.name
    return choice


def checked_spec(
    functions: list[Function], choice: str, parallel: bool | None, param: str
) -> ToolSpec:
    """A :class:`ToolSpec` after the checks every API shares."""
    if choice not in ("auto", "none", "required") and choice not in {f.name for f in functions}:
        raise BadRequest(
            f"Invalid value for '{param}': function '{choice}' is not among the tools.",
            param=param,
        )
    if choice == "required" and not functions:
        raise BadRequest(
            f"Invalid value for '{param}': 'required' needs at least one tool.", param=param
        )
    return ToolSpec(functions, choice, True if parallel is None else parallel)


def output_spec(fmt: ResponseFormat | None, param: str = "response_format") -> OutputSpec:
    """The :class:`OutputSpec` of chat completions' ``response_format``."""
    match fmt:
        case JsonObjectFormat():
            return OutputSpec("json_object", None, param)
        case JsonSchemaFormat(json_schema=spec):
            return OutputSpec("json_schema", spec.schema or {}, f"{param}.json_schema.schema")
        case _:
            return OutputSpec()
