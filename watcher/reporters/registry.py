"""The reporters by name: the built-in ones and those other packages register.

Both ``watch --format`` and ``report --format`` choose from here, each among the
reporters whose :attr:`~watcher.reporters.base.Reporter.commands` name it. A package
adds one with an entry point in the group ``inspect_watch.reporters``, named as it is
chosen on the command line and pointing at a :class:`~watcher.reporters.base.Reporter`
subclass (docs/ARCHITECTURE.md, "Add a reporter")::

    [project.entry-points."inspect_watch.reporters"]
    tsv = "my_package.tsv:TsvReporter"

Entry points are looked up only for a name that is not built in (reading every
installed distribution's metadata costs milliseconds a watch need not pay), and a
registered name cannot replace a built-in one. A built-in reporter's module is imported
only when that reporter is asked for: a ``watch --format jsonl`` paid ~60 ms for the
HTML and Markdown renderers it never used.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from watcher.reporters.base import Reporter

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

ENTRY_POINT_GROUP = "inspect_watch.reporters"

# name: (module, class, the commands it is for): the commands are spelled here as well as
# on the class, so that the help and a check of --format import no reporter
# (tests/test_reporters.py checks that the two agree)
_BUILTIN: dict[str, tuple[str, str, frozenset[str]]] = {
    "text": ("watcher.reporters.text", "TextReporter", frozenset({"watch"})),
    "jsonl": ("watcher.reporters.jsonl", "JsonlReporter", frozenset({"watch"})),
    "markdown": ("watcher.reporters.markdown", "MarkdownReporter", frozenset({"report"})),
    "html": ("watcher.reporters.html", "HtmlReporter", frozenset({"report"})),
}


class _Builtin(Mapping[str, type[Reporter]]):
    """The built-in reporters by name, each class imported when it is looked up."""

    def __getitem__(self, name: str) -> type[Reporter]:
        module, cls, _ = _BUILTIN[name]
        found: type[Reporter] = getattr(importlib.import_module(module), cls)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(_BUILTIN)

    def __len__(self) -> int:
        return len(_BUILTIN)


BUILTIN: Mapping[str, type[Reporter]] = _Builtin()


def builtin_commands(name: str) -> frozenset[str]:
    """The commands the built-in reporter ``name`` is for (empty: no such reporter)."""
    entry = _BUILTIN.get(name)
    return entry[2] if entry is not None else frozenset()


class ReporterError(LookupError):
    """No usable reporter of that name for that command (the message says which are)."""


def builtin_names(command: str) -> list[str]:
    """The built-in reporters ``command`` can use, in the order the help lists them."""
    return [name for name, (_, _, commands) in _BUILTIN.items() if command in commands]


def registered() -> dict[str, EntryPoint]:
    """The reporters installed packages register, by name (built-in names excluded)."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)
            if ep.name not in BUILTIN}


def get_reporter(name: str, command: str) -> type[Reporter]:
    """The reporter class called ``name``, for ``command`` (``"watch"`` or ``"report"``)."""
    cls = BUILTIN[name] if name in _BUILTIN else None
    if cls is None:
        ep = registered().get(name)
        if ep is None:
            raise ReporterError(f"no reporter {name!r}: {_choices(command)}")
        try:
            loaded = ep.load()
        except Exception as e:  # noqa: BLE001 - a third party's import may raise anything
            raise ReporterError(f"the reporter {name!r} ({ep.value}) could not be loaded: "
                                f"{type(e).__name__}: {e}") from e
        if not (isinstance(loaded, type) and issubclass(loaded, Reporter)):
            raise ReporterError(f"the reporter {name!r} ({ep.value}) is not a subclass of "
                                "watcher.reporters.Reporter")
        cls = loaded
    if command not in cls.commands:
        raise ReporterError(f"the reporter {name!r} is not for `{command}` "
                            f"(it is for: {', '.join(sorted(cls.commands)) or 'nothing'}): "
                            f"{_choices(command)}")
    return cls


def _choices(command: str) -> str:
    built = ", ".join(builtin_names(command))
    others = sorted(registered())
    return f"`{command} --format` takes {built}" + (
        f", or a registered one ({', '.join(others)})" if others else "")
