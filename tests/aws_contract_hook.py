"""The contract check on every AWS call the tests make (a pytest plugin, registered in
conftest.py's pytest_plugins).

A botocore 'before-parameter-build' handler, added to botocore's built-in handlers so every
session made in the test process has it (the product's, moto's clients, Stubber'd ones), runs
`orchestrator.aws_contract.violations` on the call's parameters, and an 'after-call' one runs
`answer_violations` on each answer a test wrote itself (botocore's Stubber). A test during which any call
broke the contract fails with the violations listed, even when the product swallowed the
error the call raised: moto and botocore accept what AWS refuses, so this is where a request
AWS would refuse is caught. `aws_contract_calls` lets a test take the violations it made on
purpose. Calls made in subprocesses (the container side run by the local backends) are not seen.
"""

from __future__ import annotations

import threading

import botocore.handlers
import pytest

from orchestrator import aws_contract

_seen: list[str] = []
_lock = threading.Lock()


def _check(params, model, **_):
    """botocore 'before-parameter-build': record what AWS would refuse in this call."""
    service = model.service_model.service_name
    found = aws_contract.violations(service, model.name, params)
    if found:
        with _lock:
            _seen.extend(f"{service} {model.name}: {violation.render()}" for violation in found)


# Whose answers are checked: SageMaker's. CloudFormation's model lacks REVIEW_IN_PROGRESS in
# ResourceStatus, which real stack events carry (tests/test_infra.py's stubbed rollback).
ANSWER_SERVICES = frozenset({"sagemaker"})


def _check_answer(http_response, parsed, model, **_):
    """botocore 'after-call': record what the model refuses in an answer a test wrote. A Stubber
    answer comes with a response of no URL (moto's come over HTTP: moto's shapes are moto's)."""
    if getattr(http_response, "url", "") is not None or not isinstance(parsed, dict) or "Error" in parsed:
        return
    service = model.service_model.service_name
    if service not in ANSWER_SERVICES:
        return
    answer = {k: v for k, v in parsed.items() if k != "ResponseMetadata"}
    found = aws_contract.answer_violations(service, model.name, answer)
    if found:
        with _lock:
            _seen.extend(f"{service} {model.name} (answer): {violation.render()}" for violation in found)


_HANDLER = ("before-parameter-build", _check)
_ANSWER_HANDLER = ("after-call", _check_answer)
for _handler in (_HANDLER, _ANSWER_HANDLER):
    if _handler not in botocore.handlers.BUILTIN_HANDLERS:
        botocore.handlers.BUILTIN_HANDLERS.append(_handler)


def take() -> list[str]:
    """The violations recorded since the last take, and forget them."""
    with _lock:
        found = list(_seen)
        _seen.clear()
    return found


@pytest.fixture
def aws_contract_calls():
    """`take()`: for a test that breaks the contract on purpose, to read and clear what it did."""
    return take


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    take()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    found = take()
    if found:
        pytest.fail("AWS would refuse calls this test made (tests/aws_contract_hook.py):\n  " + "\n  ".join(found),
                    pytrace=False)
    return result
