"""``GET /v1/requests`` and ``POST /v1/requests/{id}/cancel``."""
