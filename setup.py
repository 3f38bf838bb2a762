"""Package discovery for this repository's layout; everything else is in pyproject.toml.

The top-level folders ``protocol/``, ``store/``, ``supervisor/`` and ``workers/`` are
imported as ``mlx_gateway.protocol``, ``mlx_gateway.store``, ``mlx_gateway.supervisor``
and ``mlx_gateway.workers``.
``[tool.setuptools.packages.find]`` cannot put the packages it finds under a prefix,
so they are found here: each root and every package below it, whatever the layout.
"""

from setuptools import find_packages, setup

ROOTS = ("protocol", "store", "supervisor", "workers")

found = find_packages(include=[pattern for root in ROOTS for pattern in (root, f"{root}.*")])

setup(
    packages=[f"mlx_gateway.{name}" for name in found],
    package_dir={f"mlx_gateway.{root}": root for root in ROOTS},
)
