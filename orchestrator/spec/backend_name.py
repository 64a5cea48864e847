"""A job spec's `backend:` field: a name the backend registry offers, checked when validated,
and its class, looked up once per spec (`JobSpec.backend_type`) and asked what it refuses.

Read from the registry (`orchestrator.backends.registry.names`) rather than a Literal written
here, so that a backend registered without editing orchestrator/ (a test's stand-in,
tests/stand_in_backend/) is one a spec may name; the shipped three are refused, shown and
described exactly as the Literal of them was.
"""

from typing import Any

from pydantic_core import PydanticCustomError, core_schema


class BackendName(str):
    """A backend's name as the registry offers it (`orchestrator.backends.registry.names`): the
    shipped three and any a test registers. Refused as a Literal of them would be (error type
    "literal_error", the same message and JSON schema enum), read when validated, not at import."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):
        return core_schema.no_info_plain_validator_function(cls._checked)

    @classmethod
    def __get_pydantic_json_schema__(cls, schema, handler):
        from orchestrator.backends import registry

        return {"enum": list(registry.names()), "type": "string"}

    @staticmethod
    def _checked(value: Any) -> str:
        from orchestrator.backends import registry

        known = registry.names()
        if isinstance(value, str) and value in known:
            return value
        expected = ", ".join(repr(name) for name in known[:-1]) + f" or {known[-1]!r}"
        raise PydanticCustomError("literal_error", "Input should be {expected}", {"expected": expected})


def class_of(name: str):
    """The class of backend `name` (`registry.backend_class`): called once per spec, when it is
    validated (or first asked, for a spec made without validation)."""
    from orchestrator.backends import registry

    return registry.backend_class(name)


def backend_problems(spec, sections: dict) -> list[tuple[str, str]]:
    """(field, message) for what the spec's backend refuses of it (`Planning.spec_problems`),
    and for each of `sections` (name -> model: the sections one backend alone reads) set away
    from its defaults for another backend."""
    backend = spec.backend_type
    found = list(backend.spec_problems(spec))
    for section, model in sections.items():
        if getattr(spec, section) != model.defaults() and backend.section != section:
            found.append((section, f"{section}: is for backend: {section}; the {spec.backend} backend would "
                          "ignore it"))
    return found
