"""Peer gateways: other mlx-gateway (or OpenAI-compatible) servers whose models this
gateway lists and forwards requests to (``server.peers``).

:mod:`.directory` keeps each peer's health and model list; :mod:`.target` reads the
model a request names; :mod:`.forward` relays one request upstream byte for byte;
:mod:`.middleware` decides, per request, between this gateway and its peers.
"""
