"""What the launcher, the trainer and the laptop side share: the contract between them.

`contract` (SageMaker's container contract and our job file), `results_schema` (results.json),
`atomic` (how every file is written), `storage` (one object-store interface over s3:// and
file://) and `compile_cache` (the cache's key, layout and pull/push, which `orchestrator cache`
reads). It imports neither `entrypoints.launcher` nor `entrypoints.trainer`; docs/ARCHITECTURE.md.
"""
