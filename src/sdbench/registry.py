"""Registries of implementations, extended by third-party packages through entry points.

One :class:`Registry` per kind (protocols, filesystems): the built-in entries,
then every entry point of its group, loaded the first time the registry is
read. Lookups of unknown names are one-line ConfigErrors naming the known ones.
"""
from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from .errors import ConfigError

T = TypeVar("T")

#: top-level modules of the plugins loaded so far (an error inside one is the plugin's, not sdbench's)
PLUGIN_MODULES: set[str] = set()


class Registry(Generic[T]):
    def __init__(self, kind: str, group: str, spec_type: type[T], builtin: Iterable[T]) -> None:
        self.kind = kind              # "protocol", "filesystem": what the messages call an entry
        self.group = group            # the entry point group plugins register under
        self.spec_type = spec_type
        self._specs: dict[str, T] = {}
        self._plugins_loaded = False
        for spec in builtin:
            self.register(spec)

    def register(self, spec: T) -> None:
        """Add an entry (plugins loaded by hand, tests)."""
        if not isinstance(spec, self.spec_type):
            raise ConfigError(f"a {self.kind} must be a {self.spec_type.__name__}, not {type(spec).__name__}")
        name = spec.name  # type: ignore[attr-defined]
        if self._specs.get(name, spec) is not spec:
            raise ConfigError(f"{self.kind} {name!r} is registered twice")
        self._specs[name] = spec

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for ep in entry_points(group=self.group):
            try:
                spec = ep.load()
            except Exception as e:  # a broken plugin is the user's environment, not a bug here
                raise ConfigError(f"{self.kind} plugin {ep.name!r} ({ep.value}) does not load: "
                                  f"{type(e).__name__}: {e}") from None
            self.register(spec)
            PLUGIN_MODULES.add(ep.value.split(":")[0].split(".")[0])

    def all(self) -> dict[str, T]:
        """Every entry, built-in first, then plugins."""
        self._load_plugins()
        return dict(self._specs)

    def get(self, name: str) -> T:
        known = self.all()
        if not isinstance(name, str) or name not in known:
            raise ConfigError(f"unknown {self.kind} {name!r:.60} (known: {', '.join(known)})")
        return known[name]
