"""The one error a config load raises: where and what to change."""

from __future__ import annotations


class ConfigError(Exception):
    """A config that cannot be used; the message says where and what to change.

    ``file``, ``line`` (1-based), ``key`` (e.g. ``models[1].temperature``) and
    ``model_index`` repeat the location for callers that want it structured.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        key: str | None = None,
        model_index: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.key = key
        self.model_index = model_index
