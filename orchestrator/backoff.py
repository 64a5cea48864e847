"""How long to wait before calling again a service whose call failed for a reason that may pass
(throttling, a server error, the network): the one statement of the backoff's values, read by
the sweep runner (`sweep.Runner`), a cloud schedule's Retry (`backends.scheduled.retry`) and
`follow` (which starts from its poll interval instead of BASE_S).

The wait before the n-th retry in a row grows from BASE_S by RATE each time, at most CAP_S."""

BASE_S = 2.0
RATE = 2.0
CAP_S = 300.0
