"""How much of a post-hoc scan's floor a decoder that skips what no rule reads could save.

    python benchmarks/bench_decode.py [--log LOG.eval] [--rounds 5]

The floor of ``bench_cost.py`` decodes every sample whole with orjson; a scan decodes it
the same way, then projects the model and tool events (sources/logfiles/project.py).
Most of a sample's bytes are never read by a rule: its ``messages`` (a second copy of
the conversation), ``state`` events' changes, a model event's tool definitions and raw
API call. This prints, for the samples of one log (inflated once, outside the timing),
the CPU of decoding them all: orjson whole (the floor's decode), msgspec whole, msgspec
without ``messages``, and msgspec with each event typed down to the fields the
content-tier projection reads (unknown fields skipped while parsing, not built), and
the scan's own lean decode (``watcher/sources/logfiles/lean.py``: the same records,
each event then rebuilt as the dict the projection reads, absent apart from null,
for the built-in pack's event types). Decoding only, one process, best of ``--rounds``.
"""

from __future__ import annotations

import argparse
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import SWE as DEFAULT_LOG  # noqa: E402
from common import banner  # noqa: E402


def best(decode: Callable[[bytes], Any], blobs: list[bytes], rounds: int) -> float:
    """The least CPU seconds of ``rounds`` passes decoding every blob."""
    out = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        for b in blobs:
            decode(b)
        out = min(out, time.process_time() - t0)
    return out


try:
    import msgspec
except ImportError:  # an install older than the lean decode: the orjson figure alone
    msgspec = None

if msgspec is not None:
    class NoMessages(msgspec.Struct):
        """A sample without its ``messages`` (skipped while parsing)."""

        events: list[dict[str, Any]]
        attachments: dict[str, str] = {}
        events_data: Any = None

    class Event(msgspec.Struct, kw_only=True):  # type: ignore[call-arg]
        """What project() reads of a model or tool event (sources/logfiles/project.py)."""

        event: str
        uuid: Any = None
        span_id: Any = None
        timestamp: Any = None
        completed: Any = None
        pending: Any = None
        output: Any = None
        model: Any = None
        error: Any = None
        input: Any = None
        input_refs: Any = None
        id: Any = None
        function: Any = None
        arguments: Any = None
        result: Any = None

    class Typed(msgspec.Struct):
        """A sample with its events typed (every other field skipped)."""

        events: list[Event]
        attachments: dict[str, str] = {}
        events_data: Any = None


def msgspec_decoders() -> dict[str, Callable[[bytes], Any]]:
    """The msgspec variants (empty when msgspec is not installed)."""
    if msgspec is None:
        return {}
    from watcher.sources.logfiles.lean import parse_sample_lean

    pack = frozenset({"error", "sentinel", "sandbox", "model", "sample_limit", "tool"})
    return {"msgspec, whole": msgspec.json.Decoder().decode,
            "msgspec, without messages": msgspec.json.Decoder(NoMessages).decode,
            "msgspec, events typed (sketch)": msgspec.json.Decoder(Typed).decode,
            "lean.py (the scan's, dicts built)": lambda b: parse_sample_lean(b, 1, pack)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", default=str(DEFAULT_LOG))
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    banner("bench_decode")
    import orjson
    import zipfile_zstd  # noqa: F401  (zstd entries)

    with zipfile.ZipFile(args.log) as z:
        blobs = [z.read(n) for n in z.namelist() if n.startswith("samples/")]
    print(f"{len(blobs)} samples, {sum(map(len, blobs)) / 1e6:.1f} MB of JSON "
          f"({Path(args.log).name})")
    decoders: dict[str, Callable[[bytes], Any]] = {"orjson, whole (the floor's)": orjson.loads}
    more = msgspec_decoders()
    if not more:
        print("msgspec is not installed (an older install): orjson only")
    decoders.update(more)
    base = best(orjson.loads, blobs, args.rounds)
    print(f"CPU s of decoding every sample, best of {args.rounds}:")
    for name, decode in decoders.items():
        sec = base if decode is orjson.loads else best(decode, blobs, args.rounds)
        print(f"  {name:<34}{sec:7.3f}  {sec / base:5.2f}x")


if __name__ == "__main__":
    main()
