"""Cron schedules for sweeps, kept from a laptop (`schedule run`) or from system cron (`schedule tick`).

Contract:
- The spec's `schedule.cron` (five fields or an @alias, read in `schedule.timezone`) names
  the ticks. A tick at time T runs the sweep as a sweep of its own, id
  `<sweep>-<8 hex>-<YYYYMMDDHHMM>` (T in UTC, minute resolution), so its job names depend
  only on the sweep's content and T. A tick is therefore submitted at most once: a restart
  finds the tick's rows in the ledger, and a second machine's CreateTrainingJob for the same
  name is answered ResourceInUse, which the backend reconciles instead of retrying under a
  new name.
- Bookkeeping lives in the ledger's kv table under `schedule:<sweep>-<8 hex>`: the last tick
  handled, when the schedule was first evaluated, and the tick sweeps not yet finished. It
  is written after a tick's sweep is saved, so a crash in between re-plans the same tick
  (same ids, nothing twice).
- A schedule does not owe ticks from before it existed. Its first evaluation ever records
  that moment (`since`) and owes only the tick due then: the most recent tick within
  ON_TIME_SECONDS (cron starts `schedule tick` a little after the minute), whatever
  `catchup` says; earlier ticks are neither submitted nor reported as skipped. Later
  evaluations look at the ticks after the last one handled (or, if none was ever due, after
  `since`).
- Missed ticks (the machine slept or was off): `catchup: latest` submits the most recent
  one, `all` each of them (at most `max_catchup`, the most recent), `none` only a tick
  evaluated within ON_TIME_SECONDS of its time; the others are reported as skipped.
- `evaluate()` is one pass (what `schedule tick` runs): submit due ticks, then advance every
  unfinished tick sweep by one runner step. `run()` repeats it, sleeping in slices of at
  most a minute so that a laptop waking from sleep notices missed ticks at once.
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from orchestrator import sweep as sweeps
from orchestrator.backends import Backend
from orchestrator.errors import InputError
from orchestrator.ledger import Ledger
from orchestrator.paths import home
from orchestrator.spec import ScheduleSpec, SweepSpec

ON_TIME_SECONDS = 300
MAX_SLEEP_SECONDS = 60.0
# Walking back through missed ticks stops here (a per-minute cron after a month away).
MAX_SCAN = 100_000
KEEP_HISTORY = 50


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, timezone.utc)


def _iter(schedule: ScheduleSpec, start: datetime):
    from zoneinfo import ZoneInfo

    from croniter import croniter

    return croniter(schedule.cron.strip(), start.astimezone(ZoneInfo(schedule.timezone)))


_ALIASES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
            "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}


def _at_set_times(schedule: ScheduleSpec) -> bool:
    """Whether the schedule fires at set times of day, as cron tells them from the others: its
    minute and hour fields do not start with `*` (cronie's MIN_STAR and HR_STAR flags)."""
    expr = schedule.cron.strip()
    fields = _ALIASES.get(expr.lower(), expr).split()
    return len(fields) >= 2 and not fields[0].startswith("*") and not fields[1].startswith("*")


def _repeated_wall_time(tick: datetime, zone) -> bool:
    """Whether `tick` is the second time its local wall-clock time happens that night: in the
    hour clocks go back (fall), a time such as 01:30 comes twice, an hour apart."""
    local = tick.astimezone(zone)
    wall = local.replace(tzinfo=None)
    first = wall.replace(fold=0, tzinfo=zone).utcoffset()
    second = wall.replace(fold=1, tzinfo=zone).utcoffset()
    # In a fold the first offset is the larger (summer time); in a gap (spring) the smaller.
    return first is not None and second is not None and first > second and local.utcoffset() == second


def _fires(schedule: ScheduleSpec, tick: datetime) -> bool:
    """Whether cron runs the schedule at `tick`, one of croniter's times. A schedule at set
    times of day fires once on the night clocks go back, at the first of the two identical
    local times, as cron does (cron(8): "if time was adjusted backward, running the same job
    twice is avoided"; cronie src/cron.c runs only the wildcard jobs in the repeated hour).
    Schedules with `*` in the minute or hour field run by the clock through both hours. In
    spring croniter moves a time the skipped hour holds (02:30) to the first that exists
    (03:00), which is cron's catch-up of a skipped job; that is kept as it is."""
    from zoneinfo import ZoneInfo

    return not (_at_set_times(schedule) and _repeated_wall_time(tick, ZoneInfo(schedule.timezone)))


def next_fires(schedule: ScheduleSpec, now: datetime, count: int) -> list[datetime]:
    """The next `count` tick times strictly after `now`, in UTC."""
    it = _iter(schedule, now)
    found: list[datetime] = []
    while len(found) < count:
        tick = it.get_next(datetime).astimezone(timezone.utc)
        if _fires(schedule, tick):
            found.append(tick)
    return found


def ticks_between(schedule: ScheduleSpec, after: datetime, until: datetime) -> tuple[list[datetime], bool]:
    """Tick times in (after, until], oldest first, and whether the scan hit MAX_SCAN."""
    it = _iter(schedule, until + timedelta(seconds=1))
    found: list[datetime] = []
    while len(found) < MAX_SCAN:
        tick = it.get_prev(datetime).astimezone(timezone.utc)
        if tick <= after or tick > until:
            if tick <= after:
                return found[::-1], False
            continue
        if _fires(schedule, tick):
            found.append(tick)
    return found[::-1], True


@dataclass(frozen=True)
class Due:
    """What one evaluation found: ticks to submit now (oldest first), ticks passed over."""

    submit: list[datetime]
    skipped: list[datetime]
    newest: datetime | None
    truncated: bool = False


def due(schedule: ScheduleSpec, now: datetime, last: datetime | None, since: datetime | None = None) -> Due:
    """Apply the catchup policy to the ticks after `last`, the last tick handled (see the
    module docstring). With no `last`: after `since`, when the schedule was first evaluated;
    with neither, this is that first evaluation, which owes only the tick due now."""
    first = last is None and since is None
    if last is not None:
        after = last
    elif since is not None:
        after = since
    else:
        after = now - timedelta(seconds=ON_TIME_SECONDS)
    ticks, truncated = ticks_between(schedule, after, now)
    if not ticks:
        return Due([], [], None, truncated)
    newest = ticks[-1]
    on_time = [t for t in ticks if (now - t).total_seconds() <= ON_TIME_SECONDS]
    if first:
        # Every tick found is within ON_TIME_SECONDS; only the newest is due now, the others
        # are from before the schedule existed: not owed, not missed.
        return Due([newest], [], newest, truncated)
    if schedule.catchup == "latest":
        chosen = [newest]
    elif schedule.catchup == "all":
        chosen = ticks[-schedule.max_catchup:]
    else:
        chosen = on_time[-1:]
    return Due(chosen, [t for t in ticks if t not in chosen], newest, truncated)


@dataclass
class TickReport:
    now: datetime
    planned: list[str] = field(default_factory=list)  # sweep ids of ticks submitted in this pass
    skipped: list[datetime] = field(default_factory=list)
    progress: list[sweeps.Progress] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)  # tick sweeps another process is running
    next_fire: datetime | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def active(self) -> int:
        return sum(1 for p in self.progress if not p.done)


