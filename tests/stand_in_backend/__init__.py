"""A backend that lives only here: the proof of docs/ARCHITECTURE.md's "Adding a backend".

`StandInBackend` (backend.py) implements the whole interface (`orchestrator.backends.planning`
and `orchestrator.backends.running`) without a line of orchestrator/ naming it; the test
offers it with the registry's one line, `registry.register(NAME, TARGET)`
(tests/test_stand_in_backend.py).
"""

NAME = "standin"
TARGET = "stand_in_backend.backend:StandInBackend"
