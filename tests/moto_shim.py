"""Every use of moto beyond its public API, in one place.

moto's public API is `mock_aws`, `moto.server.ThreadedMotoServer` and the server's `/moto-api/`
(reset, config); the tests use those directly. What they cannot do that way (read or change a
job's state in moto's backends, record a request body as sent, make a fake answer as AWS does)
is here, each function naming the moto names it touches. They were written against moto
WRITTEN_FOR; a moto that renamed one fails with MotoChanged naming the patch and the name, at
the start of the test, never an AttributeError deep in a fixture
(tests/test_moto_shim.py resolves every name in NAMES on the installed moto).

The server runs in the test process (conftest's ThreadedMotoServer), so a patch of a backend or
of a response handler reaches what the server does.
"""

from __future__ import annotations

import functools
import importlib
import json
import threading
from collections.abc import Callable

WRITTEN_FOR = "5.2.6"
ACCOUNT = "123456789012"  # moto's DEFAULT_ACCOUNT_ID: the account of the fake credentials


# A Distributed Map's iterations run on this many of the interpreter's threads at most (its
# MaxConcurrency, at most 1,000): the shared clients keep a connection for each.
MAP_THREADS = 1000


class MotoChanged(RuntimeError):
    """A name this module patches or reads is not in the installed moto."""


def moto_version() -> str:
    from importlib.metadata import version

    return version("moto")


def find(dotted: str, patch: str):
    """The object at "module:Attr.attr" in moto, or MotoChanged naming `patch`."""
    module_name, _, path = dotted.partition(":")
    try:
        found = importlib.import_module(module_name)
        for part in path.split(".") if path else ():
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise MotoChanged(f"tests/moto_shim.py, patch {patch!r}: the installed moto {moto_version()} has no "
                          f"{dotted} ({type(exc).__name__}: {exc}); the patch was written against moto "
                          f"{WRITTEN_FOR}: find what moto calls it now and update the patch") from None
    return found


def replace(monkeypatch, dotted: str, patch: str, make: Callable) -> None:
    """Set the attribute at `dotted` to make(original) for the test (monkeypatch undoes it)."""
    module_name, _, path = dotted.partition(":")
    owner_path, _, name = path.rpartition(".")
    owner = find(f"{module_name}:{owner_path}" if owner_path else module_name, patch)
    original = find(dotted, patch)
    monkeypatch.setattr(owner, name, make(original))


# Every moto name below, by patch: tests/test_moto_shim.py checks each exists in the installed moto.
NAMES: dict[str, tuple[str, ...]] = {
    "sagemaker jobs": ("moto.sagemaker.models:sagemaker_backends",),
    "batch jobs": ("moto.batch.models:batch_backends",),
    "record request bodies": ("moto.sagemaker.responses:SageMakerResponse.create_training_job",
                              "moto.batch.responses:BatchResponse.submit_job"),
    "sagemaker create hook": ("moto.sagemaker.models:SageMakerModelBackend.create_training_job",),
    "sagemaker create refused": ("moto.sagemaker.models:SageMakerModelBackend.create_training_job",
                                 "moto.sagemaker.exceptions:SagemakerClientError"),
    "batch fails jobs": ("moto.batch_simple.models:BatchSimpleBackend._mark_job_as_finished",),
    "batch compute environments invalid": ("moto.batch.models:BatchBackend.describe_compute_environments",),
    "s3 atomic conditional put": ("moto.s3.responses:S3Response.put_object",),
    "cloudformation change set outputs": ("moto.cloudformation.models:CloudFormationBackend.execute_change_set",
                                          "moto.cloudformation.parsing:ResourceMap.build_resource_diff"),
    "cloudformation scheduler schedules": ("moto.cloudformation.parsing:resource_class_from_type",
                                           "moto.core.common_models:CloudFormationModel",
                                           "moto.scheduler.models:scheduler_backends"),
    "stepfunctions api serves the interpreter": ("moto.stepfunctions.models:stepfunctions_backends",
                                                 "moto.stepfunctions.parser.models:stepfunctions_parser_backends"),
    "stepfunctions sdk pascal case": (
        "moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_aws_sdk:"
        "StateTaskServiceAwsSdk._normalise_parameters",
        "moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_aws_sdk:"
        "StateTaskServiceAwsSdk._normalise_response",
        "moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_aws_sdk:"
        "StateTaskServiceAwsSdk._to_boto_request",
        "moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_aws_sdk:"
        "StateTaskServiceAwsSdk._from_boto_response"),
    "stepfunctions loopback clients": (
        "moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_aws_sdk:"
        "boto_client_for",),
    "stepfunctions item reader loopback": (
        "moto.stepfunctions.parser.asl.component.state.exec.state_map.item_reader.eval.resource_eval_s3:"
        "boto_client_for",),
    "stepfunctions sdk error names": (
        "moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_aws_sdk:"
        "_SERVICE_ERROR_NAMES",),
    "stepfunctions retries without waiting": ("moto.stepfunctions.parser.asl.component.common.retry.retrier_decl:time",),
    "stepfunctions describe failing": (
        "moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_aws_sdk:"
        "boto_client_for",),
    "stepfunctions definition from s3": ("moto.stepfunctions.models:StateMachine.create_from_cloudformation_json",
                                         "moto.stepfunctions.models:StateMachine.update_from_cloudformation_json",
                                         "moto.s3.models:s3_backends"),
}