def schedule_key(sweep: SweepSpec) -> str:
    return f"schedule:{sweeps.identify(sweep).sweep_id}"


class Scheduler:
    """Keeps one sweep's schedule. See the module docstring.

    `backend` serves every tick sweep (one backend and region per sweep); `clock` and
    `sleep` are injectable so tests drive time; `runner_options` go to each `sweeps.Runner`.
    """

    def __init__(self, sweep: SweepSpec, backend: Backend, ledger: Ledger, *,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                 runner_options: dict | None = None, on_report: Callable[[TickReport], None] | None = None):
        require_schedule(sweep)
        self.sweep = sweep
        self.schedule = sweep.schedule
        self.backend = backend
        self.ledger = ledger
        self.clock = clock
        self.sleep = sleep
        self.runner_options = dict(runner_options or {})
        self.on_report = on_report
        self.key = schedule_key(sweep)
        # What the scheduler is at, in words, for a user who interrupts it.
        self.doing = "starting"

    def state(self) -> dict:
        value = self.ledger.get_value(self.key)
        return value if isinstance(value, dict) else {}

    def unfinished(self) -> list[str]:
        """The tick sweeps the schedule still follows (from the ledger)."""
        return [str(sweep_id) for sweep_id in self.state().get("active", [])]

    def _runner(self, sweep_id: str) -> sweeps.Runner:
        definition = sweeps.load_definition(self.ledger, sweep_id)
        return sweeps.Runner(definition, self.backend, self.ledger, clock=self.clock, sleep=self.sleep,
                             **self.runner_options)

    def evaluate(self) -> TickReport:
        """One pass: submit due ticks, advance unfinished tick sweeps (see the module docstring)."""
        now = _utc(self.clock())
        report = TickReport(now)
        state = self.state()
        last = datetime.fromisoformat(state["last"]) if state.get("last") else None
        since = datetime.fromisoformat(state["since"]) if state.get("since") else None
        # `since` is written with the first tick's bookkeeping (below), not before: a crash in
        # between makes the next evaluation a first one again, which finds the same tick.
        found = due(self.schedule, now, last, since)
        if found.truncated:
            report.notes.append(f"more than {MAX_SCAN} ticks were missed; only the most recent were considered")
        report.skipped = found.skipped
        active = list(state.get("active", []))
        history = list(state.get("ticks", []))
        for tick in found.submit:
            self.doing = f"submitting the tick of {tick:%Y-%m-%d %H:%M} UTC"
            planned = sweeps.plan(self.sweep, tick=tick)
            sweeps.check_budget(planned)
            sweep_id = planned.sweep_id
            try:
                sweeps.save(planned, self.ledger)
                report.planned.append(sweep_id)
            except sweeps.RunnerBusy:
                # A runner of this machine already runs this very tick (saved before; this
                # bookkeeping was lost): it is not planned twice, and shows as busy below.
                pass
            if sweep_id not in active:
                active.append(sweep_id)
            if sweep_id not in history:
                history.append(sweep_id)
            state.update(last=tick.isoformat(), active=active, ticks=history[-KEEP_HISTORY:])
            state.setdefault("since", now.isoformat())
            self.ledger.put_value(self.key, state)
        if found.newest is not None and (last is None or found.newest > last):
            state["last"] = found.newest.isoformat()
        state.setdefault("since", now.isoformat())
        self.ledger.put_value(self.key, state)
        still = []
        for sweep_id in active:
            self.doing = f"following tick sweep {sweep_id}"
            try:
                with sweeps.runner_lock(sweep_id):
                    progress = self._runner(sweep_id).step()
            except sweeps.RunnerBusy:
                report.busy.append(sweep_id)
                still.append(sweep_id)
                continue
            report.progress.append(progress)
            if not progress.done and not progress.stopped:
                still.append(sweep_id)
        state = {**self.state(), "active": still}
        self.ledger.put_value(self.key, state)
        report.next_fire = next_fires(self.schedule, now, 1)[0]
        return report

    def run(self, *, poll_seconds: float = 30.0, max_passes: int | None = None) -> None:
        """Evaluate, then sleep until the next tick (or the next poll while tick sweeps are
        unfinished), in slices of at most MAX_SLEEP_SECONDS; repeat."""
        passes = 0
        while True:
            report = self.evaluate()
            passes += 1
            target = report.next_fire.timestamp()
            if report.active or report.busy:
                target = min(target, self.clock() + poll_seconds)
                self.doing = f"waiting to poll {report.active + len(report.busy)} unfinished tick sweep(s)"
            else:
                self.doing = f"sleeping until the next tick, {report.next_fire:%Y-%m-%d %H:%M} UTC"
            if self.on_report:
                self.on_report(report)
            if max_passes is not None and passes >= max_passes:
                return
            while True:
                remaining = target - self.clock()
                if remaining <= 0:
                    break
                self.sleep(min(remaining, MAX_SLEEP_SECONDS))


