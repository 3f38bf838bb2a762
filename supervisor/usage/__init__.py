"""Usage: what each answered request used (key, model, kind, tokens, audio, images,
time, status), kept in a small SQLite file in the gateway's state folder.

:mod:`.rows` is one request's row and the kind of request a route is,
:mod:`.store` the database and its writer thread (rows are queued by the request
path and written in batches off it), :mod:`.query` the sums ``GET /v1/usage``
and ``mlx-gateway usage`` read, :mod:`.times` the time range a client names.
"""
