"""Collecting results: every job's results.json under a prefix, joined with what its backend
says of it and the catalog's price, in parallel.

Contract:
- `collect(prefix, ...)` -> `Collection`. It needs no ledger: everything comes from the store
  and from the jobs' backends, so it works from a machine that never submitted the jobs.
- No job is silently dropped. A results object that is missing, truncated (not JSON) or of an
  unknown schema becomes a row with status "missing" or "unreadable" and a note; on S3, a job
  without one that the default cloud backend knows gets that backend's status and failure
  reason instead of "missing" (a capacity error, a stop, a job still starting). A job whose
  object or status cannot be read (botocore has retried throttling, 5xx and dropped
  connections by then) is a row with status "error" and the error as its note. The one
  exception is a `job` filter naming a job with no results object: that is an InputError
  saying where it looked (the user pointed at the wrong prefix or mistyped the name), not a
  table of one "missing" row.
- Jobs of a `cloud` backend are described through that backend (`Backend.describe`: status,
  billable and training seconds, managed spot) in their results' region; nothing else is
  asked of a backend, except with `sweep` on S3: the sweep's jobs are listed
  (`Backend.job_names`) and read in bulk (`Backend.describe_all`: SageMaker's Search, 100 jobs
  a call), and a job that bulk read shows ended is not described again. A job it misses or
  shows in flight is described on its own, and so is every job when the bulk read fails.
- The `sweep` filter takes a sweep id, a sweep name or a schedule's untimed id (`rows.in_sweep`;
  listed folders with no readable results, and on S3 the cloud backends' jobs of the sweep with
  no results yet, are matched by name). A filter that matches nothing is an InputError whose
  hint lists the sweep ids tagged under the prefix.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace

from entrypoints.shared.results_schema import Results
from orchestrator import catalog, names
from orchestrator.backends import registry
from orchestrator.backends.job import JobStatus
from orchestrator.backends.running import Backend
from orchestrator.errors import BackendError, InputError, OrchestratorError
from orchestrator.names import TAG_SWEEP
from orchestrator.results.read import (
    RESULTS_DIR,
    RESULTS_FILE,
    ResultsPrefix,
    UnreadableResults,
    check_prefix,
    parse,
)
from orchestrator.results.rows import (
    ERROR,
    MISSING,
    UNREADABLE,
    Collection,
    Row,
    build_row,
    in_sweep,
    is_cloud,
    rank,
)

DEFAULT_WORKERS = 16


def _reason(exc: BaseException) -> str:
    """One line for a failed read or call: the service's code and message."""
    from botocore.exceptions import ClientError

    from orchestrator import aws

    if isinstance(exc, OrchestratorError):
        code = getattr(exc, "code", None)
        return f"{code}: {exc.message}" if code and code not in exc.message else exc.message
    cause = exc.__cause__ if exc.__cause__ is not None else exc  # a StorageError says what it read
    silent = aws.describe(cause)
    if silent is not None:
        return f"{silent}; {aws.tries_said(cause)}"
    if isinstance(cause, ClientError):
        error = cause.response.get("Error", {})
        return f"{error.get('Code', 'error')}: {error.get('Message', '')}".rstrip(": ")
    return f"{type(exc).__name__}: {exc}"


class _CommandError(Exception):
    """Carries an InputError about the whole command (its AWS config) out of one job's row."""

    def __init__(self, error: InputError):
        super().__init__(error.message)
        self.error = error


