from .fakes import make_registry

__all__ = ["make_registry"]
