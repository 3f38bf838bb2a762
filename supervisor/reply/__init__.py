"""The reply path every API surface shares: a generation's events relayed to the
client as a stream (started at once or once its model is loaded, with keep-alives)
or gathered into one body, and the request-bound preparation of a turn's inputs.

It joins the engine (API-neutral generation, no HTTP) and the HTTP plumbing; the
routes of ``api/`` call it, and neither ``engine/`` nor ``http/`` imports it.
"""
