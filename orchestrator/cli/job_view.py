"""One job as the terminal shows it: its status lines (`status`, and the end of `submit --wait`),
its status shown live until it ends (`submit --wait`), and its log (`logs`, `logs -f`).

Not `orchestrator.follow`, which polls a job until it ends and prints nothing: `wait` shows what
it reports; `logs -f` reads the backend's log stream (`Backend.logs(follow=True)`), not it.
"""

from __future__ import annotations

import typer

from orchestrator.cli.output import err, out, plain
from orchestrator.errors import JobFailed


def status_lines(st, here: bool = False) -> list[str]:
    """A job's status as `status` and `submit --wait` print it. A local job's instance line
    says what it runs on (this machine's CPU, as `results` does), and the spec's type it stands
    for."""
    lines = [f"job       {st.job_name}",
             f"status    {st.status}" + (f" ({st.secondary})" if st.secondary else "")]
    if st.failure_reason:
        lines.append(f"failure   {st.failure_reason}")
    if st.billable_seconds is not None:
        savings = f" (spot saved {st.spot_savings:.0%})" if st.spot_savings is not None else ""
        lines.append(f"billable  {st.billable_seconds} s{savings}")
    if st.instance_type and here:  # a job of this machine: its CPU stands in for the instance
        from orchestrator.results.rows import LOCAL_INSTANCE

        lines.append(f"instance  {LOCAL_INSTANCE} (standing in for {st.instance_type} x{st.instance_count or 1})")
    elif st.instance_type:
        lines.append(f"instance  {st.instance_type} x{st.instance_count or 1}{' spot' if st.spot else ''}")
    if st.warm_pool:
        kept = f", kept {st.warm_pool_retained_s} s (billed)" if st.warm_pool_retained_s is not None else ""
        reused = f", reused by {st.warm_pool_reused_by}" if st.warm_pool_reused_by else ""
        lines.append(f"warm pool {st.warm_pool}{kept}{reused}")
    if st.output_uri:
        lines.append(f"output    {st.output_uri}")
    return lines


def _clock_text(elapsed: float) -> str:
    seconds = int(elapsed)
    return f"{seconds // 60:d}m{seconds % 60:02d}s"


class _Ticking:
    """The status line's text and the time since the wait began, read at each refresh of the
    line (rich redraws it several times a second), so the clock moves while the status does not."""

    def __init__(self, text: str, clock) -> None:
        self.text = text
        self.clock = clock
        self.start = clock()

    def __rich__(self):
        elapsed = int(self.clock() - self.start)
        return plain(f"{self.text}  {elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}")


def wait(backend, job_name: str, interval: float, reattach: str | None = None, *, sleep=None, clock=None,
         interactive: bool | None = None):
    """Follow the job until it ends (`orchestrator.follow.follow`), showing status, secondary status and
    elapsed time; through network outages (it says so, and keeps waiting); with a heartbeat
    line every `follow.heartbeat_seconds()` when stderr is not a terminal. Raise JobFailed
    when the job failed or stopped. `reattach` is the command that follows the job again."""
    import time

    from rich.console import Console

    from orchestrator.follow import follow, heartbeat_seconds

    console = Console(stderr=True, highlight=False)
    interactive = console.is_terminal if interactive is None else interactive
    heartbeat = None if interactive else heartbeat_seconds()
    again = reattach or f"python -m orchestrator status {job_name}"

    def text_of(st) -> str:
        return f"{job_name}: {st.status}" + (f" ({st.secondary})" if st.secondary else "")

    runs_in = backend.runs_in
    ticking = _Ticking(f"{job_name}: waiting", clock or time.monotonic)
    try:
        with console.status(ticking):
            def on_status(st, elapsed: float, why: str) -> None:
                ticking.text = text_of(st)
                still = "; still waiting" if why == "heartbeat" else ""
                console.print(f"[{_clock_text(elapsed)}] {text_of(st)}{still}", markup=False, soft_wrap=True)

            def on_transient(message: str, elapsed: float, retry_in: float) -> None:
                console.print(f"[{_clock_text(elapsed)}] {job_name}: status unknown: {message}. The job keeps running "
                              f"{runs_in}; still waiting, next try in {retry_in:.0f} s (Ctrl-C stops waiting; "
                              f"`{again}` follows it again)", markup=False, soft_wrap=True)

            st = follow(lambda: backend.status(job_name), interval=interval, on_status=on_status,
                        on_transient=on_transient, heartbeat_s=heartbeat,
                        sleep=sleep or time.sleep, clock=clock or time.monotonic)
    except KeyboardInterrupt:
        # Ctrl-C ends the waiting, not the job: say so, and how to get back to it.
        err(f"stopped waiting; {job_name} keeps running. `python -m orchestrator status {job_name}` shows it, "
            f"`python -m orchestrator stop {job_name}` stops it")
        raise typer.Exit(code=130) from None
    for text in status_lines(st, here=not backend.cloud):
        out(text)
    if st.status != "completed":
        reason = f": {st.failure_reason}" if st.failure_reason else ""
        raise JobFailed(f"job {job_name} {st.status}{reason}",
                        hint=f"`python -m orchestrator logs {job_name}` shows its output")
    return st


def print_logs(backend, job: str, follow: bool) -> None:
    """The job's log lines on stdout, notes on stderr (see the `logs` command). A local job
    whose status file is damaged still has its log: it is shown as it is, after a warning
    (its state, and so whether more is to come, is unknown: -f does not wait)."""
    from orchestrator.backends import DamagedStatus

    try:
        _print_logs(backend, job, follow)
    except DamagedStatus as exc:
        path = _regular_file(exc.log)
        if path is None:
            raise
        err(f"warning: {exc.message}; its log {path} is shown as it is" + (
            " (its state is unknown, so -f does not wait for more)" if follow else ""))
        with open(path, "rb") as handle:
            for line in handle:
                out(line.decode("utf-8", "replace").rstrip("\n"))


def _regular_file(path):
    """`path` (a damaged job's log, `DamagedStatus.log`) when it is there as a regular file;
    else None."""
    import stat

    if path is None:
        return None
    try:
        # lstat: never follow a link, never open a FIFO (it would block).
        return path if stat.S_ISREG(path.lstat().st_mode) else None
    except OSError:
        return None


def _print_logs(backend, job: str, follow: bool) -> None:
    noted = None
    if follow:
        # Following a job that has not logged yet can be silent for minutes: say why up front.
        st = backend.status(job)
        if not st.terminal and not backend.has_logs(job):
            noted = st.status
            err(_no_logs_note(backend, job, st) + "; waiting for them (Ctrl-C stops)")
    shown = 0
    try:
        for text in backend.logs(job, follow=follow):
            out(text)
            shown += 1
    except KeyboardInterrupt:
        raise typer.Exit(code=130) from None
    st = backend.status(job) if follow or not shown else None
    if not shown and st.status != noted:
        err(_no_logs_note(backend, job, st))
    elif follow and shown:
        # The stream ends when the job does: say how it ended (a failure is otherwise silent).
        err(f"{job} ended: {st.status}" + (f": {st.failure_reason}" if st.failure_reason else ""))


def _no_logs_note(backend, job: str, st) -> str:
    yet = "" if st.terminal else " yet"
    state = st.status + (f": {st.failure_reason}" if st.failure_reason else "")
    return f"note: {backend.no_logs(job)}{yet} (the job is {state})"
