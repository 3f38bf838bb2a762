"""Benchmarks (run with ``uv run python -m bench.<name>``)."""