class _Collector:
    def __init__(self, store: ResultsPrefix, *, region: str | None, backend_for: Callable[[str, str], Backend],
                 workers: int):
        self.store = store
        self.region = region
        self.workers = workers
        self._backend_for = backend_for
        self._here: dict[str, Backend] = {}
        self._backends: dict[tuple[str, str], Backend] = {}
        self._lock = threading.Lock()
        self._default_region: str | None = None
        self._prices: dict[tuple[str, str], catalog.Price | None] = {}
        self.sweeps_seen: set[str] = set()  # sweep tags read, for the hint of a filter that matches none
        self.listed_by: dict[str, str] = {}  # job -> the cloud backend that listed it (`_listed_jobs`)
        # (backend, region, job) -> an ended job as the backend's bulk read told it (`_listed_jobs`)
        self.ended: dict[tuple[str, str, str], JobStatus] = {}

    def backend(self, name: str, region: str) -> Backend:
        """The backend `name` in `region`, built once (its clients are shared by the threads)."""
        with self._lock:
            key = (name, region)
            if key not in self._backends:
                self._backends[key] = self._backend_for(name, region)
            return self._backends[key]

    def jobs_here(self, name: str) -> Backend:
        """The backend `name` of this machine's jobs (not a cloud one: files only, no AWS), made
        once."""
        with self._lock:
            if name not in self._here:
                self._here[name] = registry.create(name)
            return self._here[name]

    def job_region(self, results: Results) -> str:
        """The results' region, else the command's region rule (`region.default_region`),
        resolved once and only when a cloud job's results object names none (a local job's
        needs no AWS configuration). An AWS config that rule cannot read is the command's
        error, not one job's."""
        if results.region:
            return results.region
        if not is_cloud(results.backend):
            return "us-east-1"  # a local row is priced as "local": no AWS config to read for it
        return self.command_region()

    def command_region(self) -> str:
        """The command's region rule (--region, AWS_REGION, ..., us-east-1), resolved once: for
        jobs whose results name no region or are missing."""
        with self._lock:
            if self._default_region is None:
                from orchestrator.region import default_region

                try:
                    self._default_region = default_region(self.region)
                except InputError as exc:
                    raise _CommandError(exc) from None
            return self._default_region

    def price(self, type_: str, region: str) -> catalog.Price | None:
        key = (type_, region)
        if key not in self._prices:
            try:
                self._prices[key] = catalog.price(type_, region)
            except InputError as exc:  # a damaged prices file: the command's error, not one row's
                raise _CommandError(exc) from None
        return self._prices[key]

    def describe(self, job: str, name: str, region: str) -> tuple[JobStatus | None, str | None]:
        """What backend `name` in `region` says of `job`, or (None, why) when it has no such
        job. Errors propagate. A job the bulk read showed ended is not asked again."""
        known = self.ended.get((name, region, job))
        if known is not None:
            return known, None
        backend = self.backend(name, region)
        described = backend.describe(job)
        return described, None if described is not None else f"no job {job} in {backend.place}"

    def row(self, job: str, sweep: str | None) -> Row | None:
        """The row of one job; None when the sweep filter excludes it."""
        uri = self.store.uri(job)
        try:
            data = self.store.get(job)
        except UnreadableResults as exc:
            return Row(job=job, status=UNREADABLE, note=str(exc), uri=uri) if names.in_sweep(job, sweep) else None
        except Exception as exc:
            if not names.in_sweep(job, sweep):
                return None
            return Row(job=job, status=ERROR, note=f"reading results failed: {_reason(exc)}", uri=uri)
        if data is None:
            if not names.in_sweep(job, sweep):
                return None
            return self.missing_row(job, uri)
        try:
            results = parse(data)
        except UnreadableResults as exc:
            if not names.in_sweep(job, sweep):
                return None
            return Row(job=job, status=UNREADABLE, note=str(exc), uri=uri)
        tagged = results.tags.get(TAG_SWEEP)
        if tagged is not None:
            with self._lock:
                self.sweeps_seen.add(tagged)
        if sweep is not None and not in_sweep(job, results.tags, sweep):
            return None
        note = None if results.job_name == job else f"results name {results.job_name!r} differs"
        region = self.job_region(results)
        described = None
        if is_cloud(results.backend):
            try:
                described, why = self.describe(job, results.backend or registry.DEFAULT, region)
            except Exception as exc:
                base = build_row(job, results, uri, None, self.price(results.instance.type, region), note)
                return replace(base, status=ERROR, note=f"asking the job's backend failed: {_reason(exc)}")
            note = "; ".join(n for n in (note, why) if n) or None
        else:
            # This machine's job: its status as `status` tells it (a supervisor killed before the
            # job's final results.json, a launcher interrupted); None once its folder is gone.
            described = self.jobs_here(results.backend).describe(job)
        return build_row(job, results, uri, described, self.price(results.instance.type, region), note)

    def missing_row(self, job: str, uri: str) -> Row:
        """The row of a job with no results object: on S3, what the cloud backend that listed it
        (else the default one) says of it (a job that failed or was stopped before writing one, a capacity error, one still
        starting), else (or when it has no such job) "missing"."""
        missing = f"no {RESULTS_FILE} at {uri}"
        if self.store.local:
            return Row(job=job, status=MISSING, note=missing, uri=uri)
        region = self.command_region()
        owner = self.listed_by.get(job, registry.DEFAULT)
        try:
            described, _ = self.describe(job, owner, region)
        except Exception as exc:
            return Row(job=job, status=MISSING, note=f"{missing}; asking the job's backend failed: {_reason(exc)}",
                       uri=uri)
        if described is None:
            return Row(job=job, status=MISSING, note=missing, uri=uri)
        why = described.failure_reason
        note = f"{missing}: the job is {described.status}" + (f": {why}" if why else "")
        return Row(job=job, status=described.status, backend=owner, region=region,
                   instance=described.instance_type, count=described.instance_count, spot=described.spot,
                   billable_s=described.billable_seconds, training_s=described.training_seconds, note=note, uri=uri)

    def run(self, jobs: list[str], sweep: str | None, progress: Callable[[int, int], None] | None) -> list[Row]:
        rows: list[Row] = []
        total = len(jobs)
        if progress:
            progress(0, total)
        if self.workers <= 1:
            for done, job in enumerate(jobs, 1):
                row = self._safe_row(job, sweep)
                if row is not None:
                    rows.append(row)
                if progress:
                    progress(done, total)
            return rows
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="results") as pool:
            futures = [pool.submit(self._safe_row, job, sweep) for job in jobs]
            for done, future in enumerate(as_completed(futures), 1):
                row = future.result()
                if row is not None:
                    rows.append(row)
                if progress:
                    progress(done, total)
        return rows

    def _safe_row(self, job: str, sweep: str | None) -> Row | None:
        try:
            return self.row(job, sweep)
        except _CommandError as exc:
            raise exc.error from None
        except Exception as exc:  # a bug or an odd answer for one job must not lose the others
            return Row(job=job, status=ERROR, note=f"{type(exc).__name__}: {exc}", uri=self.store.uri(job))


