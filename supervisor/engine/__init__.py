"""The API-neutral generation engine.

A turn (prompt, sampling, tools, output format) is sent to a worker and its replies
are parsed into reasoning, text and tool calls; every API surface builds on it.
"""
