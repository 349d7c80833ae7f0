"""Write watcher/engine/re2_known.py anew from the built-in pack (see that module):

    python -m tests.engine.re2_known
"""

from __future__ import annotations


def _pack_patterns(check: str) -> list[str]:
    """The translated patterns loading the built-in pack asks ``rx.<check>`` about, each
    then built by RE2 as when none is known (it raises if one cannot be built). No
    program is known meanwhile: every ASCII one is built at once, and with it the UTF-8
    check of the large ones."""
    from watcher.engine import rx

    if not rx.__file__ or not rx.__file__.endswith(".py"):
        raise RuntimeError("run from the sources (a compiled rx cannot be observed)")
    seen: list[str] = []

    def unknown(translated: str) -> bool:
        seen.append(translated)
        return False

    checks = ("_known_utf8", "_known_ascii")
    known = {name: getattr(rx, name) for name in checks}
    for name in checks:
        setattr(rx, name, unknown if name == check else lambda translated: False)
    try:
        from watcher.engine import Engine, load_rules

        Engine(load_rules(paths=[], builtin=True), [])
    finally:
        for name, was in known.items():
            setattr(rx, name, was)
    return seen


def pack_utf8_patterns() -> list[str]:
    """The translated patterns whose UTF-8 programs loading the built-in pack builds at
    once when none is known (each built by RE2: it raises if one cannot be)."""
    return _pack_patterns("_known_utf8")


def pack_ascii_patterns() -> list[str]:
    """The ASCII translations of the built-in pack's patterns, each of whose programs RE2
    builds (checked here: one it cannot build is left out, and built at once as before)."""
    import re2

    from watcher.engine import rx

    return [t for t in _pack_patterns("_known_ascii")
            if re2._re2.RE2(t.encode("ascii"), rx._LATIN1).ok()]


def _write(text: str, name: str, digests: list[str]) -> str:
    start = text.index(f"{name}: frozenset[str] = frozenset({{")
    end = text.index("})", start) + 2
    body = "".join(f'    "{d}",\n' for d in digests)
    return text[:start] + f"{name}: frozenset[str] = frozenset({{\n" + body + "})" + text[end:]


def main() -> None:
    """Write this module's lists anew from the built-in pack."""
    from pathlib import Path

    from watcher.engine import re2_known
    from watcher.engine.rx import utf8_digest

    utf8 = sorted({utf8_digest(t) for t in pack_utf8_patterns()})
    ascii = sorted({utf8_digest(t) for t in pack_ascii_patterns()})
    path = Path(re2_known.__file__)
    text = _write(_write(path.read_text(), "KNOWN_UTF8", utf8), "KNOWN_ASCII", ascii)
    path.write_text(text)
    print(f"{path}: {len(utf8)} UTF-8 and {len(ascii)} ASCII pattern(s)")


if __name__ == "__main__":
    main()
