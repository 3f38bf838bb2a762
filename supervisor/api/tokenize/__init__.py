"""``POST /tokenize`` and ``/detokenize``."""
