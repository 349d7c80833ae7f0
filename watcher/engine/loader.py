"""Find, parse and select rules: built-in pack, user rules, ``--rules`` paths.

Precedence is built-in < user config dir < explicit paths: a later rule with an
existing id replaces the earlier one (recorded in :attr:`RuleSet.overrides`), so
users can tune a built-in without forking the pack. Two rules with one id *within*
one source are an error (W109). All errors of all files are raised at once.
"""

from __future__ import annotations

import difflib
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from watcher.engine import rxcache
from watcher.engine.errors import (
    DuplicateIdError,
    FileError,
    MissingFieldError,
    RuleError,
    RuleLoadErrors,
    UnknownSelectionError,
    UnsafeYamlError,
    WrongTypeError,
)
from watcher.engine.lang.callspec import SECTIONS, CallSpecs
from watcher.engine.lang.ctx import Ctx
from watcher.engine.lang.predicates import Registry
from watcher.engine.lang.schema import parse_exception, parse_rule
from watcher.engine.rule import ExceptionSpec, Rule
from watcher.engine.yamlsrc import MAX_FILE_BYTES, Doc, load_docs
from watcher.events import TIERS, tier_rank

RULE_SUFFIXES = (".yaml", ".yml")
SOURCE_NAMES = ("builtin", "user", "path")


@dataclass
class RuleSet:
    """The selected rules, in load order, plus what was replaced or left out and why."""

    rules: list[Rule]
    registry: Registry
    overrides: list[dict[str, str]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def __contains__(self, rule_id: object) -> bool:
        return any(r.id == rule_id for r in self.rules)

    def get(self, rule_id: str) -> Rule | None:
        return next((r for r in self.rules if r.id == rule_id), None)

    @property
    def ids(self) -> list[str]:
        return [r.id for r in self.rules]


def builtin_dir() -> Path:
    """The built-in pack (package ``watcher.rules``; ``rules/`` in this repo)."""
    from watcher.resources import bundled_dir

    return bundled_dir("rules")


def user_rules_dir() -> Path:
    """``~/.config/inspect-watch/rules`` (platformdirs, honouring XDG_CONFIG_HOME)."""
    try:
        from platformdirs import user_config_dir

        return Path(user_config_dir("inspect-watch")) / "rules"
    except ImportError:  # pragma: no cover
        base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
        return Path(base) / "inspect-watch" / "rules"


def rule_files(path: Path) -> list[Path]:
    """YAML files of a path: itself, or a directory's files (recursively, sorted)."""
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.suffix in RULE_SUFFIXES and p.is_file())
    return [path]


def _read(path: Path, errors: list[RuleError]) -> str | None:
    """The file's text, read no further than the size cap.

    Only regular files: ``--rules /dev/zero`` used to be read to the end (24 GB before the
    OOM killer) and a FIFO blocked the watch before it started. The cap is checked by
    :func:`load_docs` (W116); reading one character past it is enough to tell.
    """
    try:
        # O_NONBLOCK: opening a FIFO without a writer would wait for one
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with open(fd, encoding="utf-8") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                errors.append(FileError("not a regular file (a device, FIFO or socket)",
                                        file=str(path), hint="rule files are YAML files"))
                return None
            return fh.read(MAX_FILE_BYTES + 1)
    except (OSError, UnicodeDecodeError) as exc:
        errors.append(FileError(f"cannot read rule file: {exc}", file=str(path),
                                hint="check the path given to --rules"))
        return None


LIBRARY_SECTIONS = ("lists", "macros") + SECTIONS


