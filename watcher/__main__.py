"""``python -m watcher`` is ``inspect-watch``."""

from watcher.cli import main

main()