def require_schedule(sweep: SweepSpec) -> ScheduleSpec:
    """The sweep's schedule; InputError located at the sweep's file when it has none."""
    if sweep.schedule is None:
        file, line, _ = sweep.locate()
        where = f"{file}:{line}: " if file and line else (f"{file}: " if file else "")
        raise InputError(f"{where}sweep {sweep.sweep} has no schedule",
                         hint="add e.g. `schedule: {cron: \"0 3 * * *\", catchup: latest}`")
    return sweep.schedule


def package_root() -> Path:
    """The folder that holds the `orchestrator` package (what PYTHONPATH must name)."""
    import orchestrator

    return Path(orchestrator.__file__).resolve().parents[1]


# The AWS settings a crontab entry carries over from the shell that printed it: cron runs with
# a bare environment, where a named or SSO profile (and its region) would be lost.
AWS_SETTINGS = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE")


def aws_settings(environ=None) -> tuple[dict[str, str], list[str]]:
    """(variables, notes) for a crontab entry: the AWS profile and config files in use (from
    `environ`, default os.environ) and the region every command of the tool would use now
    (`default_region`), as AWS_REGION; notes for what cannot go into a crontab (credentials
    in environment variables) or needs the user (an SSO profile's login)."""
    import os

    from orchestrator.region import default_region, profile_region

    environ = os.environ if environ is None else environ
    found = {name: environ[name] for name in AWS_SETTINGS if environ.get(name)}
    found["AWS_REGION"] = default_region()
    notes = []
    if environ.get("AWS_ACCESS_KEY_ID"):
        notes.append("credentials from AWS_ACCESS_KEY_ID are not written into crontab: give cron a profile "
                     "(AWS_PROFILE) instead")
    try:
        import botocore.session

        config = botocore.session.Session().get_scoped_config()
    except Exception:  # noqa: BLE001 - default_region above has reported an unreadable config
        config = {}
    if config.get("sso_session") or config.get("sso_start_url"):
        notes.append(f"the profile {profile_region()[1]} uses SSO: each tick works only while its `aws sso login` "
                     "session is valid")
    return found, notes


