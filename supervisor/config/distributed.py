"""A language model sharded over several processes or Macs (a model entry's
``distributed:`` block; docs/cluster.md)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

_Port = Annotated[int, msgspec.Meta(ge=1, le=65535)]
_Positive = Annotated[int, msgspec.Meta(ge=1)]


class DistributedConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A language model sharded over several processes or Macs, started through
    ``mlx.launch`` (a model entry's ``distributed:`` block; docs/cluster.md)."""

    hosts: Annotated[list[Annotated[str, msgspec.Meta(min_length=1)]], msgspec.Meta(min_length=1)]
    """The machines, as ``ssh`` reaches them; the first one is this machine (rank 0
    talks to the gateway over a local socket). ``127.0.0.1``: a local rank."""
    ranks_per_host: _Positive = 1
    """Processes per host (``mlx.launch -n``)."""
    backend: Literal["ring", "jaccl", "jaccl-ring"] = "ring"
    """``ring``: TCP (Ethernet, Thunderbolt bridge); ``jaccl``: RDMA over Thunderbolt 5,
    every Mac cabled to every other; ``jaccl-ring``: RDMA, each Mac to its neighbours."""
    parallel: Literal["tensor", "pipeline"] = "tensor"
    """How mlx-lm's ``sharded_load`` splits the model: every layer across the ranks
    (``tensor``), or consecutive layers per rank (``pipeline``)."""
    hostfile: str | None = None
    """An ``mlx.distributed_config`` host file (its IPs on the Thunderbolt links);
    replaces ``hosts`` for ``mlx.launch`` when set."""
    python: str | None = None
    """The interpreter on the other hosts (same path as here when unset)."""
    starting_port: _Port | None = None
    """Ring backend: the first TCP port of the ranks (``mlx.launch``'s default when unset)."""
