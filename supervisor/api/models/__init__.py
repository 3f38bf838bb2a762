"""Models and administration: /v1/models, load/unload, /health, /metrics, OpenAPI."""
