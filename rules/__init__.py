"""Built-in rule pack (installed as watcher.rules)."""
