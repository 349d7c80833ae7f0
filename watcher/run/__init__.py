"""Running a watch: the layer between the sources and engine below and the outputs above.

* :mod:`.values` — the small values others name: selector, options, origin, views.
* :mod:`.runner` — one thread per source: listings, which samples are due, findings
  on a queue.
* :mod:`.tracked` — one sample being read: its stream, rule state, spend and life.
* :mod:`.sources` — which sources a watch reads (logs, replays, discovered evals).
* :mod:`.router` — the deciding step: hand-off, confidence floor, state, fail-on, sinks.
* :mod:`.status` — the runner's state as status snapshots and the end-of-run summary.
* :mod:`.parallel` — ``--jobs``: a post-hoc scan over forked workers.
* :mod:`.watch` — :class:`~.watch.Watch`, the loop that ties them together.

Nothing here imports a reporter: outputs are :class:`~.router.Sink` values handed in
by :mod:`watcher.app`.
"""
