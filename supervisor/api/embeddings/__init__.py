"""The embeddings API: POST /v1/embeddings."""
