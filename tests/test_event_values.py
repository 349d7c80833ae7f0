"""What events.py reads of a raw event, done faster, exactly as before.

``_timestamp``: Inspect's own form is read without ``datetime`` (each minute's epoch
second looked up, the rest added as integers); every value must come out the very float
``datetime.fromisoformat(value).timestamp()`` gives, and every other form, or a value it
refuses, as before. ``to_text``: a tool call's arguments (a mapping of strings) are
written without the JSON encoder, and must read exactly as ``json.dumps`` writes them."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from watcher.events import _timestamp


def _before(value: Any) -> float | None:
    if isinstance(value, (int, float)):  # noqa: UP038
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None


def test_inspects_form_gives_datetimes_float_exactly() -> None:
    rng = random.Random(31)
    start = datetime(1960, 1, 1, tzinfo=UTC)
    for _ in range(50_000):
        value = (start + timedelta(microseconds=rng.randrange(10 ** 17))).isoformat()
        if len(value) == 32:  # (a whole second drops its fraction: the other path)
            assert _timestamp(value) == _before(value), value
    # one busy minute, as a real run's events are
    minute = datetime(2026, 12, 1, 7, 11, tzinfo=UTC)
    for us in range(0, 60_000_000, 7_919):
        value = (minute + timedelta(microseconds=us)).isoformat()
        assert _timestamp(value) == _before(value), value


@pytest.mark.parametrize("value", [
    "2026-12-06T04:07:27+00:00", "2026-12-06T04:07:27.1+00:00", "2026-12-06T04:07:27Z",
    "2026-12-06T04:07:27.122808+01:00", "2026-12-06 04:07:27.122808+00:00",
    "2026-12-06T04:07:60.000000+00:00", "2026-13-06T04:07:27.122808+00:00",
    "2026-02-30T04:07:27.122808+00:00", "2026-12-06T24:07:27.122808+00:00",
    "2026-12-06T04:07:2a.122808+00:00", "2026-12-06T04:07:27.12280\u0663+00:00",
    "2026-12-06T04:07:\u0662\u0667.122808+00:00", "2026-12-06T04:07:27.122808-00:00",
    "\x00" * 16 + ":27.122808+00:00", "2026-12-06T04:07:27.122808+00:00\x00",
    "", "not a time", 1796530047.5, 3, True, None, ["2026"],
])
def test_every_other_form_as_before(value: Any) -> None:
    assert _timestamp(value) == _before(value)


def test_minutes_read_in_any_order_give_datetimes_float() -> None:
    """The last minute read is kept aside: values of it, of other minutes between, and of
    a minute the table already holds all read as datetime reads them."""
    rng = random.Random(6)
    minutes = [datetime(2026, 12, 6, 4, m, tzinfo=UTC) for m in (7, 8, 7, 59)]
    for _ in range(5_000):
        value = (rng.choice(minutes) + timedelta(microseconds=rng.randrange(1, 60_000_000))
                 ).isoformat()
        if len(value) == 32:
            assert _timestamp(value) == _before(value), value


@pytest.mark.parametrize("value", [
    {}, {"cmd": "ls -la"}, {"cmd": "echo 'é' \u2028 \x00 \t \"q\" \\\\ \ud800"},
    {"a": "1", "b": "2", "c": ""}, {"code": "print(1)\n" * 300},
    {"cmd": 3}, {"n": None}, {1: "x"}, {"a": {"b": "c"}}, {"a": ["x"]}, {"f": 1.5e16},
    {"b": True}, {"s": {1, 2}},
])
def test_a_tool_calls_arguments_read_as_the_encoder_writes_them(value: Any) -> None:
    """events.to_text writes a mapping of strings itself: the very text json.dumps gives."""
    import json

    from watcher.events import to_text

    assert to_text(value) == json.dumps(value, default=str)


def test_a_string_is_quoted_as_the_encoder_quotes_it() -> None:
    """Every ASCII character, alone and in random runs, and what is not ASCII: quoted
    as json.dumps quotes it (orjson writes the ASCII ones, DEL aside)."""
    import json

    from watcher.events import _quote

    rng = random.Random(31)
    texts = [chr(i) for i in range(128)] + ["", "é", "\u2028", "\ud800", "a\x7fb", "\U0001f600"]
    texts += ["".join(chr(rng.randrange(128)) for _ in range(rng.randrange(1, 60)))
              for _ in range(20_000)]
    for t in texts:
        assert _quote(t) == json.dumps(t), repr(t)