# --- reading and changing moto's records ---------------------------------------------------------


def sagemaker_jobs(region: str = "us-east-1", account: str = ACCOUNT) -> dict:
    """moto's training jobs by name (its in-process records; change them to fake a status)."""
    return find(NAMES["sagemaker jobs"][0], "sagemaker jobs")[account][region].training_jobs


def batch_jobs(region: str = "us-east-1", account: str = ACCOUNT) -> dict:
    """moto's Batch jobs by id."""
    return find(NAMES["batch jobs"][0], "batch jobs")[account][region]._jobs


def record_bodies(monkeypatch, operation: str) -> list[dict]:
    """The JSON body of every `operation` request ("CreateTrainingJob", "SubmitJob") the server
    receives from now on, as sent: what was asked for, not what moto keeps of it."""
    dotted = {"CreateTrainingJob": NAMES["record request bodies"][0],
              "SubmitJob": NAMES["record request bodies"][1]}[operation]
    bodies: list[dict] = []

    def make(original):
        def handler(self):
            bodies.append(json.loads(self.body))
            return original(self)
        return handler

    replace(monkeypatch, dotted, "record request bodies", make)
    return bodies


def after_create_training_job(monkeypatch, hook: Callable) -> None:
    """hook(backend, job_name) runs after each CreateTrainingJob moto accepts (inside the call)."""
    def make(original):
        def create(self, training_job_name, *args, **kwargs):
            made = original(self, training_job_name, *args, **kwargs)
            hook(self, training_job_name)
            return made
        return create

    replace(monkeypatch, NAMES["sagemaker create hook"][0], "sagemaker create hook", make)


def around_create_training_job(monkeypatch, wrapper: Callable) -> None:
    """wrapper(create, backend, job_name, *args, **kwargs) replaces CreateTrainingJob in moto's
    backend; `create` is moto's own (call it to create the job)."""
    def make(original):
        def create(self, training_job_name, *args, **kwargs):
            return wrapper(original, self, training_job_name, *args, **kwargs)
        return create

    replace(monkeypatch, NAMES["sagemaker create hook"][0], "sagemaker create hook", make)


def refuse_create_training_job(monkeypatch, code: str, message: str, times: int = 1) -> list[str]:
    """The next `times` CreateTrainingJob calls answer the AWS error `code` (a 400 with that
    __type); returns the names refused."""
    base = find(NAMES["sagemaker create refused"][1], "sagemaker create refused")
    # moto serialises an error by its service's model only when the class lives in its package.
    refused_error = type("Refused", (base,), {"code": code, "__module__": base.__module__})
    refused: list[str] = []

    def wrapper(create, backend, name, *args, **kwargs):
        if len(refused) < times:
            refused.append(name)
            raise refused_error(code, message)
        return create(backend, name, *args, **kwargs)

    around_create_training_job(monkeypatch, wrapper)
    return refused


