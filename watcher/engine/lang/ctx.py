"""The validation context of one document: every problem collected, located, coded.

A rule author fixes a pack faster when all its errors are reported at once, each with
file, line, column and a hint, so validators report to a :class:`Ctx` and carry on
where they can instead of raising.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from watcher.engine.errors import MissingFieldError, RuleError, UnknownKeyError, WrongTypeError
from watcher.engine.yamlsrc import Doc, Path_


class Ctx:
    """Collects located errors while one document is validated."""

    def __init__(self, doc: Doc, errors: list[RuleError], rule_id: str | None = None) -> None:
        self.doc = doc
        self.errors = errors
        self.rule_id = rule_id
        self.failed = False

    def error(self, cls: type[RuleError], path: Path_, msg: str, hint: str | None = None,
              at_key: bool = False) -> None:
        line, col = self.doc.loc(path, at_key=at_key)
        self.failed = True
        self.errors.append(cls(msg, file=self.doc.file, line=line, col=col,
                               rule_id=self.rule_id, source_line=self.doc.source_line(line),
                               hint=hint))

    def expect(self, value: Any, types: type | tuple[type, ...], path: Path_, what: str) -> bool:
        """Type check (bool is not an int here)."""
        ok = isinstance(value, types) and not (
            isinstance(value, bool) and bool not in _as_tuple(types)
        )
        if not ok:
            self.error(WrongTypeError, path,
                       f"{what} must be {type_names(types)}, got {type_name(value)}")
        return ok

    def check_keys(self, mapping: dict[str, Any], path: Path_, allowed: Iterable[str],
                   required: Iterable[str] = (), section: str = "rule") -> bool:
        allowed = list(allowed)
        ok = True
        for key in mapping:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
                hint = f"did you mean {close[0]!r}?" if close else (
                    "allowed keys: " + ", ".join(sorted(allowed)))
                self.error(UnknownKeyError, path + (key,), f"unknown key {key!r} in {section}",
                           hint, at_key=True)
                ok = False
        for key in required:
            if key not in mapping:
                self.error(MissingFieldError, path, f"{section} is missing required field {key!r}")
                ok = False
        return ok


def did_you_mean(name: Any, known: Iterable[str], otherwise: str, cutoff: float = 0.6) -> str:
    """``did you mean 'x'?`` for the closest known name, else ``otherwise``."""
    close = difflib.get_close_matches(str(name), sorted(known), n=1, cutoff=cutoff)
    return f"did you mean {close[0]!r}?" if close else otherwise


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean",
               list: "a list", dict: "a mapping", type(None): "null"}


def type_names(types: type | tuple[type, ...]) -> str:
    return " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in _as_tuple(types))


def type_name(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)
