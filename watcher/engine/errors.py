"""Rule-loading errors: one root, one subclass per kind, each carrying a location.

A rule author fixes a pack faster when every problem is reported at once with
file, line, column, a stable code and a hint, so the loader collects
:class:`RuleError` instances and raises them together as :class:`RuleLoadErrors`.
Codes are stable (documented in docs/rules.md); messages may be reworded.
"""

from __future__ import annotations

from typing import Any, ClassVar


class RuleError(Exception):
    """A problem with one rule file, at one place in it."""

    code: ClassVar[str] = "W100"
    name: ClassVar[str] = "rule-error"

    def __init__(
        self,
        message: str,
        *,
        file: str = "<string>",
        line: int | None = None,
        col: int | None = None,
        rule_id: str | None = None,
        source_line: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.col = col
        self.rule_id = rule_id
        self.source_line = source_line
        self.hint = hint

    def location(self) -> str:
        parts = [self.file]
        if self.line is not None:
            parts.append(str(self.line))
            if self.col is not None:
                parts.append(str(self.col))
        return ":".join(parts)

    def render(self) -> str:
        """``file:line:col: CODE name: message`` + the source line + caret + hint."""
        head = f"{self.location()}: {self.code} {self.name}: {self.message}"
        if self.rule_id:
            head += f" [rule {self.rule_id}]"
        out = [head]
        if self.source_line is not None:
            out.append(f"    {self.source_line.rstrip()}")
            if self.col is not None:
                out.append("    " + " " * max(self.col - 1, 0) + "^")
        if self.hint:
            out.append(f"    hint: {self.hint}")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.render()

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "file": self.file,
            "line": self.line,
            "col": self.col,
            "rule": self.rule_id,
            "source_line": self.source_line,
            "hint": self.hint,
        }


def _kind(code: str, name: str, doc: str) -> type[RuleError]:
    return type(
        "".join(p.title() for p in name.split("-")) + "Error",
        (RuleError,),
        {"code": code, "name": name, "__doc__": doc, "__module__": __name__},
    )


YamlSyntaxError = _kind("W101", "yaml-syntax", "The file is not valid YAML.")
DuplicateKeyError = _kind("W102", "duplicate-key", "A mapping repeats a key.")
UnknownKeyError = _kind("W103", "unknown-key", "A key the rule language does not know.")
WrongTypeError = _kind("W104", "wrong-type", "A value has the wrong type.")
BadJmespathError = _kind("W105", "bad-jmespath", "A JMESPath expression does not parse.")
BadRegexError = _kind("W106", "bad-regex", "A regular expression does not compile.")
CatastrophicRegexError = _kind(
    "W107", "catastrophic-regex", "A regex shape that can backtrack exponentially."
)
BadDetectorParamsError = _kind("W108", "bad-detector-params", "Detector parameters are invalid.")
DuplicateIdError = _kind("W109", "duplicate-id", "Two rules of one source share an id.")
EmptyFileError = _kind("W110", "empty-file", "A rule file holds no documents.")
MissingFieldError = _kind("W111", "missing-field", "A required field is absent.")
UnknownReferenceError = _kind("W112", "unknown-reference", "A list or macro name is undefined.")
BadTemplateError = _kind("W113", "bad-template", "A message template is malformed.")
BadValueError = _kind("W114", "bad-value", "A value is outside its allowed set.")
BadTestError = _kind("W115", "bad-test", "An inline test case is malformed.")
UnsafeYamlError = _kind("W116", "unsafe-yaml", "Tags, size or aliasing the loader refuses.")
NeedsMismatchError = _kind("W117", "needs-mismatch", "The rule reads text its tier lacks.")
BadIdError = _kind("W118", "bad-id", "A rule id that is not kebab-case.")
UnknownFactError = _kind("W119", "unknown-fact", "A condition names a fact the detector lacks.")
FileError = _kind("W120", "file-error", "A rule path cannot be read.")
UnknownSelectionError = _kind("W121", "unknown-selection",
                              "--only or --disable names no loaded rule id or category.")
UnsupportedRegexError = _kind("W122", "unsupported-regex",
                              "A regex construct RE2 cannot match as Python does.")

ERROR_KINDS: tuple[type[RuleError], ...] = (
    YamlSyntaxError, DuplicateKeyError, UnknownKeyError, WrongTypeError, BadJmespathError,
    BadRegexError, CatastrophicRegexError, BadDetectorParamsError, DuplicateIdError,
    EmptyFileError, MissingFieldError, UnknownReferenceError, BadTemplateError, BadValueError,
    BadTestError, UnsafeYamlError, NeedsMismatchError, BadIdError, UnknownFactError, FileError,
    UnknownSelectionError, UnsupportedRegexError,
)


class RuleLoadErrors(Exception):
    """Every problem found while loading a set of rule files, raised at once."""

    def __init__(self, errors: list[RuleError]) -> None:
        self.errors = sorted(
            errors, key=lambda e: (e.file, e.line or 0, e.col or 0, e.code)
        )
        super().__init__(self.render())

    def render(self) -> str:
        n = len(self.errors)
        body = "\n".join(e.render() for e in self.errors)
        return f"{body}\n{n} error{'s' if n != 1 else ''} in rule files"

    def to_dict(self) -> dict[str, Any]:
        return {"ok": False, "errors": [e.to_dict() for e in self.errors]}
