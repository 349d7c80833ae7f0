"""The rule language's vocabulary under its former name.

The rule values moved to :mod:`watcher.engine.rule` and their validation to
:mod:`watcher.engine.lang.schema`; these names stay importable from here for code
written against the old layout (tests/test_loader_fuzz.py imports ``RULE_KEYS``).
"""

from watcher.engine.lang.schema import BUILTIN_CATEGORIES, META_KEYS, RULE_KEYS
from watcher.engine.rule import ConfidenceCondition, ExceptionSpec, Rule

__all__ = ["BUILTIN_CATEGORIES", "META_KEYS", "RULE_KEYS", "ConfidenceCondition",
           "ExceptionSpec", "Rule"]
