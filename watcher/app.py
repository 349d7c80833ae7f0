"""The library entry: run a watch from a program (the CLI, the demo, a front end).

:class:`WatchOptions` holds every option of ``inspect-watch watch``; :func:`run` does
what the command does with them and returns its :class:`~watcher.exit_codes.ExitCode`:
load the rules (unless an engine is given), open and lock the state, open the
reporter ``format`` names (:mod:`watcher.reporters.registry`) and the alerts, run the
:class:`~watcher.run.watch.Watch`, write the summaries, say on stderr what went
wrong. :func:`start` runs the same on a thread and returns a :class:`WatchHandle`, so
a front end can watch in-process: its own :class:`~watcher.run.router.Sink` values get
what the reporters get (findings, notices, status snapshots; ``sample_detail`` adds
a row per sample), and ``deciders`` (:class:`~watcher.run.router.Decider`) see each
finding that is news, with where it was read, before it is written. ``act`` adds the
watchdog (:mod:`watcher.act`), a decider of its own.

Invalid options raise :class:`OptionsError` before anything starts (the CLI shows it as
a usage error); every other problem is said on stderr and ends in an exit code, as
the CLI does. Nothing here imports inspect_ai: a live watch must start fast.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import click

from watcher import __version__
from watcher.act import MAX_ACTIONS as ACT_MAX
from watcher.act import MAX_PER_TASK as ACT_MAX_TASK
from watcher.alertqueue import DRAIN_SECONDS, NOTIFY_MIN_CONFIDENCE, NOTIFY_PER_MINUTE, QUEUE_SIZE
from watcher.alertqueue import HOOK_TIMEOUT as ON_FINDING_TIMEOUT
from watcher.engine import Engine, RuleLoadErrors, load_rules, load_suppressions
from watcher.exit_codes import ExitCode
from watcher.limits import READ_TIMEOUT
from watcher.reporters import OutputError, OutputOptions, Reporter, ReporterError, get_reporter
from watcher.reporters.remote import is_url
from watcher.run.options import config_kwargs
from watcher.run.router import AlertSink, Decider, Sink
from watcher.run.values import Selector
from watcher.run.watch import Watch, WatchConfig
from watcher.state import StateError, WatchState
from watcher.summary import ReportContext, StatusSnapshot

# a post-hoc scan of local logs this large is split over every CPU unless ``jobs`` says
# otherwise: forking costs tens of milliseconds, decoding 8 MB of logs about a second
AUTO_JOBS_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class WatchOptions:
    """Every option of ``inspect-watch watch`` (README "Usage"); the defaults are the
    command's. Paths and URLs are strings, as on the command line."""

    # what to read: live evals (found by discovery), or logs, or recordings
    selector: Selector = field(default_factory=Selector)  # [TASK [SAMPLE_ID [EPOCH]]]
    log_dir: str | None = None
    replay: tuple[str, ...] = ()  # recorded event pages (`inspect-watch replay`)
    transport: str = "auto"  # auto | http | cli
    poll: float = 1.0
    once: bool = False
    follow: bool = False
    wait_for_evals: float = 0.0  # seconds to wait for a first eval before giving up
    # live: only evals whose logs are written under this directory (or URL)
    evals_from: str | None = None
    # seconds one read of a control socket may wait for bytes (a busy eval answers late)
    read_timeout: float = READ_TIMEOUT
    state_path: str | None = None
    jobs: int | None = None  # processes for --log-dir --once; 0: one per CPU; None: auto
    shard: tuple[int, int] | None = None  # --shard K/N: the logs whose name hashes to K
    # the rules
    rules: tuple[str, ...] = ()
    disable: tuple[str, ...] = ()
    only: tuple[str, ...] = ()
    needs_max: str | None = None  # metadata | content | full
    no_builtin: bool = False
    suppress: str | None = None
    # what is reported
    min_confidence: str = "low"
    fail_on: str | None = None
    # the outputs
    format: str | None = "text"  # a reporter for `watch` (None: only the given sinks)
    output: str | None = None  # None: standard output
    summary_md: str | None = None  # --summary
    summary_html: str | None = None  # --html
    full_evidence: bool = False
    quiet: bool = False
    verbose: bool = False  # text: each finding's evidence and hand-off, once
    no_color: bool = False
    log_hints: bool = True  # hand-offs name the log (not one that will be deleted)
    sample_detail: bool = False  # status snapshots carry a row per sample read
    recent_events: int = 0  # each sample's last N events kept, for WatchHandle.recent_events
    # the alerts
    on_finding: str | None = None
    on_finding_timeout: float = ON_FINDING_TIMEOUT
    notify: tuple[str, ...] = ()
    notify_min_confidence: str = NOTIFY_MIN_CONFIDENCE
    notify_rate: int = NOTIFY_PER_MINUTE  # notifications a minute
    alert_queue: int = QUEUE_SIZE
    alert_drain: float = DRAIN_SECONDS
    # the watchdog (off by default: without it the watch only observes)
    act: bool = False  # act on findings through the eval's control channel
    dry_run: bool = False  # with act: every step but the last, and say what it would do
    act_policy: str | None = None  # a policy file over the built-in defaults
    act_max: int = ACT_MAX  # actions a watch may take
    act_max_task: int = ACT_MAX_TASK  # actions a watch may take on one task
    # a run-wide budget: tokens a task's samples may spend before a task-budget finding
    task_budget: int | None = None
    # release each live eval process read to its end (watcher/sessions.py)
    release_when_done: bool = False


