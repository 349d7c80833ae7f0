"""``inspect-watch rules …``: list, show, validate and test rule packs; print the schema.

Exit codes: 0 ok; 1 an inline rule test failed (``test``) or the rule asked for is
unknown (``show``); 2 rule files have errors (every error is printed at once).
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from watcher.engine import CaseResult, Rule, RuleLoadErrors, RuleSet, load_rules, run_rule_tests

EXIT_OK, EXIT_TEST_FAILED, EXIT_RULE_ERRORS = 0, 1, 2


def rule_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--rules/--disable/--only``: the rule-selection options shared with ``watch``."""
    fn = click.option("--only", multiple=True, metavar="ID|CATEGORY",
                      help="Run only these rules or categories (repeatable, comma-separated).")(fn)
    fn = click.option("--disable", multiple=True, metavar="ID|CATEGORY",
                      help="Disable rules or categories (repeatable, comma-separated).")(fn)
    fn = click.option("--rules", "rule_paths", multiple=True,
                      type=click.Path(path_type=Path),
                      help="Extra rule file or directory (repeatable); overrides by id.")(fn)
    return fn


def _load(rule_paths: tuple[Path, ...] = (), disable: tuple[str, ...] = (),
          only: tuple[str, ...] = (), as_json: bool = False, **kw: Any) -> RuleSet:
    try:
        return load_rules(paths=list(rule_paths), disable=disable, only=only, **kw)
    except RuleLoadErrors as exc:
        _print_errors(exc, as_json)
        sys.exit(EXIT_RULE_ERRORS)


def _print_errors(exc: RuleLoadErrors, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(exc.to_dict(), indent=2))
    else:
        click.echo(exc.render(), err=True)


@click.group("rules")
def rules() -> None:
    """List, show, validate and test watcher rules."""