def fail_batch_jobs(monkeypatch, reasons: dict[str, str]) -> None:
    """moto's Batch ends the job named in `reasons` FAILED with that status reason (once each)."""
    def make(original):
        def finished(self, include_start_attempt, job):
            original(self, include_start_attempt, job)
            reason = reasons.pop(job.job_name, None)
            if reason is not None:
                job.status, job.job_stopped_reason = "FAILED", reason
        return finished

    replace(monkeypatch, NAMES["batch fails jobs"][0], "batch fails jobs", make)


def batch_compute_environments_invalid(monkeypatch, reason: str) -> None:
    """DescribeComputeEnvironments answers every environment INVALID with `reason` (moto always
    answers VALID), as Batch does of one whose instance role or AMI is wrong."""
    def make(original):
        def invalid(self, environments=None):
            return [dict(env, status="INVALID", statusReason=reason) for env in original(self, environments)]
        return invalid

    replace(monkeypatch, NAMES["batch compute environments invalid"][0], "batch compute environments invalid", make)


# --- making moto answer as AWS does -----------------------------------------------------------------


def s3_atomic_conditional_put(monkeypatch) -> None:
    """Real S3 checks IfMatch/IfNoneMatch and writes as one step; moto checks, then writes,
    without a lock, so two concurrent conditional writers could both win. Serialise its PUT."""
    import threading

    lock = threading.Lock()

    def make(original):
        def put_object(self, *args, **kwargs):
            with lock:
                return original(self, *args, **kwargs)
        return put_object

    replace(monkeypatch, NAMES["s3 atomic conditional put"][0], "s3 atomic conditional put", make)


def cloudformation_change_set_outputs(monkeypatch) -> None:
    """moto builds the stack of a CREATE change set from an empty template and, on execute, swaps
    in the template without rebuilding its outputs (DescribeStacks shows none): rebuild them
    after each execute. And its stack update "modifies" every resource that refers to a changed
    parameter, even one whose Condition was false and which was never created (then fails on a
    GetAtt of another never created); CloudFormation creates such a resource when its condition
    turns true, which moto's "Add" step does (it checks the condition)."""
    patch = "cloudformation change set outputs"

    def make_execute(original):
        def execute_change_set(self, change_set_name, stack_name=None):
            original(self, change_set_name, stack_name)
            change_set = self.change_sets.get(change_set_name) or next(
                cs for cs in self.change_sets.values() if cs.change_set_name == change_set_name)
            stack = change_set.stack
            stack._parse_template()
            stack.output_map = stack._create_output_map()
        return execute_change_set

    def make_diff(original):
        def diff_without_uncreated(self, other_template, parameters=None):
            actions = original(self, other_template, parameters)
            uncreated = [name for name in actions["Modify"] if name not in self._parsed_resources
                         and "Condition" in other_template["Resources"][name]]
            actions["Modify"] = [name for name in actions["Modify"] if name not in uncreated]
            actions["Add"] += uncreated
            return actions
        return diff_without_uncreated

    replace(monkeypatch, NAMES[patch][0], patch, make_execute)
    replace(monkeypatch, NAMES[patch][1], patch, make_diff)


def cloudformation_scheduler_schedules(monkeypatch) -> None:
    """moto's CloudFormation skips AWS::Scheduler::Schedule (no model; its Scheduler API exists).
    This gives it one on moto's own Scheduler backend, so the stack's schedule is created, read
    back, updated and deleted with the stack as CloudFormation would."""
    patch = "cloudformation scheduler schedules"
    parsing_lookup, model_base, backends_name = NAMES[patch]
    model = find(model_base, patch)
    schedulers = find(backends_name, patch)

    class ScheduleResource(model):
        __module__ = "moto.scheduler.cloudformation_model"  # moto's model registry reads the service from it

        def __init__(self, name, region, account):
            self.name, self.region, self.account = name, region, account

        @property
        def physical_resource_id(self):
            return self.name

        @classmethod
        def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name,
                                            **kwargs):
            p = cloudformation_json["Properties"]
            schedulers[account_id][region_name].create_schedule(
                description=p.get("Description"), end_date=None, flexible_time_window=p["FlexibleTimeWindow"],
                group_name=None, kms_key_arn=None, name=resource_name, schedule_expression=p["ScheduleExpression"],
                schedule_expression_timezone=p.get("ScheduleExpressionTimezone"), start_date=None,
                state=p.get("State"), target=p["Target"], action_after_completion=None)
            return cls(resource_name, region_name, account_id)

        @classmethod
        def update_from_cloudformation_json(cls, original_resource, new_resource_name, cloudformation_json,
                                            account_id, region_name):
            original_resource.delete(account_id, region_name)
            return cls.create_from_cloudformation_json(original_resource.name, cloudformation_json, account_id,
                                                       region_name)

        def delete(self, account_id, region_name):
            schedulers[account_id][region_name].delete_schedule(None, self.name)

    replace(monkeypatch, parsing_lookup, patch, lambda original: (
        lambda kind: ScheduleResource if kind == "AWS::Scheduler::Schedule" else original(kind)))