class OptionsError(ValueError):
    """Options that cannot work, found before anything starts; ``option`` names the
    option at fault (``--output``), if one is."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


# -- checking options ----------------------------------------------------------------


def check(options: WatchOptions) -> WatchOptions:
    """``options`` with ``jobs`` decided, or :class:`OptionsError` for the first problem:
    an unknown format, a poll or job count out of range, a parallel scan of no logs, a
    shard out of range or without logs, a log directory that does not exist, a limit
    override that is no positive number, an output that cannot be written, a watchdog
    option without ``--act`` or where it cannot act."""
    if options.format is not None:
        try:
            get_reporter(options.format, "watch")
        except ReporterError as e:
            raise OptionsError(str(e), "--format") from e
    if options.poll <= 0:
        raise OptionsError("must be positive", "--poll")
    if not options.read_timeout > 0 or options.read_timeout == float("inf"):
        raise OptionsError("must be a positive number of seconds", "--read-timeout")
    jobs = options.jobs
    if jobs is not None and jobs < 0:
        raise OptionsError("must be 0 (one per CPU) or more", "--jobs")
    if jobs is None:  # the findings are the same either way; a large scan takes less time
        big = bool(options.log_dir and options.once) and (
            local_log_bytes(options.log_dir) >= AUTO_JOBS_BYTES)
        jobs = 0 if big else 1
    jobs = jobs or os.cpu_count() or 1
    if jobs > 1 and not (options.log_dir and options.once):
        raise OptionsError("parallel scans read logs: use it with --log-dir and --once",
                           "--jobs")
    if options.shard is not None:
        k, n = options.shard
        if n < 1 or not 0 <= k < n:
            raise OptionsError("K must be from 0 to N-1 and N at least 1", "--shard")
        if not options.log_dir:
            raise OptionsError("a shard is a share of the logs: use it with --log-dir",
                               "--shard")
    check_act(options)
    if options.task_budget is not None and options.task_budget < 1:
        raise OptionsError("must be 1 token or more", "--task-budget")
    if options.release_when_done and (options.log_dir or options.replay
                                      or options.transport == "cli"):
        raise OptionsError("releases live evals through their control socket: not with "
                           "logs, recordings or --transport cli", "--release-when-done")
    if options.evals_from is not None:
        if options.log_dir or options.replay:
            raise OptionsError("selects live evals by where they log; with --log-dir, "
                               "name that directory instead", "--evals-from")
        options = replace(options, selector=replace(options.selector,
                                                    log_root=options.evals_from))
    local = local_path(options.log_dir)
    if local is not None and not local.exists():
        raise OptionsError(f"{options.log_dir} does not exist", "--log-dir")
    check_limits()
    for path, option in ((options.output, "--output"), (options.summary_md, "--summary"),
                         (options.summary_html, "--html")):
        check_output(path, option)
    return replace(options, jobs=jobs)


def check_act(options: WatchOptions) -> None:
    """The watchdog's options: only with ``--act``, and only where it can act (a live
    eval's control socket: never logs, recordings, or ``inspect ctl``)."""
    o = options
    if not o.act:
        for given, option in ((o.dry_run, "--dry-run"), (o.act_policy, "--act-policy")):
            if given:
                raise OptionsError("is for --act (`--act --dry-run` says what the watchdog "
                                   "would do, and changes nothing)", option)
        return
    if o.log_dir or o.replay:
        raise OptionsError("a watch over logs never acts: the runs they hold are over "
                           "(--act works on live evals only)", "--act")
    if o.transport == "cli":
        raise OptionsError("the watchdog acts through the eval's control socket; it does "
                           "not work with --transport cli", "--act")
    for value, option in ((o.act_max, "--act-max"), (o.act_max_task, "--act-max-task")):
        if value < 1:
            raise OptionsError("must be 1 or more", option)


