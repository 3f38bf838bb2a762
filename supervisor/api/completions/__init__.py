"""The legacy completions API: POST /v1/completions."""
