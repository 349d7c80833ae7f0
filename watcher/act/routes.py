"""Every control-channel route inspect-watch calls, spelled once.

The routes are Inspect's (``inspect_ai/_control/server.py``). The reads live here
beside the mutations' declarations (:mod:`watcher.act.verbs`) so that no module
spells a route by hand: a route Inspect renames is changed in one place, and a test
(tests/test_routes.py) fails on a route literal anywhere else. Like ``verbs.py`` this
module sits on the declarations floor: it imports nothing, and the sources read it.
"""

from __future__ import annotations

# the prefix of every route about one eval
EVAL = "/evals/{eval_id}"

# reads (GET): what HttpSource asks for
TASKS = "/tasks"
SAMPLES = "/evals/{eval_id}/samples"
SAMPLE = "/evals/{eval_id}/sample"
SAMPLE_EVENTS = "/evals/{eval_id}/sample/events"
SAMPLE_MESSAGES = "/evals/{eval_id}/sample/messages"

# mutations (POST): a verb's route is declared with the verb (verbs.py) from these
SAMPLE_CANCEL = "/evals/{eval_id}/sample/cancel"
SAMPLE_CANCEL_TOOL_CALL = "/evals/{eval_id}/sample/cancel-tool-call"
TASK_DRAIN = "/tasks/{task_id}/drain"
TASK_PAUSE = "/tasks/{task_id}/pause"
# lets a process kept for inspection (``--ctl-server=keep``) exit
RELEASE = "/release"


def for_eval(route: str, eval_id: str) -> str:
    """``route`` for one eval (its ``{eval_id}`` filled in)."""
    return route.format(eval_id=eval_id)
