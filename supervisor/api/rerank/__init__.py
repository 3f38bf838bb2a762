"""``POST /v1/rerank`` (and ``/rerank``, ``/v2/rerank``)."""
