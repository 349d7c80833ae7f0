"""Write watcher/engine/re2_known.py anew from the built-in pack (see that module):

    python -m tests.engine.re2_known
"""

from __future__ import annotations


def pack_utf8_patterns() -> list[str]:
    """The translated patterns whose UTF-8 programs loading the built-in pack builds at
    once when none is known (each built by RE2: it raises if one cannot be)."""
    from watcher.engine import rx

    if not rx.__file__ or not rx.__file__.endswith(".py"):
        raise RuntimeError("run from the sources (a compiled rx cannot be observed)")
    seen: list[str] = []

    def unknown(translated: str) -> bool:
        seen.append(translated)
        return False

    known = rx._known_utf8
    rx._known_utf8 = unknown  # type: ignore[assignment]
    try:
        from watcher.engine import Engine, load_rules

        Engine(load_rules(paths=[], builtin=True), [])
    finally:
        rx._known_utf8 = known  # type: ignore[assignment]
    return seen


def main() -> None:
    """Write this module's list anew from the built-in pack."""
    from pathlib import Path

    from watcher.engine import re2_known
    from watcher.engine.rx import utf8_digest

    digests = sorted({utf8_digest(t) for t in pack_utf8_patterns()})
    path = Path(re2_known.__file__)
    text = path.read_text()
    start = text.index("KNOWN_UTF8: frozenset[str] = frozenset({")
    end = text.index("})", start) + 2
    body = "".join(f'    "{d}",\n' for d in digests)
    path.write_text(text[:start] + "KNOWN_UTF8: frozenset[str] = frozenset({\n" + body
                    + "})" + text[end:])
    print(f"{path}: {len(digests)} pattern(s)")


if __name__ == "__main__":
    main()
