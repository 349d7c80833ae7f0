"""UTF-8 programs RE2 is known to build: those of the built-in pack's largest regexes.

A rule regex has two RE2 programs (rx.Pattern): one for ASCII texts, built when the rule
loads, and one for any other text, built when such a text first comes; but when the
ASCII program is large (over ``rx.EAGER_UTF8_ABOVE`` instructions) the UTF-8 one is
built at once too, so that one RE2 cannot build is refused when its rule loads, not in
the middle of a watch. For the built-in pack that check is done here, once: these are
the digests (``rx.utf8_digest``) of the translated patterns it builds so, each built by
RE2 when this list was made. Starting a watch built one of them for 14-23 ms of CPU
(the alternation of test-file names), which no text of the shared corpus ever needed.

A pattern is named by its text, so one a user's library changes (a list redefined) is
not in this list and is built at once, as before. ``tests/engine/test_rx.py`` keeps the
list equal to the pack's; after changing a built-in regex, write it anew with
``python -m tests.engine.re2_known`` (from the sources, not a compiled build).
"""

from __future__ import annotations

KNOWN_UTF8: frozenset[str] = frozenset({
    "1010639daaa7bc5138350da9a45ba83b",
    "d45e848e7539a544475a38035dad5db6",
})
