"""MLX's global random state, made whole again after a failed step.

``mx.compile(..., inputs=mx.random.state, outputs=mx.random.state)`` (mlx-lm's
categorical sampler, the samplers of other backends) puts placeholders into
``mx.random.state`` while it traces the function. An exception raised during that
trace (a setting of the wrong type, a shape the model did not expect) leaves a
placeholder there, and from then on every random draw in the process fails with
"[eval] Attempting to eval an array without a primitive": one failed request would
fail every later sampled request of the worker. The serve loop calls
:func:`repair_random_state` after a failed step.
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger(__name__)


def repair_random_state() -> bool:
    """Replace MLX's global random key with a fresh one if it cannot be evaluated;
    True when it had to. A process that has not imported MLX has nothing to repair."""
    mx = sys.modules.get("mlx.core")
    if mx is None:
        return False
    try:
        mx.eval(mx.random.state)
        return False
    except Exception as exc:  # MLX raises RuntimeError; anything else means broken too
        mx.random.seed(int.from_bytes(os.urandom(8), "little"))
        log.warning("MLX's random state was left broken by the failed step (%s); reseeded", exc)
        return True
