"""Event sources: the control socket, the ``inspect ctl`` CLI, log files, replays."""
