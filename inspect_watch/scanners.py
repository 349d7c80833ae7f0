"""The Inspect Scout scanner ``inspect_watch/rules``: the YAML rule pack per transcript.

Needs Inspect Scout (``pip install "inspect-watch[scout]"``)::

    scout scan inspect_watch/rules -T ./logs
    scout scan inspect_watch/rules -T ./logs -S only=submit_loop,shortcut -S rules=my.yaml
    inspect eval task.py --scanner inspect_watch/rules

The logic is :mod:`watcher.scout`; this module only gives it Scout's shape and its name
(a function here is registered as ``inspect_watch/...``; see :mod:`inspect_watch`).
"""

from __future__ import annotations

from inspect_scout import Result, Scanner, Transcript, scanner

from watcher.scout import FLAG_MIN_CONFIDENCE, ScanOptions, check_rules, flag_result, scan_results


@scanner(name="rules", events="all", metadata=False)
def rules(
    rules: str | list[str] | None = None,
    only: str | list[str] | None = None,
    disable: str | list[str] | None = None,
    needs: str | None = None,
    builtin: bool = True,
    suppress: str | None = None,
    min_confidence: str = "low",
) -> Scanner[Transcript]:
    """inspect-watch's rule pack over each finished transcript: one result per finding.

    Each result's label is the rule id, its value the confidence (low, medium, high), its
    explanation our own words (values quoted from the transcript are short code spans:
    agent-derived, untrusted), its references the events the finding rests on; metadata
    holds the finding (count, category, severity, score, the rule's hand-off advice, and
    ``evidence`` as in the JSONL, whose ``agent_text`` is untrusted). The findings are
    those ``inspect-watch watch --log-dir`` reports for the same sample, except for
    clock-driven rules (stalled samples), which cannot apply to a finished transcript and
    are skipped (named in each result's ``clock_rules_skipped``).

    Args:
        rules: Extra rule files or directories (a rule with a built-in's id replaces it),
            as ``watch --rules``.
        only: Run only these rule ids or categories (comma-separated or a list).
        disable: Rule ids or categories not to run.
        needs: Run only rules that read at most this much agent text: ``metadata``,
            ``content`` or ``full``.
        builtin: Load the built-in pack (``false``: only ``rules`` and the user's rules).
        suppress: A suppress file (``suppress: [{rule, field, op, value, reason}]``).
        min_confidence: Leave out findings below this confidence.
    """
    opts = ScanOptions.of(rules=rules, only=only, disable=disable, needs=needs,
                          builtin=builtin, suppress=suppress, min_confidence=min_confidence)
    check_rules(opts)  # invalid rules stop the scan before it starts, every error located

    async def scan(transcript: Transcript) -> list[Result]:
        return scan_results(transcript, opts)

    return scan


@scanner(name="rules_flag", events="all", metadata=False)
def rules_flag(
    rules: str | list[str] | None = None,
    only: str | list[str] | None = None,
    disable: str | list[str] | None = None,
    needs: str | None = None,
    builtin: bool = True,
    suppress: str | None = None,
    min_confidence: str = FLAG_MIN_CONFIDENCE,
) -> Scanner[Transcript]:
    """The rule pack as a yes/no question per transcript: one boolean result each.

    ``value`` is ``true`` when the pack found something at or above ``min_confidence``
    (default ``medium``: "look before acting"), ``label`` the rule id of the surest
    finding (then the most severe, then the earliest), ``explanation`` every finding in
    our words, ``metadata`` the lead finding's fields (as ``inspect_watch/rules`` gives
    them) with ``findings`` (each one's) and ``rules``; ``false`` when nothing was found.
    For tools that read only boolean scanners, such as Inspect Steward, which opens an
    anomaly for each ``true`` row. Arguments as for ``inspect_watch/rules``.
    """
    opts = ScanOptions.of(rules=rules, only=only, disable=disable, needs=needs,
                          builtin=builtin, suppress=suppress, min_confidence=min_confidence)
    check_rules(opts)

    async def scan(transcript: Transcript) -> Result:
        return flag_result(transcript, opts)

    return scan
