"""Inspect log files as a source: :class:`LogSource` (see :mod:`.source`).

``inspect_ai`` is imported inside functions only: importing it costs seconds, and the
live path must not pay for it. A post-hoc scan of local ``.eval`` files does not
import it at all when it can help it: the listing is a directory walk
(:mod:`.listing`), and a finished log's header, sample summaries and samples are JSON
documents in its zip (:mod:`.archive`, parsed by :mod:`.header` and :mod:`.samples`).
Anything else (``.json`` logs, URLs, logs still being written, documents that do not
parse) goes through Inspect's reader.
"""

from watcher.sources.logfiles.archive import EntryTooLarge, forget_open_zips
from watcher.sources.logfiles.source import LogSource, iter_log_samples

__all__ = ["EntryTooLarge", "LogSource", "forget_open_zips", "iter_log_samples"]