def stepfunctions_api_serves_the_interpreter(monkeypatch) -> None:
    """With the interpreter on, moto's Step Functions API serves the interpreter's backend while
    its CloudFormation model of AWS::StepFunctions::StateMachine creates in the other one (the
    stack's state machine would be invisible to the API): point the model at the interpreter's."""
    patch = "stepfunctions api serves the interpreter"
    parser_backends = find(NAMES[patch][1], patch)
    replace(monkeypatch, NAMES[patch][0], patch, lambda original: parser_backends)


def _operation_model(task):
    action = task.resource.api_action
    return _service_model(task._get_boto_service_name()).operation_model(action[:1].upper() + action[1:])


@functools.cache
def _service_model(service: str):
    """botocore's model of `service`, loaded once: a new session per task re-read and parsed the
    whole model file (SageMaker's is megabytes of JSON) twice a task, most of the interpreter's
    time in a run of many trials (py-spy, docs/BENCHMARKS.md)."""
    import botocore.session

    return botocore.session.get_session().get_service_model(service)


def stepfunctions_sdk_pascal_case(monkeypatch) -> None:
    """AWS's SDK integrations take and give the API's own (PascalCase) member names; moto's
    interpreter converts them by a rule that breaks names like `S3Uri`: convert by the
    operation's botocore shapes instead."""
    patch = "stepfunctions sdk pascal case"

    def parameters(original):
        def normalise_parameters(self, parameters, boto_service_name=None, service_action_name=None):
            self._to_boto_request(parameters, _operation_model(self).input_shape)
        return normalise_parameters

    def response(original):
        def normalise_response(self, response, boto_service_name=None, service_action_name=None):
            self._from_boto_response(response, _operation_model(self).output_shape)
        return normalise_response

    replace(monkeypatch, NAMES[patch][0], patch, parameters)
    replace(monkeypatch, NAMES[patch][1], patch, response)
    find(NAMES[patch][2], patch), find(NAMES[patch][3], patch)  # the helpers the two call


def stepfunctions_loopback_clients(url: str, monkeypatch) -> None:
    """The interpreter's AWS clients call the moto server at `url` (127.0.0.1), with fake keys."""
    import boto3
    from botocore.config import Config

    patch = "stepfunctions loopback clients"

    made: dict = {}
    lock = threading.Lock()

    def make(original):
        def client_for(region, service, state_credentials=None):
            # One client per region and service, as a program keeps its clients (botocore's
            # clients are thread-safe); building two per task cost the children's threads.
            with lock:
                if (region, service) not in made:
                    client = original(region, service, state_credentials)  # builds its config; calls nothing
                    made[region, service] = boto3.client(
                        service, region_name=region, endpoint_url=url, aws_access_key_id="ak",
                        aws_secret_access_key="sk",
                        config=client.meta.config.merge(Config(max_pool_connections=MAP_THREADS)))
                return made[region, service]
        return client_for

    replace(monkeypatch, NAMES[patch][0], patch, make)


