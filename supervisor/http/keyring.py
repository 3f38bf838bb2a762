"""The gateway's keys, each standing for an app (a :class:`.caller.Caller`), found
in constant time.

``server.keys`` entries are apps with their own names; the shorthand lists stand
for apps too: each key of ``api_keys`` is a ``client`` app named ``key-<fp>`` and
each of ``admin_keys`` an ``admin`` app named ``admin-<fp>``, where ``<fp>`` is the
first 8 hex digits of the key's SHA-256 (a key in both lists is the admin one).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mlx_gateway.supervisor.config.apps import KeyConfig
from mlx_gateway.supervisor.http.app_limits import AppLimits
from mlx_gateway.supervisor.http.caller import Caller


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def fingerprint(key: str) -> str:
    """The first 8 hex digits of ``key``'s SHA-256: which key, never the key."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:8]


class KeyRing:
    """A list of keys checked in constant time.

    Keys are kept as SHA-256 digests and every one is compared, so neither the
    length of a guess nor how far it matches, nor which entry it is, shows in the
    time a check takes."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = [_digest(key) for key in keys]

    def __bool__(self) -> bool:
        return bool(self._digests)

    def __contains__(self, key: object) -> bool:
        return self.find(key) is not None

    def find(self, key: object) -> int | None:
        """The index of ``key`` in the ring, or ``None``."""
        if not isinstance(key, str):
            return None
        candidate = _digest(key)
        found = -1
        for i, digest in enumerate(self._digests):
            match = hmac.compare_digest(digest, candidate)
            found = i if match else found  # no early exit: every entry is compared
        return None if found < 0 else found


@dataclass(frozen=True, slots=True)
class App:
    """A key's app: who it is, and its limits (``None`` when it has none)."""

    caller: Caller
    limits: AppLimits | None = None


def caller_for(entry: KeyConfig) -> Caller:
    """The :class:`Caller` of a ``server.keys`` entry."""
    return Caller(
        name=entry.name,
        role=entry.role,
        priority=entry.priority,
        models=tuple(entry.models) if entry.models is not None else None,
        tools=tuple(entry.tools) if entry.tools is not None else None,
        fingerprint=fingerprint(entry.key),
    )


class Apps:
    """Every app that has a key, found by the key a request presents."""

    def __init__(
        self,
        *,
        api_keys: Sequence[str] = (),
        admin_keys: Sequence[str] = (),
        keys: Sequence[KeyConfig] = (),
    ) -> None:
        entries: dict[str, App] = {}
        for key in api_keys:
            fp = fingerprint(key)
            entries[key] = App(Caller(name=f"key-{fp}", fingerprint=fp))
        for key in admin_keys:
            fp = fingerprint(key)
            entries[key] = App(Caller(name=f"admin-{fp}", role="admin", fingerprint=fp))
        for entry in keys:
            limits = AppLimits(entry)
            entries[entry.key] = App(caller_for(entry), limits if limits.any else None)
        self._ring = KeyRing(entries)
        self._apps = list(entries.values())
        roles = {app.caller.role for app in self._apps}
        self.has_admin = "admin" in roles
        """Some key is an admin's: the admin endpoints take only those."""
        self.closed = bool(api_keys) or bool(keys)
        """Every endpoint (but the open ones) needs a key; only ``admin_keys``
        given: the client endpoints stay open, as without keys."""

    def __bool__(self) -> bool:
        return bool(self._apps)

    def find(self, key: str | None) -> App | None:
        """The app whose key is ``key`` (compared in constant time), or ``None``."""
        index = self._ring.find(key)
        return None if index is None else self._apps[index]
