"""Running a sweep's schedule from system cron: the crontab lines for `schedule tick`, with
the AWS settings cron's bare environment would lose, and cron's escaping of the command.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.errors import InputError
from orchestrator.paths import home, home_folder
from orchestrator.schedule.cron import require_schedule
from orchestrator.spec.cron_syntax import ALIASES

if TYPE_CHECKING:
    from orchestrator.spec import SweepSpec


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
    # An @alias (@yearly, @hourly...) is a word, not fields: its letters are no L; cronie and
    # Vixie cron read the aliases themselves (crontab(5), "@yearly ... 0 0 1 1 *").
    fields = "" if expr.lower() in ALIASES else expr.upper().replace("JUL", "")
    extended = [token for token in ("L", "?", "#") if token in fields]
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
    """Create the folder the crontab entry logs to; InputError naming it when that fails
    (`paths.home_folder`)."""
    return home_folder("schedules")