def scope_words(o: WatchOptions) -> str:
    """Which live evals the watch reads (and acts on), in words for its banner: "" when it
    is every eval of the user on this host, whoever started it."""
    if o.log_dir or o.replay:
        return ""
    parts = []
    if o.selector.task:
        parts.append(f"task {o.selector.task}")
    if o.selector.log_root is not None:
        parts.append(f"evals logging under {o.selector.log_root}")
    return ", ".join(parts)


def local_path(path: str | None) -> Path | None:
    """A plain path or ``file://`` URL as a local path; ``None`` for none or another URL."""
    if not path or is_url(path):
        return None
    return Path(path.removeprefix("file://")).expanduser()


def check_output(path: str | None, option: str) -> None:
    """A local output path the watch can write, checked before it starts: a report that
    failed at the end would cost the whole watch (remote URLs are checked by writing)."""
    target = local_path(path)
    if target is None:
        return
    # a symlink is written through: what matters is where it points (a dangling one is
    # created there, as `> PATH` would; its directory must exist)
    real = Path(os.path.realpath(target))
    via = f" (where the symlink {path} points)" if real != target.absolute() else ""
    if real.is_symlink():
        raise OptionsError(f"{path} is a symlink loop", option)
    if target.is_dir():
        raise OptionsError(f"{path} is a directory", option)
    if not real.parent.is_dir():
        raise OptionsError(f"directory {real.parent} does not exist{via}", option)
    if not os.access(real.parent, os.W_OK) or real.exists() and not os.access(real, os.W_OK):
        raise OptionsError(f"{path} is not writable", option)


def check_limits() -> None:
    """An override of a limit (``INSPECT_WATCH_MAX_…``, README "Limits") that is not a
    positive number is bad input, said before the watch starts."""
    from watcher.limits import LimitError, check

    try:
        check()
    except LimitError as e:
        raise OptionsError(str(e)) from e


def local_log_bytes(log_dir: str | None, cap: int = AUTO_JOBS_BYTES) -> int:
    """The size of the local Inspect logs under ``log_dir`` (0 for a URL), counted until
    it reaches ``cap`` (a large directory is not walked to its end for this)."""
    local = local_path(log_dir)
    if local is None:
        return 0
    if local.is_file():
        return local.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(local):
        for name in files:
            if name.endswith((".eval", ".json")):
                try:
                    total += os.stat(os.path.join(root, name)).st_size
                except OSError:
                    continue
                if total >= cap:
                    return total
    return total


# -- the rules -----------------------------------------------------------------------

YOUNG_COLLECTION = 5000  # containers allocated (net) between young collections (Python: 700)


def load_engine(options: WatchOptions) -> Engine:
    """The options' rules, loaded and compiled; :class:`RuleLoadErrors` lists every
    error, located."""
    ruleset = load_rules(paths=list(options.rules), builtin=not options.no_builtin,
                         disable=list(options.disable), only=list(options.only),
                         needs_max=options.needs_max)
    suppressions = load_suppressions(options.suppress) if options.suppress else []
    engine = Engine(ruleset, suppressions)
    settle_collector()
    return engine


