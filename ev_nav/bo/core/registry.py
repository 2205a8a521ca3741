"""The one registry shape of the BO families: names, one-line summaries and what they build.

Each family keeps its methods and benchmarks in :class:`Registry` objects inside its own package;
``ev-nav bo FAMILY list`` prints them and an unknown name fails with one line naming the choices.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from ev_nav.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered name: what it is (one line) and the object it stands for."""

    name: str
    summary: str
    value: T


class Registry(Generic[T]):
    """An ordered name → :class:`Entry` table.

    Parameters
    ----------
    kind
        What the names are ("method", "benchmark"), for error messages.
    family
        The family the table belongs to ("cvs", "ptr", …), for error messages.
    """

    def __init__(self, kind: str, family: str) -> None:
        self.kind = kind
        self.family = family
        self._entries: dict[str, Entry[T]] = {}

    def add(self, name: str, summary: str, value: T) -> T:
        """Register ``value`` under ``name`` (names are unique); returns ``value``."""
        if name in self._entries:
            raise ConfigError(f"{self.family} {self.kind} {name!r} is registered twice")
        self._entries[name] = Entry(name, summary, value)
        return value

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def entry(self, name: str) -> Entry[T]:
        """The entry of ``name``; an unknown name raises :class:`ConfigError` listing the names."""
        try:
            return self._entries[name]
        except KeyError:
            raise ConfigError(
                f"unknown {self.family} {self.kind} {name!r}; use one of {', '.join(self.names)}"
            ) from None

    def get(self, name: str) -> T:
        """The object registered under ``name``."""
        return self.entry(name).value
