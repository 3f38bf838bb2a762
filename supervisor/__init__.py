"""The gateway process: config, HTTP API, worker supervision. Never imports MLX."""
