"""The watchdog (``inspect-watch watch --act``): acting on findings through the eval's
control channel, off by default, audited (docs/watchdog.md).

- :mod:`watcher.act.verbs` — the control channel's mutations, each declared once as a
  :class:`~watcher.act.verbs.Verb`; :mod:`watcher.act.control` sends them;
- :mod:`watcher.act.policy` — the action policy language (``act:`` blocks, the
  ``--act-policy`` file, the built-in ``defaults.yaml``);
- :mod:`watcher.act.watchdog` — the :class:`~watcher.run.router.Decider` that carries
  a policy out, step by step: :mod:`~watcher.act.grace`, :mod:`~watcher.act.limits`,
  :mod:`~watcher.act.support`, :mod:`~watcher.act.dryrun`, :mod:`~watcher.act.remember`,
  :mod:`~watcher.act.confirm` (and :mod:`~watcher.act.interrupt` for a whole run), each
  step written down by :mod:`~watcher.act.records`.
"""

# the defaults of --act-max and --act-max-task (here, not in the watchdog's module: the
# CLI declares them without importing it)
MAX_ACTIONS = 20  # actions one watch may take (dry runs count alike)
MAX_PER_TASK = 10  # actions one watch may take on one task