def settle_collector() -> None:
    """The collector as a watch runs it, once its rules are loaded (``bench_engine``
    measures the rules under it too)."""
    # what is loaded by now (modules, the compiled rules) lives as long as the watch: out
    # of the collector's way, a scan that decodes thousands of transcripts runs 4 % faster
    gc.freeze()
    # a sample is decoded into thousands of containers that live until it has been read
    # and are freed by reference counting: at Python's 700 the young collection walked
    # them again and again (the 375-run scan: 935 collections, 0.13 s; at 5,000: 17,
    # 0.02 s)
    gc.set_threshold(YOUNG_COLLECTION, *gc.get_threshold()[1:])


def load_act_policy(options: WatchOptions, engine: Engine) -> Any:
    """The watchdog's policy for ``--act``: ``--act-policy`` over the built-in defaults,
    checked against the loaded rules. Raises :class:`~watcher.act.policy.PolicyErrors`."""
    from watcher.act.policy import check_references, load_policy, rule_acts

    policy = load_policy(options.act_policy, rule_acts=rule_acts(engine.rules))
    check_references(policy, rule_infos(engine))
    return policy


def rule_infos(engine: Engine) -> dict[str, Any]:
    """Each loaded rule's category and, where the engine says, its detector's facts (what
    an action policy's conditions may name)."""
    from watcher.act.policy import RuleInfo

    try:  # the engine's table of facts per detector kind (not checked without it)
        from watcher.engine.detectors import FACTS_OF
    except ImportError:
        FACTS_OF = {}  # noqa: N806
    from watcher.run.budget import BUDGET_FACTS, CATEGORY, RULE

    out: dict[str, Any] = {}
    for rule in engine.rules:
        facts = FACTS_OF.get(getattr(rule, "detect_kind", ""))
        out[rule.id] = RuleInfo(rule.category, frozenset(facts) if facts is not None else None)
    # the watch's own finding about a task's spend (--task-budget): a policy may act on it
    out.setdefault(RULE, RuleInfo(CATEGORY, frozenset(BUDGET_FACTS)))
    return out


def say_rule_errors(e: RuleLoadErrors) -> None:
    say(e.render(), prefix=False)
    say("refusing to start with invalid rules")


def say(message: str, *, prefix: bool = True) -> None:
    """Tell the user, on stderr, as the CLI does."""
    click.echo(f"inspect-watch: {message}" if prefix else message, err=True)


# -- running -------------------------------------------------------------------------


def run(options: WatchOptions, *, sinks: Sequence[Sink] = (), engine: Engine | None = None,
        deciders: Sequence[Decider] = ()) -> ExitCode:
    """Run one watch to its end, as ``inspect-watch watch`` does; its exit code.

    ``sinks`` get what the reporters get, after them; ``engine`` replaces loading the
    options' rules; ``deciders`` see each finding that is news before it is written.
    Raises :class:`OptionsError` for options that cannot work.
    """
    return _Session(check(options), sinks, engine, deciders).run()


def start(options: WatchOptions, *, sinks: Sequence[Sink] = (), engine: Engine | None = None,
          deciders: Sequence[Decider] = ()) -> WatchHandle:
    """:func:`run` on a thread of its own: for a front end that shows the watch while it
    runs. Raises :class:`OptionsError` at once; the rest happens on the thread (a
    watch not on the main thread leaves SIGINT and SIGTERM to the program)."""
    session = _Session(check(options), sinks, engine, deciders)
    session.latest.takes_status = True  # WatchHandle.status() reads it
    return WatchHandle(session)


