"""Rule files as data: safe YAML with positions and duplicate-key detection.

PyYAML's ``safe_load`` silently keeps the last of two equal keys and forgets
where values came from, so we compose node trees ourselves (with a
:class:`yaml.SafeLoader` subclass: no Python tags, nothing executes) and build
plain values plus a map from each value's path to its line and column.

Nesting is bounded (:data:`MAX_DEPTH` levels of lists and mappings): composing, and
every pass over a rule after it, recurse once per level, and a file of ``[[[[…``
would otherwise end in a ``RecursionError`` instead of a located error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from watcher.engine import rulecache
from watcher.engine.errors import (
    DuplicateKeyError,
    EmptyFileError,
    RuleError,
    UnsafeYamlError,
    YamlSyntaxError,
)

if TYPE_CHECKING:
    import yaml

Path_ = tuple[Any, ...]
MAX_FILE_BYTES = 1_000_000
MAX_NODES = 200_000
# deepest nesting of lists and mappings in a rule file (real rules use under 10 levels;
# the compile passes recurse per level, so this bound keeps them far from Python's)
MAX_DEPTH = 64
_STR = "tag:yaml.org,2002:str"
SAFE_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in (
    "str", "int", "float", "bool", "null", "seq", "map", "timestamp", "merge"))


class _TooDeep(Exception):
    def __init__(self, mark: Any) -> None:
        super().__init__("too deep")
        self.mark = mark


# PyYAML, imported on the first parse (13 ms: a watch whose rule files were all parsed
# before reads them from the cache, rulecache.py): its node and error classes, and the
# two loaders (see _yaml)
_MAPPING: Any = None
_SEQUENCE: Any = None
_SCALAR: Any = None
_COLLECTION: Any = None
_YAML_ERROR: Any = None
_LOADERS: tuple[type[Any], type[Any]] | None = None


def _yaml() -> tuple[type[Any], type[Any]]:
    """PyYAML imported, and the loaders: ``RuleYamlLoader``, a SafeLoader subclass used
    only to compose nodes and construct plain scalars (its composer recurses once per
    level of nesting, so it stops at :data:`MAX_DEPTH`; libyaml's stops itself at 1000),
    and the same over libyaml (about 10x faster: a watch must start in well under a
    second), whose syntax-error wording differs from PyYAML's, so a file it rejects is
    parsed again with the first for the reported error."""
    global _MAPPING, _SEQUENCE, _SCALAR, _COLLECTION, _YAML_ERROR, _LOADERS
    if _LOADERS is not None:
        return _LOADERS
    import yaml

    class RuleYamlLoader(yaml.SafeLoader):
        _depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self._depth += 1
            try:
                if self._depth > MAX_DEPTH + 1:
                    raise _TooDeep(self.peek_event().start_mark)
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    class FastRuleYamlLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        pass

    _MAPPING, _SEQUENCE, _SCALAR = yaml.MappingNode, yaml.SequenceNode, yaml.ScalarNode
    _COLLECTION, _YAML_ERROR = yaml.CollectionNode, yaml.YAMLError
    _LOADERS = (RuleYamlLoader, FastRuleYamlLoader)
    return _LOADERS


@dataclass
class Doc:
    """One YAML document of a rule file, with positions of every value and key."""

    data: Any
    file: str
    lines: list[str]
    vloc: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    kloc: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    start_line: int = 1

    def loc(self, path: Path_, at_key: bool = False) -> tuple[int, int]:
        """Best position for ``path``: its key or value, else the nearest ancestor."""
        p = tuple(path)
        while True:
            table = self.kloc if at_key else self.vloc
            if p in table:
                return table[p]
            if p in self.vloc:
                return self.vloc[p]
            if not p:
                return (self.start_line, 1)
            p = p[:-1]

    def source_line(self, line: int) -> str | None:
        return self.lines[line - 1] if 0 < line <= len(self.lines) else None


class _Budget:
    def __init__(self) -> None:
        self.nodes = 0


def _mark(node: yaml.Node) -> tuple[int, int]:
    return (node.start_mark.line + 1, node.start_mark.column + 1)


def _build(
    node: yaml.Node, path: Path_, doc: Doc, loader: Any, errors: list[RuleError],
    budget: _Budget,
) -> Any:
    budget.nodes += 1
    if budget.nodes > MAX_NODES:
        raise _TooLarge()
    doc.vloc[path] = _mark(node)
    if len(path) > MAX_DEPTH and isinstance(node, _COLLECTION):
        _err(errors, UnsafeYamlError, doc, node,
             f"lists and mappings nested more than {MAX_DEPTH} deep",
             "flatten it: a predicate can name a macro, a list can be a {list: NAME}")
        return None
    if node.tag not in SAFE_TAGS:
        _err(errors, UnsafeYamlError, doc, node, f"YAML tag {node.tag!r} is not allowed",
             "rule files are plain data: strings, numbers, booleans, lists, mappings")
        return None
    if node.tag == "tag:yaml.org,2002:timestamp":
        return str(node.value)  # a date-looking scalar stays text
    if isinstance(node, _MAPPING):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                _err(errors, UnsafeYamlError, doc, key_node, "merge keys (<<) are not supported",
                     "write the keys out")
                continue
            key = _build(key_node, path + ("<key>",), doc, loader, errors, budget)
            if not isinstance(key, str | int | float | bool) or key is None:
                _err(errors, UnsafeYamlError, doc, key_node, "mapping keys must be scalars",
                     "use a plain string key")
                continue
            if key in out:
                line, _ = doc.kloc.get(path + (key,), (0, 0))
                _err(errors, DuplicateKeyError, doc, key_node,
                     f"duplicate key {key!r} (first defined on line {line})",
                     "YAML keeps only the last value; remove or rename one")
                continue
            doc.kloc[path + (key,)] = _mark(key_node)
            out[key] = _build(value_node, path + (key,), doc, loader, errors, budget)
        doc.vloc.pop(path + ("<key>",), None)
        return out
    if isinstance(node, _SEQUENCE):
        return [
            _build(child, path + (i,), doc, loader, errors, budget)
            for i, child in enumerate(node.value)
        ]
    if node.tag == _STR and type(node) is _SCALAR:
        # what SafeConstructor.construct_yaml_str returns (construct_scalar: the value),
        # without its dispatch: 6,414 of the built-in pack's 6,681 scalars are strings
        return node.value
    try:
        return loader.construct_object(node, deep=True)
    except _YAML_ERROR as exc:
        _err(errors, UnsafeYamlError, doc, node, f"cannot construct value: {_problem(exc)}",
             "rule files are plain data: strings, numbers, booleans, lists, mappings")
        return None


class _TooLarge(Exception):
    pass


def _err(errors: list[RuleError], cls: type[RuleError], doc: Doc, node: yaml.Node, msg: str,
         hint: str) -> None:
    line, col = _mark(node)
    errors.append(cls(msg, file=doc.file, line=line, col=col,
                      source_line=doc.source_line(line), hint=hint))


def _problem(exc: yaml.YAMLError) -> str:
    return str(getattr(exc, "problem", None) or exc).strip()


def load_docs(text: str, file: str, errors: list[RuleError]) -> list[Doc]:
    """Parse every document of ``text``; problems are appended to ``errors``. A text
    parsed before without a problem is read from the cache (rulecache.py)."""
    kept = rulecache.load(text)
    if kept is not None:
        lines = text.splitlines()
        return [Doc(data=data, file=file, lines=lines, vloc=vloc, kloc=kloc, start_line=start)
                for data, vloc, kloc, start in kept]
    slow, fast = _yaml()
    found: list[RuleError] = []
    docs: list[Doc] | None = None
    if fast is not slow:
        docs = _load_docs(text, file, found, fast)
        if any(isinstance(e, YamlSyntaxError) for e in found):
            found, docs = [], None
    if docs is None:
        docs = _load_docs(text, file, found, slow)
    errors.extend(found)
    if not found:
        rulecache.store(text, [(d.data, d.vloc, d.kloc, d.start_line) for d in docs])
    return docs


def _load_docs(text: str, file: str, errors: list[RuleError],
               loader_cls: type[Any]) -> list[Doc]:
    lines = text.splitlines()
    if len(text.encode("utf-8", "replace")) > MAX_FILE_BYTES:
        errors.append(UnsafeYamlError(f"file larger than {MAX_FILE_BYTES} bytes", file=file,
                                      line=1, col=1, hint="split the pack into several files"))
        return []
    docs: list[Doc] = []
    budget = _Budget()
    import yaml

    try:
        loader = loader_cls(text)
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow
        line = text.count("\n", 0, exc.position) + 1
        col = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        errors.append(YamlSyntaxError(
            f"character {exc.character!r} is not allowed in YAML", file=file, line=line,
            col=col, source_line=lines[line - 1] if 0 < line <= len(lines) else None,
            hint="remove control characters; write them as escapes inside double quotes"))
        return docs
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            doc = Doc(data=None, file=file, lines=lines, start_line=node.start_mark.line + 1)
            try:
                doc.data = _build(node, (), doc, loader, errors, budget)
            except _TooLarge:
                errors.append(UnsafeYamlError(
                    f"more than {MAX_NODES} YAML nodes (alias expansion?)", file=file,
                    line=doc.start_line, col=1, hint="avoid anchors/aliases in rule files"))
                return docs
            if doc.data is not None:
                docs.append(doc)
    except _TooDeep as exc:
        line, col = exc.mark.line + 1, exc.mark.column + 1
        errors.append(UnsafeYamlError(
            f"lists and mappings nested more than {MAX_DEPTH} deep", file=file, line=line,
            col=col, source_line=lines[line - 1] if 0 < line <= len(lines) else None,
            hint="flatten it: a predicate can name a macro, a list can be a {list: NAME}"))
        return docs
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = mark.line + 1 if mark else None
        col = mark.column + 1 if mark else None
        msg = _problem(exc)
        if exc.context and exc.problem:
            msg = f"{exc.context.strip()}: {exc.problem.strip()}"
        errors.append(YamlSyntaxError(
            msg, file=file, line=at, col=col,
            source_line=lines[at - 1] if at and 0 < at <= len(lines) else None,
            hint="check indentation, quoting and ':' after keys"))
        return docs
    except yaml.YAMLError as exc:
        errors.append(YamlSyntaxError(_problem(exc), file=file, line=1, col=1))
        return docs
    finally:
        loader.dispose()
    if not docs and not any(e.file == file for e in errors):
        errors.append(EmptyFileError("file holds no YAML documents", file=file, line=1, col=1,
                                     hint="add a rule, or delete the file"))
    return docs
