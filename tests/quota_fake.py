"""A Service Quotas that answers as the real one does (moto implements only the defaults of a
few services): ListServiceQuotas lists the APPLIED values only ("If the applied quota value is
not available for a quota, the quota is not retrieved"), ListAWSDefaultServiceQuotas lists the
defaults ("A default value does not reflect any quota increases"), both in pages of PAGE.

`service_quotas(applied, defaults)` returns a real boto3 client whose calls are answered from
the two tables by a botocore 'before-call' handler: each request has passed botocore's own
parameter validation (and the contract hook), and each answer is validated against the
operation's output shape, as botocore's Stubber does. No network. `calls` records
(operation, ServiceCode) in order.
"""

from __future__ import annotations

import json

import boto3
from botocore.awsrequest import AWSResponse
from botocore.validate import validate_parameters

PAGE = 2  # small, so that every test walks several pages


def quota(name: str, code: str, value: float, service: str = "sagemaker") -> dict:
    return {"ServiceCode": service, "ServiceName": service, "QuotaCode": code, "QuotaName": name,
            "QuotaArn": f"arn:aws:servicequotas:us-east-1:123456789012:{service}/{code}", "Value": float(value),
            "Unit": "None", "Adjustable": True, "GlobalQuota": False}


class FakeServiceQuotas:
    """`applied` / `defaults`: service code -> [quota(...)]."""

    def __init__(self, applied: dict[str, list[dict]], defaults: dict[str, list[dict]] | None = None):
        self.applied = applied
        self.defaults = defaults or {}
        self.calls: list[tuple[str, str]] = []
        self.client = boto3.client("service-quotas", region_name="us-east-1", aws_access_key_id="testing",
                                   aws_secret_access_key="testing")
        self.client.meta.events.register("before-call.service-quotas.*", self._answer)

    def _answer(self, model, params, **_):
        table = {"ListServiceQuotas": self.applied, "ListAWSDefaultServiceQuotas": self.defaults}.get(model.name)
        if table is None:
            raise AssertionError(f"the fake Service Quotas does not answer {model.name}")
        # `params` is the serialized request: the JSON body botocore built and validated.
        params = json.loads(params["body"] or b"{}")
        service = params["ServiceCode"]
        self.calls.append((model.name, service))
        rows = table.get(service, [])
        start = int(params.get("NextToken") or 0)
        answer: dict = {"Quotas": rows[start:start + PAGE]}
        if start + PAGE < len(rows):
            answer["NextToken"] = str(start + PAGE)
        validate_parameters(answer, model.output_shape)
        return AWSResponse(None, 200, {}, None), answer


def service_quotas(applied: dict[str, list[dict]], defaults: dict[str, list[dict]] | None = None) -> FakeServiceQuotas:
    return FakeServiceQuotas(applied, defaults)
