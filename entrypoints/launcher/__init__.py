"""The container's launcher: one process per host, from the container's start to its exit.

`launch.py` is the program (the source archive carries a copy at its root); the rest are its
steps: the container start, the job as the selected type runs it, torchrun, the compile cache's
pull and pushes, the heartbeat, results.json and the failure reason; `bootstrap` is AWS Batch's
job command, which lays out what SageMaker would and execs `launch.py`. It runs the trainer only
as a module name given to torchrun, so it never imports `entrypoints.trainer`; docs/ARCHITECTURE.md.
"""
