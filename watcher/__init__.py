"""inspect-watch: a rule-based watcher for live Inspect AI evaluations."""
__version__ = "0.1.0"
