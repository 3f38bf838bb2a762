"""``python -m mlx_gateway.workers.runtime.launch <mlx.launch arguments>``: MLX's ``mlx.launch``,
made to wait instead of spin when it runs under the gateway.

``mlx.launch`` relays its own stdin to every rank: each rank's thread selects on
that rank's stdin pipe for writing (always writable, so the select never sleeps)
and its main loop polls its own stdin (the gateway gives workers ``/dev/null``,
always readable at end of file). Either keeps a core busy for as long as the model
is loaded. The gateway never writes to a worker's stdin, so here stdin becomes a
pipe that never has data and the ranks' stdin pipes are left out of the select:
the loop then sleeps until a rank writes output or its one-second timeout.
"""

from __future__ import annotations

import os
import select
from typing import Any


def main() -> None:
    from mlx._distributed_utils import launch

    read_end, _write_end = os.pipe()  # the write end stays open: never at end of file
    os.dup2(read_end, 0)
    os.close(read_end)

    def wait_for_output(rlist: Any, _wlist: Any, xlist: Any, timeout: float | None = None) -> Any:
        readable, _, broken = select.select(rlist, [], xlist, timeout)
        return readable, [], broken

    launch.select = wait_for_output
    launch.main()


if __name__ == "__main__":
    main()