class WatchHandle:
    """A watch running on its own thread (:func:`start`)."""

    def __init__(self, session: _Session) -> None:
        self._session = session
        self._code: ExitCode | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="inspect-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._code = self._session.run()
        except BaseException as e:  # noqa: BLE001 - handed to wait()
            self._error = e

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def status(self) -> StatusSnapshot | None:
        """The last status snapshot the watch sent (about once a second); ``None``
        before the first."""
        return self._session.latest.snapshot

    def recent_events(self, eval_id: str, sample_id: str, epoch: int = 1) -> list[dict[str, Any]]:
        """A sample's last events, shortened, oldest first (``WatchOptions.recent_events``
        of them; none before the watch has read it). Their text is the agent's:
        untrusted, to be shown only through :mod:`watcher.sanitize`."""
        watch = self._session.watch
        return watch.recent_events(eval_id, sample_id, epoch) if watch is not None else []

    @property
    def watchdog(self) -> Any:
        """The watchdog (``act``), once the watch has started; ``None`` without it."""
        return self._session.watchdog

    def stop(self) -> None:
        """End the watch as Ctrl+C does: outputs flushed, summaries written, state
        saved. Returns at once; :meth:`wait` for the end."""
        self._session.request_stop()

    def wait(self, timeout: float | None = None) -> ExitCode | None:
        """The exit code once the watch has ended (``None`` if ``timeout`` passed first);
        re-raises what ended it if that was an exception."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            return None
        if self._error is not None:
            raise self._error
        return self._code


class _Latest:
    """A sink that keeps the last status snapshot (read from another thread); it takes
    them only for a :class:`WatchHandle` (``status()``), so that a watch whose outputs
    show no status builds none."""

    def __init__(self) -> None:
        self.snapshot: StatusSnapshot | None = None
        self.takes_status = False

    def start(self, context: ReportContext) -> None:
        return None

    def finding(self, f: Any) -> None:
        return None

    def notice(self, n: Any) -> None:
        return None

    def status(self, snapshot: StatusSnapshot) -> None:
        self.snapshot = snapshot

    def stop(self, summary: Any = None) -> None:
        return None


class _Session:
    """One watch as :func:`run` runs it (checked options)."""

    def __init__(self, options: WatchOptions, sinks: Sequence[Sink], engine: Engine | None,
                 deciders: Sequence[Decider]) -> None:
        self.options = options
        self.extra = list(sinks)
        self.engine = engine
        self.deciders = list(deciders)
        self.latest = _Latest()
        self.watch: Watch | None = None
        self.releaser: Any = None  # --release-when-done (watcher.sessions.ReleaseWhenDone)
        self.watchdog: Any = None  # --act (watcher.act.watchdog.Watchdog)
        self._stop = False
        self._lock = threading.Lock()

    def request_stop(self) -> None:
        with self._lock:
            self._stop = True
            if self.watch is not None:
                self.watch.request_stop()

    def run(self) -> ExitCode:
        o = self.options
        engine = self.engine
        if engine is None:
            try:
                engine = load_engine(o)
            except RuleLoadErrors as e:
                say_rule_errors(e)
                return ExitCode.BAD_INPUT
        policy = None
        if o.act:
            from watcher.act.policy import PolicyErrors

            try:
                policy = load_act_policy(o, engine)
            except PolicyErrors as e:
                say(e.render(), prefix=False)
                say("refusing to start with an invalid action policy")
                return ExitCode.BAD_INPUT
        try:
            # checked now (a state that cannot be saved would be lost at the end)
            state = WatchState.open(Path(o.state_path)) if o.state_path else WatchState()
        except StateError as e:
            say(str(e))
            return ExitCode.BAD_INPUT
        deciders = list(self.deciders)
        watchdog = None
        if policy is not None:
            from watcher.act.watchdog import Watchdog

            watchdog = Watchdog(policy, dry_run=o.dry_run, poll=o.poll,
                                max_actions=o.act_max, max_per_task=o.act_max_task,
                                state=state)
            deciders.append(watchdog)
        self.watchdog = watchdog
        if o.release_when_done:
            from watcher.sessions import ReleaseWhenDone

            self.releaser = ReleaseWhenDone()
            deciders.append(self.releaser)
        try:
            alerts = _alerts(o)  # before any output is opened: nothing is left behind
            if alerts is None:
                return ExitCode.BAD_INPUT
            try:
                reporters = _reporters(o)
            except OSError as e:
                say(f"cannot write {o.output}: {e.strerror or e}")
                return ExitCode.BAD_INPUT
            return self._watch(engine, state, reporters, alerts, deciders, watchdog)
        finally:
            state.close()

    def _watch(self, engine: Engine, state: WatchState, reporters: list[Reporter],
               alerts: list[AlertSink], deciders: list[Decider],
               watchdog: Any = None) -> ExitCode:
        o = self.options
        config = WatchConfig(**config_kwargs(o))
        sinks: list[Sink] = [*reporters, *self.extra, self.latest]
        with self._lock:
            watch = self.watch = Watch(engine, config, state, sinks, alerts=alerts,
                                       deciders=deciders,
                                       handoff=watchdog.handoff if watchdog else None)
            if self._stop:
                watch.request_stop()
        if self.releaser is not None:
            self.releaser.watch = watch
        if watchdog is not None:
            router = watch.router
            router.actions = watchdog.actions

            def save() -> bool:  # what it acts on is saved before the request goes out
                router.save()
                return router.state_error is None

            watchdog.save = save
        context = ReportContext(
            started_at=watch.started_at,
            sources=(o.log_dir,) if o.log_dir else tuple(o.replay) or ("live",),
            log_dirs=(o.log_dir,) if o.log_dir else (),
            rules=tuple(r.id for r in engine.rules), version=__version__,
            acting=("dry-run" if o.dry_run else "act") if o.act else "",
            scope=scope_words(o))
        try:
            for sink in [*sinks, *alerts]:
                sink.start(context)
        except OutputError as e:
            say(str(e))
            return ExitCode.BAD_INPUT
        except OSError as e:  # checked before; the path changed since
            say(f"cannot write {o.output}: {e.strerror or e}")
            return ExitCode.BAD_INPUT
        result = watch.run()
        summary = watch.summary()
        for sink in watch.router.sinks:  # less any whose reader went away during the watch
            sink.stop(summary)
        if result.output_closed:
            _quiet_closed_stdout()
        if result.write_error:
            say(f"cannot write findings ({result.write_error}); the watch stopped and saved "
                "its state: the next run with the same --state reports what was not written")
        if result.state_error:
            say(f"cannot save the state file {result.state_error}; the watch stopped: what "
                "it could not remember it did not report, and the next run with a state it "
                "can save reports it")
        # findings that did not reach a remote --output (kept locally; the reporter said where)
        lost = any(r.lost for r in reporters)
        code = result.exit_code or (ExitCode.SOURCE if lost else ExitCode.OK)
        for path, name in ((o.summary_md, "markdown"), (o.summary_html, "html")):
            if not path:
                continue
            try:
                rep = get_reporter(name, "report").open(path, OutputOptions())
                rep.start(context)
                rep.stop(summary)
            except OSError as e:  # checked at the start; the disk or directory changed since
                say(f"could not write the report {path}: {e.strerror or e}")
                code = code or ExitCode.SOURCE
        return code


def _reporters(o: WatchOptions) -> list[Reporter]:
    if o.format is None:
        return []
    options = OutputOptions(quiet=o.quiet, color=False if o.no_color else None,
                            min_confidence=o.min_confidence, full_evidence=o.full_evidence,
                            verbose=o.verbose)
    return [get_reporter(o.format, "watch").open(o.output, options)]


def _alerts(o: WatchOptions) -> list[AlertSink] | None:
    """The ``--notify`` and ``--on-finding`` sinks; ``None`` (said why) if one cannot
    work."""
    alerts: list[AlertSink] = []
    if o.notify:
        from watcher.notify import Notifier, NotifyError

        try:
            alerts.append(Notifier(o.notify, min_confidence=o.notify_min_confidence,
                                   per_minute=o.notify_rate, queue_size=o.alert_queue))
        except NotifyError as e:
            say(str(e))
            return None
    if o.on_finding:
        from watcher.hooks import CommandHook

        alerts.append(CommandHook(o.on_finding, timeout=o.on_finding_timeout,
                                  queue_size=o.alert_queue))
    return alerts


def _quiet_closed_stdout() -> None:
    """Point a stdout whose reader has gone at /dev/null: what is still buffered for it
    can never arrive, and Python's flush at exit would print a BrokenPipeError."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
