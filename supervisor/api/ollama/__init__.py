"""Ollama's native API (``/api/...``) on the gateway's port."""