def stepfunctions_definition_from_s3(monkeypatch) -> None:
    """CloudFormation reads a state machine's DefinitionS3Location and DefinitionSubstitutions;
    moto's model reads only DefinitionString: give it the object's text, substituted."""
    patch = "stepfunctions definition from s3"
    create_name, update_name, s3_name = NAMES[patch]
    s3_backends = find(s3_name, patch)

    def resolved(cloudformation_json, account_id):
        props = cloudformation_json.get("Properties", {})
        where = props.get("DefinitionS3Location")
        if where and "DefinitionString" not in props:
            found = s3_backends[account_id]["aws"].get_object(where["Bucket"], where["Key"])
            text = found.value.decode()
            # DefinitionSubstitutions: "A map (string to string) that specifies the mappings for
            # placeholder variables in the state machine definition" (CloudFormation template
            # reference, AWS::StepFunctions::StateMachine); moto's model ignores it.
            for name, value in props.get("DefinitionSubstitutions", {}).items():
                text = text.replace("${" + name + "}", value if isinstance(value, str) else "aws")
            props = {**props, "DefinitionString": text}
        return {**cloudformation_json, "Properties": props}

    def make_create(original):
        create = original.__func__

        def create_from(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
            return create(cls, resource_name, resolved(cloudformation_json, account_id), account_id, region_name,
                          **kwargs)
        return classmethod(create_from)

    def make_update(original):
        update = original.__func__

        def update_from(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name):
            return update(cls, original_resource, new_resource_name, resolved(cloudformation_json, account_id),
                          account_id, region_name)
        return classmethod(update_from)

    replace(monkeypatch, create_name, patch, make_create)
    replace(monkeypatch, update_name, patch, make_update)


def stepfunctions_item_reader_loopback(url: str, monkeypatch) -> None:
    """The Distributed Map's ItemReader (s3:getObject) builds its S3 client as the SDK
    integration does, for moto's host name: point it at the server's own address (127.0.0.1)."""
    import boto3

    patch = "stepfunctions item reader loopback"

    def make(original):
        def client_for(region, service, state_credentials=None):
            client = original(region=region, service=service, state_credentials=state_credentials)
            return boto3.client(service, region_name=region, endpoint_url=url, aws_access_key_id="ak",
                                aws_secret_access_key="sk", config=client.meta.config)
        return client_for

    replace(monkeypatch, NAMES[patch][0], patch, make)


def stepfunctions_sdk_error_names(monkeypatch) -> None:
    """moto names an SDK integration's errors after the lower-case service ("sagemaker.
    ThrottlingException"); Step Functions writes them in Pascal case ("SageMaker.ThrottlingException",
    developer guide, "Learning to use AWS service SDK integrations in Step Functions")."""
    patch = "stepfunctions sdk error names"
    replace(monkeypatch, NAMES[patch][0], patch,
            lambda names: {**names, "sagemaker": "SageMaker", "batch": "Batch"})


def stepfunctions_retries_without_waiting(monkeypatch) -> list[float]:
    """moto's interpreter sleeps a Retrier's interval in real time; the tests count the retries,
    not the seconds: skip the sleeps, returning the intervals asked for, in order."""
    import types

    patch = "stepfunctions retries without waiting"
    asked: list[float] = []
    replace(monkeypatch, NAMES[patch][0], patch, lambda original: types.SimpleNamespace(sleep=asked.append))
    return asked


def stepfunctions_describe_failing(monkeypatch, fail: dict[str, tuple[int | None, str]]) -> dict[str, int]:
    """The interpreter's DescribeTrainingJob of a job whose name contains a key of `fail` is
    answered that key's error code, `count` times (None: always), as botocore raises a service's
    error (a ClientError with its request id); returns how often each was answered so. Call
    after `schedule_moto.interpreter_on` (it wraps the clients that makes)."""
    from botocore.exceptions import ClientError

    patch = "stepfunctions describe failing"
    answered = {key: 0 for key in fail}

    def refuse(params, **kwargs):
        name = params.get("TrainingJobName", "")
        for key, (count, code) in fail.items():
            if key in name and (count is None or answered[key] < count):
                answered[key] += 1
                raise ClientError({"Error": {"Code": code, "Message": f"{code} (a test's fault)"},
                                   "ResponseMetadata": {"RequestId": f"test-{answered[key]}", "HTTPStatusCode": 400}},
                                  "DescribeTrainingJob")

    def make(original):
        def client_for(region, service, state_credentials=None):
            client = original(region, service, state_credentials)
            if service == "sagemaker":
                client.meta.events.register("before-parameter-build.sagemaker.DescribeTrainingJob", refuse,
                                            unique_id="moto_shim.describe_failing")  # the client is shared
            return client
        return client_for

    replace(monkeypatch, NAMES[patch][0], patch, make)
    return answered
