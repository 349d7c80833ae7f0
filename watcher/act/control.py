"""A typed client for the control channel's mutations: what the watchdog and ``top``
send to an eval, each a declared :class:`~watcher.act.verbs.Verb`.

Reads (the task list, a sample's row) stay on :class:`~watcher.sources.http.HttpSource`;
what changes an eval goes through here, so that its routes are spelled in one place
and a request always carries the parameters its verb declares (``dry_run`` included).
"""

from __future__ import annotations

from watcher.act import routes
from watcher.act.verbs import Args, Verb
from watcher.findings import SampleRef
from watcher.sources.http import ControlAnswer, HttpSource


class ControlClient:
    """The mutations of one eval process's control channel (over ``http``, whose
    retries and bounds apply: see :meth:`HttpSource.call`)."""

    def __init__(self, http: HttpSource) -> None:
        self.http = http

    def send(self, verb: Verb, sample: SampleRef, args: Args, *,
             dry_run: bool) -> ControlAnswer:
        """Ask for ``verb`` on ``sample`` (or its task), or only what it would change."""
        return self.http.call("POST", verb.path(sample),
                              verb.params(sample, args, dry_run=dry_run))

    def release(self) -> ControlAnswer:
        """Let a process kept for inspection exit (``--ctl-server=keep``); cancels
        nothing."""
        return self.http.call("POST", routes.RELEASE)
