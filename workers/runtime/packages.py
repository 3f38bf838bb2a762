"""A library's submodules imported without its package's ``__init__``.

Some libraries' ``__init__`` imports everything the library offers: mlx-whisper's
imports its ``transcribe`` and, through its word timings, SciPy and Numba (about 0.9
s of a 1.2-s import on two cores), while the whisper worker uses its model, audio,
decoding and tokenizer modules and only needs the word timings when a request asks
for them. :func:`skip_package_init` registers such a package as a bare package
(its ``__path__``, nothing run), so ``import pkg.sub`` runs only ``sub`` and what
it imports. The worker does this before importing its backend
(:func:`..extras.import_backend`), so only worker processes see the bare package.
"""

from __future__ import annotations

import importlib.util
import sys


def skip_package_init(name: str) -> bool:
    """Register the package ``name`` without running its ``__init__``; ``False`` (and
    nothing changed) when it is imported already, or is not installed or no package."""
    if name in sys.modules:
        return False
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        return False
    sys.modules[name] = importlib.util.module_from_spec(spec)
    return True
