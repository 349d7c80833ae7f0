"""The exit codes of ``inspect-watch`` (README "Exit codes"), in one place.

Scripts and CI branch on them, so the numbers never change, and each means one thing
in every command. The library entry (:func:`watcher.app.run`) returns them too.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """How a watch (or another command) ended."""

    OK = 0
    # a finding at or above --fail-on was reported (or a `rules test` case failed)
    FAIL_ON = 1
    # invalid rules, options, state file, or an output that cannot be written
    BAD_INPUT = 2
    # a source could not be read, part of the input could not be read, or findings
    # could not be written or uploaded
    SOURCE = 3
    # nothing matched what was asked: `watch TASK [SAMPLE_ID [EPOCH]]` (or `record`) named
    # a task or sample that none of the watched evals or logs holds (a typo is no success)
    NO_MATCH = 4
    # an eval was starting (its process runs) but its control channel was not up before
    # the watch gave up (`--once`, or `--wait SECONDS` passed): nothing of it was read
    NOT_STARTED = 5
    # SIGINT/SIGTERM: outputs flushed, state saved
    INTERRUPTED = 130
    # 128 + SIGPIPE: what a shell reports for a program whose pipe's reader went away
    OUTPUT_CLOSED = 141
