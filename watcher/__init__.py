"""inspect-watch: a rule-based watcher for live Inspect AI evaluations."""
__version__ = "0.1.0"

# before any module of the package makes a dataclass: their methods' code, compiled in
# an earlier run, is read back instead of compiled again (watcher/codecache.py)
from watcher import codecache as _codecache  # noqa: E402

_codecache.install()
