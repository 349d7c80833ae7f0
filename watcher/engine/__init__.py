"""The declarative YAML rule engine (language reference: docs/rules.md).

Typical use::

    rules = load_rules(paths=["my-rules/"], disable=["error-storm"])
    engine = Engine(rules)
    watch = engine.open_sample(sample_ref)
    for event in events:
        for finding in watch.feed(event):
            report(finding)
    watch.finalize(now)
"""

from watcher.engine.errors import ERROR_KINDS, RuleError, RuleLoadErrors
from watcher.engine.lang.paths import COMPILED_HERE
from watcher.engine.loader import (
    RuleSet,
    builtin_dir,
    load_rules,
    load_suppressions,
    rule_files,
    user_rules_dir,
)
from watcher.engine.rule import ExceptionSpec, Rule
from watcher.engine.runtime import Engine, RunContext, SampleStatus, SampleWatch
from watcher.engine.testing import CaseResult, materialise, run_case, run_rule_tests

# the hot path was compiled by mypyc at install time (setup.py, all its modules or
# none); else pure Python
COMPILED: bool = COMPILED_HERE

__all__ = [
    "COMPILED", "ERROR_KINDS", "CaseResult", "Engine", "ExceptionSpec", "Rule", "RuleError",
    "RuleLoadErrors", "RuleSet", "RunContext", "SampleStatus", "SampleWatch", "builtin_dir",
    "load_rules", "load_suppressions", "materialise", "rule_files", "run_case",
    "run_rule_tests", "user_rules_dir",
]
