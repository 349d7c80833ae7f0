"""The ``inspect_ai`` entry point ``inspect_watch``: registers ``inspect_watch/rules`` and
``inspect_watch/rules_flag``.

Inspect imports every ``inspect_ai`` entry point into every eval it starts (its hooks
lookup loads them all), so this module must cost nothing and touch no name outside
``inspect_watch/``. It registers a stand-in for the scanner that imports the real one
(and Inspect Scout, about a second) only when the scanner is created: by ``scout scan
inspect_watch/rules`` or ``inspect eval --scanner inspect_watch/rules``. Without Inspect
Scout installed (the ``scout`` extra) it registers nothing.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

SCANNER = "inspect_watch/rules"
FLAG_SCANNER = "inspect_watch/rules_flag"  # the boolean form


def _rules(**kwargs: Any) -> Any:
    """Stand-in for :func:`inspect_watch.scanners.rules`: importing that module registers
    the real factory under the same name (replacing this one), then builds the scanner."""
    from inspect_watch.scanners import rules

    return rules(**kwargs)


def _rules_flag(**kwargs: Any) -> Any:
    """Stand-in for :func:`inspect_watch.scanners.rules_flag` (as :func:`_rules`)."""
    from inspect_watch.scanners import rules_flag

    return rules_flag(**kwargs)


def register() -> None:
    """Register the scanner's name, lazily unless Inspect Scout is loaded already."""
    if importlib.util.find_spec("inspect_scout") is None:
        return
    if "inspect_scout" in sys.modules:  # `scout scan`: the real factory, at no extra cost
        import inspect_watch.scanners  # noqa: F401
        return
    from inspect_ai._util.registry import RegistryInfo, registry_add, registry_has

    for name, factory in ((SCANNER, _rules), (FLAG_SCANNER, _rules_flag)):
        if not registry_has("scanner", name):
            registry_add(factory, RegistryInfo(type="scanner", name=name))


register()
