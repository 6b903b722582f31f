"""A tiny name -> object registry used for ``DATASETS``, ``ENCODERS`` and ``METHODS``.

Registries replace if-chains: adding a method is one decorator, and an unknown name raises
an :class:`~mixdp_core.errors.UnknownNameError` that lists the real keys.
"""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

from .errors import UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """An ordered mapping from names to registered objects.

    Args:
        kind: what the registry holds (``"dataset"``, ``"encoder"``, ``"method"``), used in
            error messages.
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator registering ``obj`` under ``name``; duplicate names are an error."""

        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = obj
            return obj

        return deco

    def add(self, name: str, obj: T) -> T:
        """Register ``obj`` under ``name`` (non-decorator form)."""
        return self.register(name)(obj)

    def get(self, name: str) -> T:
        """Return the object registered as ``name``.

        Raises:
            UnknownNameError: ``name`` is not registered; the message lists valid keys.
        """
        try:
            return self._items[name]
        except (KeyError, TypeError):  # TypeError: an unhashable name (e.g. a list) is unknown too
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}; choose one of: {', '.join(self._items)}",
                kind=self.kind, name=name, choices=tuple(self._items),
            ) from None

    __getitem__ = get

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def keys(self) -> list[str]:
        return list(self._items)

    def items(self) -> list[tuple[str, T]]:
        return list(self._items.items())
