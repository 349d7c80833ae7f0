"""A stable share of the logs for one of N scanners (``watch --log-dir URL --shard K/N``).

Batch systems run N copies of one command and hand each its index: a Kubernetes Indexed
Job (``JOB_COMPLETION_INDEX``), a CI matrix, a Slurm array (``SLURM_ARRAY_TASK_ID``). Each
copy takes the logs whose *name* hashes to its index, so the N copies together read every
log exactly once and need not talk to each other. The hash is SHA-256 of the file name:
Python's ``hash()`` is salted per process, and a log's path or URL prefix can differ
between machines (a bucket here, a mount there) where its name does not.
"""

from __future__ import annotations

import hashlib

Shard = tuple[int, int]  # (k, n): the k-th of n shares, 0 <= k < n


def parse_shard(text: str) -> Shard:
    """``"K/N"`` as ``(k, n)``; :class:`ValueError` (saying what is expected) otherwise.
    K counts from 0, as ``JOB_COMPLETION_INDEX`` does."""
    k_text, sep, n_text = str(text).strip().partition("/")
    try:
        if not sep:
            raise ValueError
        k, n = int(k_text), int(n_text)
    except ValueError:
        raise ValueError(f"{text!r}: expected K/N, e.g. 0/4 (K from 0 to N-1)") from None
    if n < 1 or not 0 <= k < n:
        raise ValueError(f"{text!r}: K must be from 0 to N-1 and N at least 1")
    return k, n


def log_name(location: str) -> str:
    """A log's file name: what its shard is decided by."""
    return location.rstrip("/").replace("\\", "/").rsplit("/", 1)[-1]


def shard_of(location: str, n: int) -> int:
    """Which of ``n`` shares the log at ``location`` belongs to (stable everywhere)."""
    digest = hashlib.sha256(log_name(location).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % n


def owns(shard: Shard | None, location: str) -> bool:
    """Whether ``shard`` (``None``: no sharding) takes the log at ``location``."""
    return shard is None or shard_of(location, shard[1]) == shard[0]