def crontab_line(sweep: SweepSpec, *, project: Path | None = None, python: str | None = None,
                 orchestrator_home: Path | None = None, environ=None) -> str:
    """The crontab lines that run `schedule tick` on the spec's cron: a comment, a `CRON_TZ=<zone>`
    line, and the entry.

    The entry works from any working directory and any cron environment: it cds to and puts on
    PYTHONPATH `project` (default: the folder that holds this `orchestrator` package, not the
    current directory), and names the interpreter (default: sys.executable, not resolved, so a
    virtual environment's python stays itself), the spec and ORCHESTRATOR_HOME by absolute
    path, each shell-quoted. It sets the AWS profile, config files and region in use
    (`aws_settings`), which cron's bare environment would otherwise lose.

    Time zone: cron reads the five fields in its own zone, `schedule tick` decides what is due in
    `schedule.timezone`. `CRON_TZ=<zone>` makes them agree on crons that honour it (cronie, as on
    Fedora/RHEL/Arch, and systemd-cron); it is emitted for UTC too, since the machine may not run
    in UTC. In cronie it applies to every entry below it in the crontab, which the comment says.
    Crons that ignore it (Debian's and Ubuntu's cron, busybox) fire in the machine's zone:
    there, set the machine's zone to the schedule's, or use `schedule run`; otherwise ticks are
    submitted late (catchup latest/all) or not at all (catchup none). Converting the expression
    to the machine's zone instead is not possible in general (DST shifts, day boundaries).
    """
    require_schedule(sweep)
    if sweep.path is None:
        raise InputError(f"sweep {sweep.sweep} was not loaded from a file: cron needs its path",
                         hint="load it with orchestrator.spec.load_sweep(PATH), as `python -m orchestrator schedule crontab "
                              "SWEEP.yaml` does")
    project = (project or package_root()).resolve()
    python = python or sys.executable
    orch_home = (orchestrator_home or home()).resolve()
    logs = orch_home / "schedules"
    log = logs / f"{sweep.sweep}.log"
    expr = sweep.schedule.cron.strip()
    # croniter (schedule run / tick) reads L, ? and #; cronie, Vixie cron and busybox do not,
    # and crontab would refuse the whole file.
    extended = [token for token in ("L", "?", "#") if token in expr.upper().replace("JUL", "")]
    if extended:
        file, line, _ = sweep.locate("schedule", "cron")
        where = f"{file}:{line}: " if file and line else ""
        raise InputError(f"{where}schedule.cron {expr!r} uses {', '.join(extended)}, which system cron does not "
                         "understand", hint="use `python -m orchestrator schedule run` for this schedule (it reads them), or "
                         "write the cron with plain fields")
    aws, notes = aws_settings(environ)
    settings = "".join(f"{name}={shlex.quote(value)} " for name, value in aws.items())
    command = (f"cd {shlex.quote(str(project))} && ORCHESTRATOR_HOME={shlex.quote(str(orch_home))} "
               f"PYTHONPATH={shlex.quote(str(project))} {settings}{shlex.quote(str(Path(python).absolute()))} "
               f"-m orchestrator schedule tick {shlex.quote(str(sweep.path.resolve()))} "
               f">> {shlex.quote(str(log))} 2>&1")
    zone = sweep.schedule.timezone
    comment = (f"# orchestrator: sweep {sweep.sweep}, cron {expr!r} in {zone}. CRON_TZ makes cronie and "
               f"systemd-cron read it in {zone} (and every entry below it); other crons (Debian's, busybox) "
               f"read it in the machine's zone. Log: {log}" + "".join(f". Note: {n}" for n in notes))
    return f"{comment}\nCRON_TZ={zone}\n{expr} {cron_command(command)}"


