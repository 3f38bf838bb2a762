"""Structure in a language model's text stream: thinking blocks and tool calls.

Models write their reasoning and their tool calls as plain text in a format of
their family (``<think>…</think>``, ``<tool_call>{…}</tool_call>``, …). These
parsers run in the gateway on the streamed text, so every API (chat completions,
Responses, Anthropic Messages) and every worker kind shares them; they are pure
string code, with no model library involved. :mod:`.grammars` goes the other way:
the Lark grammar that makes a model write a tool call in its own format.
"""
