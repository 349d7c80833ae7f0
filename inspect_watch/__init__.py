"""inspect-watch's names in Inspect's registry (``inspect_watch/...``).

The library is the ``watcher`` package; this one only gives its Inspect Scout scanner
a namespace that is ours alone: Inspect names a registered object after the top-level
package that defines it, and finds a ``pkg/name`` reference through the ``inspect_ai``
entry point called ``pkg`` (here ``inspect_watch``, see :mod:`inspect_watch._registry`).
"""