def _library(doc: Doc, lists: dict[str, Any], macros: dict[str, Any], calls: CallSpecs,
             errors: list[RuleError]) -> None:
    ctx = Ctx(doc, errors)
    data = doc.data
    if not ctx.check_keys(data, (), LIBRARY_SECTIONS, section="library document"):
        return
    if "effects" in data:
        calls.effects(data["effects"], ctx, doc.file)
    if "failures" in data:
        calls.failures(data["failures"], ctx)
    if "lists" in data and ctx.expect(data["lists"], dict, ("lists",), "lists"):
        for name, values in data["lists"].items():
            p = ("lists", name)
            if ctx.expect(values, list, p, f"list {name!r}") and all(
                ctx.expect(v, str, p + (i,), f"item of list {name!r}")
                for i, v in enumerate(values)
            ):
                lists[str(name)] = (list(values), doc, p)
    if "macros" in data and ctx.expect(data["macros"], dict, ("macros",), "macros"):
        for name, spec in data["macros"].items():
            p = ("macros", name)
            if ctx.expect(spec, dict, p, f"macro {name!r}"):
                macros[str(name)] = (spec, doc, p)


def load_rules(
    paths: Iterable[str | Path] | None = None,
    builtin: bool = True,
    user_dir: str | Path | None | Literal[False] = None,
    disable: Iterable[str] | None = None,
    only: Iterable[str] | None = None,
    needs_max: str | None = None,
) -> RuleSet:
    """Load, validate and select rules; raises :class:`RuleLoadErrors` with every error.

    ``user_dir=None`` uses the default user config dir when it exists, ``False``
    skips user rules. ``only`` keeps rules whose id or category is listed;
    ``needs_max="metadata"`` keeps only rules that never read agent text.
    """
    errors: list[RuleError] = []
    sources: list[tuple[int, Path]] = []
    if builtin:
        sources += [(0, p) for p in rule_files(builtin_dir())]
    if user_dir is not False:
        udir = Path(user_dir) if user_dir is not None else user_rules_dir()
        if udir.is_dir():
            sources += [(1, p) for p in rule_files(udir)]
        elif user_dir is not None:
            errors.append(FileError(f"user rules directory {udir} does not exist",
                                    file=str(udir)))
    for raw in paths or []:
        p = Path(raw)
        if not p.exists():
            errors.append(FileError(f"no such rule file or directory: {p}", file=str(p),
                                    hint="--rules takes YAML files or directories"))
            continue
        sources += [(2, f) for f in rule_files(p)]
    if needs_max is not None and needs_max not in TIERS:
        raise ValueError(f"needs_max must be one of {TIERS}")

    # pass 1: parse files, collect library documents (lists, macros)
    parsed: list[tuple[int, Doc]] = []
    lists: dict[str, Any] = {}
    macros: dict[str, Any] = {}
    calls = CallSpecs()
    seen_files: set[Path] = set()
    for level, path in sources:
        rp = path.resolve()
        if rp in seen_files:
            continue
        seen_files.add(rp)
        text = _read(path, errors)
        if text is None:
            continue
        for doc in load_docs(text, str(path), errors):
            if not isinstance(doc.data, dict):
                Ctx(doc, errors).error(WrongTypeError, (), "a rule document must be a mapping")
                continue
            if "id" not in doc.data and any(k in doc.data for k in LIBRARY_SECTIONS):
                _library(doc, lists, macros, calls, errors)
            elif "id" not in doc.data:
                Ctx(doc, errors).error(MissingFieldError, (),
                                       "document has no 'id' (and is not a library document "
                                       "of " + ", ".join(LIBRARY_SECTIONS) + ")",
                                       "every rule needs an id")
            else:
                parsed.append((level, doc))
    registry = Registry(lists, macros)
    registry.calls = calls.build()

    # pass 2: rules, precedence and duplicate ids
    chosen: dict[str, tuple[int, Rule]] = {}
    overrides: list[dict[str, str]] = []
    for level, doc in parsed:
        try:
            rule = parse_rule(doc, registry, errors)
        except RecursionError:  # a last resort: nesting is bounded where it is read
            Ctx(doc, errors, str(doc.data.get("id"))).error(
                UnsafeYamlError, (), "rule nested too deep to compile",
                "flatten its predicates and expressions")
            continue
        if rule is None:
            continue
        prev = chosen.get(rule.id)
        if prev is not None and prev[0] == level:
            Ctx(doc, errors, rule.id).error(
                DuplicateIdError, ("id",),
                f"duplicate rule id {rule.id!r} (also in {prev[1].source}:{prev[1].line})",
                "rename one; to replace a built-in rule put yours in the user dir or --rules")
            continue
        if prev is not None:
            overrides.append({"id": rule.id, "replaced": f"{prev[1].source}:{prev[1].line}",
                              "by": f"{rule.source}:{rule.line}",
                              "from": SOURCE_NAMES[prev[0]], "to": SOURCE_NAMES[level]})
            rule.replaces = prev[1].replaces + (prev[1].source,)
            del chosen[rule.id]
        chosen[rule.id] = (level, rule)
    rxcache.flush()  # the regex analyses made loading these rules, for the next load
    if errors:
        raise RuleLoadErrors(errors)

    # selection
    skipped: dict[str, str] = {}
    disabled = {d for item in disable or [] for d in str(item).split(",") if d}
    wanted = {o for item in only or [] for o in str(item).split(",") if o}
    _check_selection(disabled, wanted, [r for _, r in chosen.values()])
    rules: list[Rule] = []
    for _, rule in chosen.values():
        if not rule.enabled:
            skipped[rule.id] = "enabled: false"
        elif rule.id in disabled or rule.category in disabled:
            skipped[rule.id] = "disabled"
        elif wanted and rule.id not in wanted and rule.category not in wanted:
            skipped[rule.id] = "not in --only"
        elif needs_max is not None and tier_rank(rule.needs) > tier_rank(needs_max):  # type: ignore[arg-type]
            skipped[rule.id] = f"needs {rule.needs} > {needs_max}"
        else:
            rules.append(rule)
    return RuleSet(rules, registry, overrides, skipped,
                   [str(p) for _, p in sources])