@rules.command("list")
@rule_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--all", "show_all", is_flag=True, help="Include disabled and filtered rules.")
def list_cmd(rule_paths: tuple[Path, ...], disable: tuple[str, ...], only: tuple[str, ...],
             as_json: bool, show_all: bool) -> None:
    """List the active rules: id, category, confidence, needs, source."""
    rs = _load(rule_paths, disable, only, as_json)
    rows = [_row(r) for r in rs]
    skipped = rs.skipped if show_all else {}
    if as_json:
        click.echo(json.dumps({"rules": rows, "skipped": skipped, "overrides": rs.overrides},
                              indent=2))
        return
    headers = ("ID", "CATEGORY", "SEVERITY", "CONFIDENCE", "NEEDS", "DETECT", "SOURCE")
    table = [(r["id"], r["category"], r["severity"], r["confidence"], r["needs"], r["detect"],
              r["source"]) for r in rows]
    widths = [max([len(h)] + [len(str(t[i])) for t in table]) for i, h in enumerate(headers)]
    for line in [headers, *table]:
        click.echo("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    for o in rs.overrides:
        click.echo(f"note: {o['id']} from {o['by']} replaces {o['replaced']}")
    for rid, why in skipped.items():
        click.echo(f"skipped: {rid} ({why})")


def _row(r: Rule) -> dict[str, Any]:
    return {"id": r.id, "title": r.title, "category": r.category, "severity": r.severity,
            "confidence": r.confidence_base, "needs": r.needs, "detect": r.detect_kind,
            "events": sorted(r.events) if r.events is not None else ["*"],
            "status": r.status, "source": f"{r.source}:{r.line}", "tests": len(r.tests)}


@rules.command("show")
@click.argument("rule_id")
@rule_options
@click.option("--json", "as_json", is_flag=True, help="The rule as loaded, as JSON.")
def show_cmd(rule_id: str, rule_paths: tuple[Path, ...], disable: tuple[str, ...],
             only: tuple[str, ...], as_json: bool) -> None:
    """Show one rule's documentation, rendered from its YAML."""
    rs = _load(rule_paths, (), (), as_json)
    rule = rs.get(rule_id)
    if rule is None:
        import difflib

        close = difflib.get_close_matches(rule_id, rs.ids, n=1)
        click.echo(f"no rule {rule_id!r}" + (f"; did you mean {close[0]!r}?" if close else ""),
                   err=True)
        sys.exit(EXIT_TEST_FAILED)
    if as_json:
        data = {k: v for k, v in rule.data.items() if k != "tests"}
        click.echo(json.dumps(dict(_row(rule), definition=data), indent=2, default=str))
        return
    click.echo(render_rule(rule))


def render_rule(rule: Rule) -> str:
    """A rule's documentation page (plain text)."""
    d = rule.data
    def wrap(text: str, hang: str = "  ") -> str:
        return textwrap.fill(" ".join(str(text).split()), 88, initial_indent="  ",
                             subsequent_indent=hang)

    out = [f"{rule.id} — {rule.title}", ""]
    out.append(f"  category {rule.category} · severity {rule.severity} · status {rule.status}"
               f" · needs {rule.needs}")
    events = ", ".join(sorted(rule.events)) if rule.events else (
        "all" if rule.events is None else "none (not event-driven)")
    out.append(f"  detector {rule.detect_kind} · events {events}")
    if rule.tags:
        out.append(f"  tags {', '.join(rule.tags)}")
    out.append(f"  source {rule.source}:{rule.line}")
    if rule.description:
        out += ["", "Description", wrap(rule.description)]
    out += ["", "Detection"]
    pred = {k: v for k, v in d.items() if k in ("type", "where", "field", "regex", "contains",
                                                "any_of", "all_of", "equals", "ignore_case",
                                                "normalize_whitespace", "macro", "all", "any",
                                                "not")}
    block = dict(pred, detect=d.get("detect"))
    import yaml  # (only this command needs it: a watch reads its rules from the cache)

    out += ["  " + line for line in yaml.safe_dump(block, sort_keys=False).splitlines()]
    out += ["", "Confidence", f"  base: {rule.confidence_base} — {rule.confidence_reason}"]
    for c in d.get("confidence_when") or []:
        op = next(k for k in ("raise", "lower", "set") if k in c)
        out.append(f"  {op} to {c[op]} when {c['when']}: {c['reason']}")
    if rule.exceptions:
        out += ["", "Exceptions"]
        for x in rule.exceptions:
            out.append(f"  {x.field} {x.op} {x.value!r}" + (f" — {x.reason}" if x.reason else ""))
    if rule.falsepositives:
        out += ["", "False positives"] + [wrap("- " + fp, "    ") for fp in rule.falsepositives]
    if rule.handoff:
        out += ["", "What to do", wrap(rule.handoff)]
    if rule.references:
        out += ["", "References"] + [f"  {r}" for r in rule.references]
    if rule.tests:
        out += ["", "Tests"] + [f"  - {t['name']}" for t in rule.tests]
    if rule.replaces:
        out += ["", "Replaces"] + [f"  {s}" for s in rule.replaces]
    return "\n".join(out)


@rules.command("validate")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def validate_cmd(paths: tuple[Path, ...], as_json: bool) -> None:
    """Validate rule files or directories (built-in lists/macros are visible)."""
    try:
        rs = load_rules(paths=list(paths), user_dir=False)
    except RuleLoadErrors as exc:
        _print_errors(exc, as_json)
        sys.exit(EXIT_RULE_ERRORS)
    mine = [r for r in rs.rules if _under(r.source, paths)]
    if as_json:
        click.echo(json.dumps({"ok": True, "rules": [r.id for r in mine], "errors": []},
                              indent=2))
    else:
        click.echo(f"ok: {len(mine)} rule(s) valid")


def _under(source: str, paths: tuple[Path, ...]) -> bool:
    s = Path(source).resolve()
    for p in paths:
        rp = p.resolve()
        if s == rp or rp in s.parents:
            return True
    return False


@rules.command("test")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@rule_options
@click.option("--junit", type=click.Path(path_type=Path), help="Write a JUnit XML report.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def test_cmd(paths: tuple[Path, ...], rule_paths: tuple[Path, ...], disable: tuple[str, ...],
             only: tuple[str, ...], junit: Path | None, as_json: bool) -> None:
    """Run the inline tests of PATHS (default: built-in pack and user rules)."""
    rs = _load(tuple(rule_paths) + tuple(paths), disable, only, as_json,
               **({"user_dir": False} if paths else {}))
    selected = [r for r in rs.rules if not paths or _under(r.source, paths)]
    results = run_rule_tests(selected)
    untested = [r.id for r in selected if not r.tests]
    failed = [r for r in results if not r.passed]
    if junit is not None:
        write_junit(results, junit)
    if as_json:
        click.echo(json.dumps({"ok": not failed, "results": [r.to_dict() for r in results],
                               "untested": untested}, indent=2))
    else:
        for r in results:
            mark = "PASS" if r.passed else "FAIL"
            click.echo(f"{mark} {r.rule} :: {r.name}")
            if not r.passed:
                click.echo(f"     {r.file}:{r.line}: {r.problem}")
                click.echo(f"     expected: {_fmt(r.expected)}")
                click.echo(f"     actual:   {_fmt(r.actual)}")
        for rid in untested:
            click.echo(f"WARN {rid} has no inline tests")
        click.echo(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    sys.exit(EXIT_TEST_FAILED if failed else EXIT_OK)


@rules.command("schema")
def schema_cmd() -> None:
    """Print the JSON Schema of rule-file documents (for editors and CI).

    Point an editor's YAML support at it (e.g. a ``# yaml-language-server:
    $schema=...`` line); ``rules validate`` still checks what a schema cannot: macro
    and list names, facts, templates, regex and JMESPath syntax.
    """
    from watcher.engine.lang.published import rule_schema

    click.echo(json.dumps(rule_schema(), indent=2))


def _fmt(items: list[dict[str, Any]]) -> str:
    return json.dumps(items) if items else "no findings"


def write_junit(results: list[CaseResult], path: Path) -> None:
    """JUnit XML: one testsuite per rule, one testcase per inline case. (ElementTree is
    imported here: every command imports this module, few write JUnit.)"""
    import xml.etree.ElementTree as ET

    root = ET.Element("testsuites", name="inspect-watch rules")
    suites: dict[str, ET.Element] = {}
    for r in results:
        suite = suites.get(r.rule)
        if suite is None:
            suite = suites[r.rule] = ET.SubElement(root, "testsuite", name=r.rule)
        case = ET.SubElement(suite, "testcase", classname=r.rule, name=r.name,
                             file=r.file, line=str(r.line))
        if not r.passed:
            fail = ET.SubElement(case, "failure", message=r.problem)
            fail.text = f"expected: {_fmt(r.expected)}\nactual: {_fmt(r.actual)}"
    for rule, suite in suites.items():
        cases = [r for r in results if r.rule == rule]
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(not r.passed for r in cases)))
    root.set("tests", str(len(results)))
    root.set("failures", str(sum(not r.passed for r in results)))
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def main() -> None:  # pragma: no cover - standalone entry for development
    rules()


if __name__ == "__main__":  # pragma: no cover
    main()
