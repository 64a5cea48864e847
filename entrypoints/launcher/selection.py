"""The instance type SageMaker selected, and the job file as that type runs it.

With `ResourceConfig.InstancePreferences` SageMaker launches the job on the first type that has
capacity and tells the container which (resourceconfig.json's `current_instance_type`, which
the toolkit passes on as SM_CURRENT_INSTANCE_TYPE). The job file then carries one row per
preference (`preferences`, written by the laptop side, which knows the catalog); `adapt`
returns the job file with that row's instance facts, workers per host and environment in place
of the first choice's, so the workers, the logical NeuronCore config, the EFA variables and the
compile cache key (family and compiler flags) all follow the selected type.

Stdlib only; never imports `orchestrator`.
"""

from __future__ import annotations

import copy

# The facts of a preference row that make up the job file's "instance" object.
_INSTANCE_KEYS = ("type", "family", "neuron_cores", "logical_cores", "lnc", "vcpus")


def adapt(job: dict, selected_type: str, log=None) -> dict:
    """`job` as the type `selected_type` runs it (see the module docstring); `job` itself when
    it has no preferences or the container did not say which type it runs on. ValueError for a
    selected type the job file has no row for (the request and the job file disagree)."""
    rows = job.get("preferences") or []
    if not rows or not selected_type:
        return job
    row = next((r for r in rows if r.get("type") == selected_type), None)
    if row is None:
        listed = ", ".join(str(r.get("type")) for r in rows)
        raise ValueError(f"this host is a {selected_type}, which is none of the job's instance preferences "
                         f"({listed}): the job file does not belong to this request")
    adapted = copy.deepcopy(job)
    adapted["instance"] = {key: row.get(key) for key in _INSTANCE_KEYS}
    adapted["workers_per_node"] = int(row["workers_per_node"])
    adapted["environment"] = dict(row.get("environment") or {})
    # The request's Environment is the first preference's, and the platform set it before we
    # ran: what only that type needs (NEURON_LOGICAL_NC_CONFIG on trn2, the EFA variables on a
    # multi-node choice) must not reach another type's ranks.
    adapted["environment_unset"] = sorted(set(rows[0].get("environment") or {}) - set(adapted["environment"]))
    adapted["selected"] = {"type": selected_type, "count": row.get("count"),
                           "preference": rows.index(row) + 1, "usd_per_hour": row.get("usd_per_hour")}
    if log is not None:
        log(f"instance preferences: SageMaker selected {selected_type} (preference {rows.index(row) + 1} of "
            f"{len(rows)}): {adapted['workers_per_node']} workers per host, LNC={row.get('lnc')}")
    return adapted