def cron_command(command: str) -> str:
    """Shell text `command` as the command field of a crontab entry, so that cron hands the
    shell exactly `command`.

    crontab(5): the command runs up to a newline or an unescaped `%`; each later `%` becomes a
    newline of the command's stdin, and `\\%` stands for a `%`. cron reads a backslash as
    escaping the character after it, and drops the backslash only before a `%` (cronie
    src/do_command.c, as in Vixie cron): so `%` becomes `\\%`, and where the shell text has a
    backslash right before a `%` (inside single quotes, as `shlex.quote` puts every word with
    a backslash), an empty `''` goes between them, which the shell drops. A newline (or a
    carriage return) cannot be in an entry at all: InputError naming it."""
    for char, name in (("\n", "a newline"), ("\r", "a carriage return")):
        if char in command:
            raise InputError(f"the crontab entry would contain {name} (in a path it names), which ends a crontab "
                             "line: cron cannot run it", hint="rename or move the file or folder whose name holds it "
                             "(the sweep file, ORCHESTRATOR_HOME, the project or the Python interpreter), or use "
                             "`python -m orchestrator schedule run`")
    out: list[str] = []
    for char in command:
        if char == "%":
            if out and out[-1].endswith("\\"):
                out.append("''")  # keeps the user's backslash from swallowing our escape
            out.append("\\%")
        else:
            out.append(char)
    return "".join(out)


def ensure_log_dir() -> Path:
    """Create the folder the crontab entry logs to; InputError naming it when that fails."""
    path = home() / "schedules"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        from orchestrator.paths import write_hint

        raise InputError(f"cannot create the schedule log folder {path}: {exc.strerror or exc}",
                         hint=write_hint(exc, "set ORCHESTRATOR_HOME to a folder you can write to")) from None
    return path
