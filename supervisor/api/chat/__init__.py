"""The chat completions API: POST /v1/chat/completions."""