class _Sessions:
    """One boto3 Session per region for the command's clients (the store's and the backends'),
    made once: a session loads each service's model once, so the S3 model is not loaded again
    for every backend. Clients are made under the collector's lock or before the threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self._by_region: dict[str, object] = {}

    def __call__(self, region: str):
        from orchestrator import aws

        with self._lock:
            if region not in self._by_region:
                self._by_region[region] = aws.aws_session(region)
            return self._by_region[region]


def client_config(workers: int):
    """botocore config for collection (`aws.client_config`: timeouts, retries), with a
    connection pool as large as the thread pool."""
    from orchestrator import aws

    return aws.client_config(pool=workers + 2)


def collect(prefix: str, *, job: str | None = None, sweep: str | None = None, region: str | None = None,
            s3=None, backend_for: Callable[[str, str], Backend] | None = None, workers: int = DEFAULT_WORKERS,
            progress: Callable[[int, int], None] | None = None) -> Collection:
    """Rows for the jobs under `prefix` (an output.uri: s3://bucket/jobs or file:///...).

    `job` limits to one job (InputError when its object is missing, saying where it looked;
    a row when it is unreadable or could not be fetched); `sweep` to the jobs of a sweep id,
    a sweep name or a schedule's untimed id (see the module docstring). `region` (default:
    `region.default_region`) is the S3 client's, that of jobs whose results name none, and
    where a sweep's jobs are listed. `s3` is a boto3 client for the store (created with
    `client_config` when None); `backend_for(name, region)` builds the backend that describes
    jobs (default: `registry.create` with clients whose pool fits `workers`). `workers` 1
    collects sequentially. `progress(done, total)` is called as jobs finish. Raises
    InputError for an unusable prefix or filter, or an AWS config that cannot be read.
    """
    if job is not None and sweep is not None:
        raise InputError("--job and --sweep select different things; give one",
                         hint="a job's row already shows its sweep")
    if sweep is not None and not sweep.strip():
        raise InputError("--sweep is empty", hint="give a sweep id (e.g. instances-1a2b3c4d) or a sweep name")
    if job is not None and not names.is_job_name(job):
        raise InputError(f"--job {job[:80]!r} is not a job name: 1-63 letters, digits and dashes, starting and "
                         "ending with a letter or digit", hint="use the name `submit` printed")
    check_prefix(prefix)
    workers = max(1, workers)
    sessions = _Sessions()
    if prefix.startswith("s3://"):
        from orchestrator.region import default_region

        # botocore itself reads AWS_DEFAULT_REGION only: without this, AWS_REGION alone would
        # send S3 calls to us-east-1 (another partition's endpoint for cn-/us-gov- regions).
        region = default_region(region)
        if s3 is None:
            from orchestrator import aws

            s3 = aws.client("s3", region, config=client_config(workers), session=sessions(region))
    store = ResultsPrefix(prefix, s3_client=s3)
    collector = _Collector(store, region=region, workers=workers,
                           backend_for=backend_for or (lambda name, where: registry.create(
                               name, region=where, pool=workers + 2, session=sessions(where))))
    if job is not None:
        jobs = [job]
    else:
        try:
            jobs = store.jobs()
        except Exception as exc:
            from orchestrator import aws

            hint = (aws.NO_ANSWER_HINT if aws.describe(exc.__cause__ or exc) else
                    "check the prefix (the job spec's output.uri) and your credentials")
            raise BackendError(f"cannot list {prefix}: {_reason(exc)}", hint=hint) from None
        if sweep is not None and not store.local:
            try:
                jobs = sorted(set(jobs) | set(_listed_jobs(collector, sweep)))
            except _CommandError as exc:
                raise exc.error from None
    rows = collector.run(jobs, sweep, progress)
    if sweep is not None and not rows:
        known = sorted(collector.sweeps_seen)
        shown = ", ".join(known[:20]) + (f" and {len(known) - 20} more" if len(known) > 20 else "")
        raise InputError(f"no results for sweep {sweep} under {prefix}",
                         hint=(f"sweeps with results there: {shown}; " if known else "no sweep's results are there; ")
                         + "--sweep takes a sweep id, a sweep name, or a schedule's untimed id; check --prefix "
                         f"(results live at <output.uri>/{RESULTS_DIR}/<job>/{RESULTS_FILE})")
    if job is not None and [row.status for row in rows] == [MISSING]:
        raise InputError(f"--job {job}: no {RESULTS_FILE} at {store.uri(job)}",
                         hint=f"results live at <output.uri>/{RESULTS_DIR}/<job>/{RESULTS_FILE}; if the job wrote "
                              "elsewhere, pass --prefix with its output.uri (or --spec with its job spec); a job "
                              "still running has written none yet")
    return Collection(prefix=prefix, rows=rank(rows))


def _listed_jobs(collector: _Collector, sweep: str) -> list[str]:
    """Every cloud backend's jobs of `sweep` (by name), so that jobs without a results object
    yet still appear as rows (a Batch trial cancelled for capacity writes none). BackendError
    when they cannot be listed: without this list, they would vanish unseen. (Batch lists only
    the queues its ledger rows name, so it asks AWS nothing for a user who never used it.)"""
    listed: dict[str, str] = {}
    needle, region = names.listing_needle(sweep), collector.command_region()
    for name in registry.cloud_names():
        backend = collector.backend(name, region)
        try:
            for job in backend.job_names(needle):
                listed.setdefault(job, name)
        except OrchestratorError as exc:
            hint = "; ".join(filter(None, (exc.hint, "or pass --region")))
            raise BackendError(f"cannot list the jobs of sweep {sweep} in {backend.place}: {_reason(exc)}",
                               hint=hint) from None
        bulk = getattr(backend, "describe_all", None)  # optional: a backend from elsewhere may lack it
        try:
            described = (bulk(needle) if bulk is not None else None) or {}
        except OrchestratorError:  # a shortcut only (e.g. no sagemaker:Search grant): each job is described instead
            described = {}
        collector.ended.update(((name, region, job), status) for job, status in described.items()
                               if status.terminal)
    jobs = [job for job in listed if names.in_sweep(job, sweep)]
    collector.listed_by.update((job, listed[job]) for job in jobs)
    return jobs
