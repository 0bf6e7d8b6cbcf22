"""A process-wide registry of long-lived objects made on first use: the SQL box's worker pools
(:mod:`wap_core.analysis.sandbox`) and the notification deliverers (:mod:`wap_core.notify.deliverer`).

One lock guards the map; :meth:`Registry.take_all` empties it for a shutdown that then stops each object
outside the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Registry(Generic[K, V]):
    """Objects by key, each made once by the first caller that asks for it. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[K, V] = {}

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The object of ``key``, made by ``make()`` (under the lock) when there is none yet."""
        with self._lock:
            item = self._items.get(key)
            if item is None:
                item = self._items[key] = make()
            return item

    def all(self) -> list[V]:
        """Every object, at this moment."""
        with self._lock:
            return list(self._items.values())

    def take_all(self) -> list[V]:
        """Every object, removed from the registry (the caller stops them)."""
        with self._lock:
            items = list(self._items.values())
            self._items.clear()
            return items
