"""Bounds on what hostile or damaged input may cost: documented, overridable defaults.

Every input the watcher reads can be bigger than it looks: a control-socket response
can be endless or trickle in, a 10 KB log can hold attachment references that expand
to gigabytes, a 200 KB zip entry can inflate to 200 MB. Each bound below turns such an
input into a notice (the watch goes on) instead of an unbounded read. The defaults are
far above what real evals produce; an environment variable overrides each one
(README, "Limits"). Values are read when a source is made, so a test or a user can set
them per run.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

MB = 1024 * 1024


class LimitError(ValueError):
    """An override that is not a positive number (named, with the value given)."""


@dataclass(frozen=True)
class Limit:
    env: str
    default: float
    unit: str  # "MB" (MiB, converted to bytes) or "s"
    what: str

    def value(self) -> float:
        """The limit in bytes (for MB) or seconds, from the environment or the default."""
        raw = os.environ.get(self.env, "").strip()
        number = self.default
        if raw:
            try:
                number = float(raw)
            except ValueError:
                number = math.nan
            if not math.isfinite(number) or number <= 0:
                raise LimitError(f"{self.env}={raw!r}: expected a positive number "
                                 f"({self.unit}; default {self.default:g})")
        return number * MB if self.unit == "MB" else number


# the largest control-socket response body read (an events page at the full tier of a
# long sample is a few MB)
RESPONSE_SIZE = Limit("INSPECT_WATCH_MAX_RESPONSE_MB", 128, "MB",
                      "largest control-socket response body")
# the longest one control-socket request may take in all (the per-read timeout alone
# lets a server that trickles a byte every few seconds keep a request going for ever)
REQUEST_TIME = Limit("INSPECT_WATCH_REQUEST_TIMEOUT", 30, "s",
                     "longest time for one control-socket request, start to end")
# the largest document inflated from a local .eval zip (one sample's JSON), checked
# before it is inflated (real samples are a few MB; one with a 50 MB tool result fits)
LOG_ENTRY_SIZE = Limit("INSPECT_WATCH_MAX_LOG_ENTRY_MB", 100, "MB",
                       "largest document inflated from a .eval log (one sample)")
# the most text attachment references may add to one sample's events, all its pages
# together (each reference counts, also when many name the same attachment): real
# samples add under 1 MB at the content tier (the corpus: 0.41 MB at most)
EXPANSION_SIZE = Limit("INSPECT_WATCH_MAX_EXPANSION_MB", 64, "MB",
                       "most text attachment references may add to one sample")

# the largest file of a shared sample buffer read (``inspect eval --log-shared``): a
# manifest (a few hundred bytes per sample and segment) or one sync's segment zip; the
# documents inflated from a segment are held to LOG_ENTRY_SIZE
BUFFER_FILE_SIZE = Limit("INSPECT_WATCH_MAX_BUFFER_FILE_MB", 256, "MB",
                         "largest shared sample buffer file (a manifest or a segment)")

# seconds one read of a control socket waits for the server's next bytes before the
# request counts as timed out (``watch --read-timeout``): a busy eval's event loop answers
# late, and a request it did not answer in time is sent again
READ_TIMEOUT = 5.0

# the largest recording `replay` reads (`record` writes a few MB per sample)
RECORDING_SIZE = Limit("INSPECT_WATCH_MAX_RECORDING_MB", 512, "MB",
                       "largest recording `replay` reads")

ALL = (RESPONSE_SIZE, REQUEST_TIME, LOG_ENTRY_SIZE, EXPANSION_SIZE, BUFFER_FILE_SIZE,
       RECORDING_SIZE)


def check() -> None:
    """Raise :class:`LimitError` for the first override that is not a positive number."""
    for limit in ALL:
        limit.value()
