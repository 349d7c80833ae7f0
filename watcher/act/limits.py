"""Step 3 of the watchdog: at most ``--act-max`` actions a watch, ``--act-max-task`` a
task (dry runs count alike)."""

from __future__ import annotations

from watcher.act import MAX_ACTIONS, MAX_PER_TASK
from watcher.act.pending import Pending


class Limits:
    """How many actions this watch took, in all and per task."""

    def __init__(self, max_actions: int = MAX_ACTIONS,
                 max_per_task: int = MAX_PER_TASK) -> None:
        self.max_actions = max_actions
        self.max_per_task = max_per_task
        self.actions = 0
        self.per_task: dict[str, int] = {}

    def exceeded(self, p: Pending) -> tuple[str, str] | None:
        """Why ``p`` may not be taken (reason, words), or ``None``."""
        if p.counted:
            return None  # this very action, tried again: it is within the limits
        s = p.finding.sample
        task = s.task_id or s.eval_id
        if self.actions >= self.max_actions:
            return ("limit_run", f"this watch has taken {self.actions} actions, its limit "
                    "(--act-max): nothing was done")
        if self.per_task.get(task, 0) >= self.max_per_task:
            return ("limit_task", f"{self.per_task[task]} actions were taken on this task, "
                    "its limit (--act-max-task): nothing was done")
        return None

    def count(self, p: Pending) -> None:
        """Count the action, once (a check that could not finish and is tried again at
        the next one is the same action)."""
        if p.counted:
            return
        p.counted = True
        s = p.finding.sample
        task = s.task_id or s.eval_id
        self.actions += 1
        self.per_task[task] = self.per_task.get(task, 0) + 1