def _check_selection(disabled: set[str], wanted: set[str], rules: list[Rule]) -> None:
    """Every ``--disable``/``--only`` name must be a loaded rule's id or category: a typo
    would otherwise leave the rule meant to be off running, or run no rule at all."""
    known = {r.id for r in rules} | {r.category for r in rules}
    errors: list[RuleError] = []
    for option, names in (("--disable", disabled), ("--only", wanted)):
        for name in sorted(names - known):
            close = difflib.get_close_matches(name, sorted(known), n=1)
            errors.append(UnknownSelectionError(
                f"{option} {name!r} is no rule id or category", file=option,
                hint=(f"did you mean {close[0]!r}? " if close else "")
                + "`inspect-watch rules list` shows ids and categories"))
    if errors:
        raise RuleLoadErrors(errors)


def load_suppressions(path: str | Path) -> list[ExceptionSpec]:
    """A run's suppress file: ``suppress: [{rule, field, op, value, reason}]``.

    ``rule`` is an id, a category or a glob (default ``*``); entries are validated
    like rule exceptions and raise :class:`RuleLoadErrors` on problems.
    """
    errors: list[RuleError] = []
    p = Path(path)
    text = _read(p, errors)
    out: list[ExceptionSpec] = []
    if text is not None:
        for doc in load_docs(text, str(p), errors):
            ctx = Ctx(doc, errors)
            data = doc.data
            base: tuple[Any, ...] = ()
            if isinstance(data, dict):
                if not ctx.check_keys(data, (), ["suppress"], ["suppress"],
                                      section="suppress file"):
                    continue
                data, base = data["suppress"], ("suppress",)
            if not ctx.expect(data, list, base, "suppress"):
                continue
            for i, item in enumerate(data):
                spec = parse_exception(item, ctx, base + (i,), extra_keys=("rule",))
                if spec is None:
                    continue
                rule = item.get("rule", "*")
                if ctx.expect(rule, str, base + (i, "rule"), "rule"):
                    spec.rule = rule
                    out.append(spec)
    if errors:
        raise RuleLoadErrors(errors)
    return out
