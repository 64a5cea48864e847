"""Job and sweep specs: strict, frozen pydantic models, loaded from YAML with located errors.

Contract:
- `load(path)` returns a frozen `JobSpec` or raises `SpecError` whose problems each carry the
  file, 1-based line and column, the dotted field path and the reason (with "did you mean"
  for unknown keys). It never raises anything else for any input text.
- `loads(text, filename)` is the same on a string.
- Only regular files are read (a directory, FIFO or device is refused without being opened
  for reading), and at most MAX_SPEC_BYTES + 1 bytes of them: the spec, a sweep, a sweep's
  `base:` and the `infra:` file alike. A sweep given as a job spec (or the reverse) is named as
  such in one problem at line 1. A file that does not exist gets a did-you-mean hint naming a
  YAML file of a close name in the same folder, if there is one. Numbers are strict: a boolean,
  NaN or infinity is not one.
- Cross-field problems (a sagemaker spec without role_arn, output.uri, ...) are all reported
  in one SpecError, each at its own field.
- The models do no I/O and read no clock. The one piece of I/O besides reading the file is
  the optional `infra:` key, which names an outputs file written by `python -m orchestrator
  infra outputs --write`; the loader fills `role_arn`, `compile_cache.uri` and `output.uri`
  from it where the spec leaves them out.
- `spec_hash(spec)` is the sha256 of the spec's canonical JSON: the identity of a job (a field
  added in a later version counts only once set away from its default: `models.LATER_FIELDS`).
- `load_sweep(path)` is the same for a sweep spec, with its base job spec loaded.

Modules: `models` (the job models, `spec_hash`), `sweep_spec` (the sweep models, loading a
sweep), `source` (YAML with positions), `problems` (pydantic errors as located problems),
`files` (reading spec files), `loading` (a job spec from a file, merged with its infra
outputs). Names are imported from them on first use, so `validate` builds no sweep model.
"""

from __future__ import annotations

from orchestrator.lazy_exports import by_module, module_getattr

# Public name -> the submodule that defines it.
_EXPORTS = by_module({
    "models": ("MAX_NAME", "NAME_PATTERN", "S3_BUCKET", "URI_PATTERN", "ROLE_PATTERN", "REGION_PATTERN",
               "INSTANCE_PATTERN", "ARCH_PATTERN", "SDK_PATTERN", "DATA_PATTERN", "valid_bucket",
               "InstanceSpec", "PreferenceSpec", "ImageSpec", "ModelSpec", "OptimizerSpec", "TrainingSpec", "DataSpec",
               "CompileCacheSpec", "OutputSpec", "BatchSpec", "BudgetSpec", "JobSpec", "spec_hash"),
    "source": ("MAX_SPEC_BYTES", "MAX_EXPANDED_NODES", "SourceMap", "read_yaml"),
    "problems": ("PATTERN_HINTS", "problems_from"),
    "loading": ("INFRA_FIELDS", "INFRA_OTHER_KEYS", "validate", "loads", "load", "with_overrides", "json_schema"),
    "sweep_spec": ("UNSWEEPABLE", "MAX_TRIALS", "RandomParam", "RandomSpec", "ScheduleSpec", "SweepBudgetSpec",
                   "SweepSpec", "job_field_paths", "loads_sweep", "load_sweep"),
})
__all__ = sorted(_EXPORTS)
__getattr__ = module_getattr(__name__, _EXPORTS)
