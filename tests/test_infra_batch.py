"""The stack's AWS Batch resources for Inferentia2 (EnableBatch=true in infra/stack.yaml).

Asserted on the parsed template (what real CloudFormation would create, with the facts each
property depends on: botocore's batch model, the catalog, orchestrator/backends/batch/request.py), and
deployed into moto's CloudFormation, where a batch spec whose `infra:` file `infra outputs
--write` wrote is submitted to the queue and job definition the stack made.
"""

from __future__ import annotations

import fnmatch
import json
import re
import urllib.request

import boto3
import botocore.session
import pytest
import yaml
from job_waits import patience

from orchestrator import catalog, infra, request, spec
from orchestrator.backends.batch import request as batch_request

pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS..S3..BucketPolicy")

REGION = "us-east-1"
ACCOUNT = "123456789012"
STACK = "orchestrator"
BUCKET = "orchestrator-bucket-abc123"
AMI_PARAMETER = "/aws/service/ecs/optimized-ami/amazon-linux-2023/neuron/recommended/image_id"
# The RUNNABLE reasons AWS Batch can act on with jobStateTimeLimitActions (AWS Batch user guide,
# "Automatic remediation with jobStateTimeLimitActions", read 2026-12-01); the others
# (MISCONFIGURATION:SERVICE_ROLE_PERMISSIONS, ACTION_REQUIRED, UNDETERMINED) need a person.
ACTIONABLE_REASONS = {
    "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY",
    "MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE",
    "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT",
    "MISCONFIGURATION:EC2_INSTANCE_CONFIGURATION_UNSUPPORTED",
}
BATCH_TYPES = ("AWS::Batch::ComputeEnvironment", "AWS::Batch::JobQueue", "AWS::Batch::JobDefinition",
               "AWS::EC2::LaunchTemplate", "AWS::Logs::LogGroup", "AWS::IAM::InstanceProfile")


def template() -> dict:
    return infra.load_template()


def resolved(use_kms: bool = False) -> dict:
    """The template with the stack's name, account and region filled in and EnableBatch on;
    parameters stay <Name> placeholders (FindInMap is left as written)."""
    raw = template()
    context = {"AWS::Partition": "aws", "AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::StackName": STACK,
               "AWS::URLSuffix": "amazonaws.com", "Bucket": BUCKET, "Bucket.Arn": f"arn:aws:s3:::{BUCKET}"}
    context.update({name: f"<{name}>" for name in raw["Parameters"]})
    context["ImageRegistryAccount"] = raw["Parameters"]["ImageRegistryAccount"]["Default"]
    for logical_id in raw["Resources"]:
        context.setdefault(logical_id, f"<{logical_id}>")
        for attribute in ("Arn", "LatestVersionNumber"):
            context[f"{logical_id}.{attribute}"] = f"<{logical_id}.{attribute}>"
    return infra.evaluate(raw, context, {"UseKmsKey": use_kms, "HasBucketName": False, "BatchEnabled": True,
                                        "HasBatchServiceRole": False, "HasBatchImageId": False,
                                        "BatchLogsUseKms": use_kms})


def of_type(data: dict, resource_type: str) -> dict[str, dict]:
    return {name: r for name, r in data["Resources"].items() if r["Type"] == resource_type}


def queues() -> dict[str, dict]:
    """Queue name -> its properties."""
    return {q["Properties"]["JobQueueName"]: q["Properties"] for q in of_type(resolved(), "AWS::Batch::JobQueue").values()}


def job_definitions() -> dict[str, dict]:
    return {d["Properties"]["JobDefinitionName"]: d["Properties"]
            for d in of_type(resolved(), "AWS::Batch::JobDefinition").values()}


def environment_of(queue: dict) -> dict:
    (order,) = queue["ComputeEnvironmentOrder"]
    logical_id = order["ComputeEnvironment"].strip("<>")
    return resolved()["Resources"][logical_id]["Properties"]


def batch_spec(instance_type: str, spot: bool) -> spec.JobSpec:
    return spec.loads(f"""\
name: infra-batch
backend: batch
region: {REGION}
instance: {{type: {instance_type}, spot: {str(spot).lower()}}}
max_retry_attempts: 1
data: {{source: synthetic, num_workers: 1}}
compile_cache: {{uri: s3://{BUCKET}/compile-cache}}
output: {{uri: s3://{BUCKET}/jobs}}
""", "job.yaml")


def smallest_type_with(chips: int) -> str:
    return next(t for t in catalog.batch_instance_types() if catalog.instance(t).chips == chips)


# --- behind EnableBatch ---------------------------------------------------------------------


def test_every_batch_resource_is_behind_enable_batch_which_is_off_by_default():
    raw = template()
    assert raw["Parameters"]["EnableBatch"]["Default"] == "false"
    assert raw["Conditions"]["BatchEnabled"] == {"Fn::Equals": [{"Ref": "EnableBatch"}, "true"]}
    batch = {name for name, r in raw["Resources"].items() if r["Type"] in BATCH_TYPES or name.startswith("Batch")}
    assert {"BatchInstanceRole", "BatchInstanceProfile", "BatchJobRole", "BatchLaunchTemplate", "BatchLogGroup"} <= batch
    assert len(batch) == 5 + 8 + 8 + 3  # + 8 compute environments, 8 queues, 3 job definitions
    assert {name: raw["Resources"][name].get("Condition") for name in batch} == dict.fromkeys(batch, "BatchEnabled")
    # Nothing else refers to them, so a stack without EnableBatch is the stack it was.
    others = json.dumps({n: r for n, r in raw["Resources"].items() if n not in batch} | {"Outputs": raw["Outputs"]})
    assert not [name for name in batch if f'"{name}"' in others or f"{name}." in others]


def test_subnets_and_security_groups_are_parameters_a_rule_requires_with_enable_batch():
    raw = template()
    for name in ("BatchSubnets", "BatchSecurityGroupIds"):
        assert raw["Parameters"][name]["Type"] == "CommaDelimitedList" and raw["Parameters"][name]["Default"] == ""
    rule = raw["Rules"]["BatchNeedsSubnetsAndSecurityGroups"]
    assert rule["RuleCondition"] == {"Fn::Equals": [{"Ref": "EnableBatch"}, "true"]}
    asserted = json.dumps(rule["Assertions"])
    assert '"Ref": "BatchSubnets"' in asserted and '"Ref": "BatchSecurityGroupIds"' in asserted
    for env in of_type(resolved(), "AWS::Batch::ComputeEnvironment").values():
        assert env["Properties"]["ComputeResources"]["Subnets"] == "<BatchSubnets>"
        assert env["Properties"]["ComputeResources"]["SecurityGroupIds"] == "<BatchSecurityGroupIds>"


# --- the names batch_request puts in SubmitJob -------------------------------------------------


@pytest.mark.parametrize("spot", [False, True], ids=["on-demand", "spot"])
@pytest.mark.parametrize("instance_type", catalog.batch_instance_types())
def test_each_inf2_request_names_a_queue_and_job_definition_the_stack_creates(instance_type, spot):
    loaded = batch_spec(instance_type, spot)
    prepared = request.prepare(loaded)
    facts = catalog.instance(instance_type)
    queue = queues().get(prepared.request["jobQueue"])
    assert queue is not None, f"{prepared.request['jobQueue']} is not a queue of the stack ({sorted(queues())})"
    env = environment_of(queue)["ComputeResources"]
    assert env["InstanceTypes"] == [instance_type]
    assert env["Type"] == ("SPOT" if spot else "EC2")
    definition = job_definitions().get(prepared.request["jobDefinition"])
    assert definition is not None, f"{prepared.request['jobDefinition']} is not a job definition of the stack"
    devices = definition["ContainerProperties"]["LinuxParameters"]["Devices"]
    assert [d["HostPath"] for d in devices] == [f"/dev/neuron{i}" for i in range(facts.chips)]
    # The request's whole-instance resources fit the instance type the queue launches.
    wanted = {r["type"]: int(r["value"]) for r in prepared.request["containerOverrides"]["resourceRequirements"]}
    assert wanted["VCPU"] <= facts.vcpus and wanted["MEMORY"] <= facts.host_memory_gib * 1024


def test_the_stack_creates_exactly_one_queue_per_size_and_purchase_and_one_definition_per_chip_count():
    sizes = catalog.batch_instance_types()
    assert set(queues()) == {f"{STACK}-{t.replace('.', '-')}{s}" for t in sizes for s in ("", "-spot")}
    assert set(job_definitions()) == {f"{STACK}-neuron-{catalog.instance(t).chips}chip" for t in sizes}
    # Each queue has its own compute environment (devices and sizes cannot be mixed per job).
    envs = [q["ComputeEnvironmentOrder"][0]["ComputeEnvironment"] for q in queues().values()]
    assert len(set(envs)) == len(envs) == 8


# --- compute environments, launch template, AMI -------------------------------------------------


def test_compute_environments_scale_from_zero_with_the_ecs_neuron_ami_and_the_launch_template():
    raw = template()
    maxv = raw["Mappings"]["BatchMaxvCpus"]
    assert set(maxv) == set(raw["Parameters"]["BatchMaxInstances"]["AllowedValues"])
    model = botocore.session.get_session().get_service_model("batch")
    strategies = set(model.shape_for("CRAllocationStrategy").enum)
    for name, resource in of_type(resolved(), "AWS::Batch::ComputeEnvironment").items():
        props = resource["Properties"]
        assert props["Type"] == "MANAGED" and props["State"] == "ENABLED"
        # No service role: Batch uses its service-linked role (a parameter only for moto).
        assert "ServiceRole" not in props, name
        cr = props["ComputeResources"]
        (instance_type,) = cr["InstanceTypes"]
        assert cr["MinvCpus"] == 0
        key = instance_type.replace(".", "")
        assert cr["MaxvCpus"] == {"Fn::FindInMap": ["BatchMaxvCpus", "<BatchMaxInstances>", key]}
        for count, row in maxv.items():
            assert row[key] == int(count) * catalog.instance(instance_type).vcpus, (count, key)
        assert cr["InstanceRole"] == "<BatchInstanceProfile.Arn>"
        assert cr["LaunchTemplate"] == {"LaunchTemplateId": "<BatchLaunchTemplate>",
                                        "Version": "<BatchLaunchTemplate.LatestVersionNumber>"}
        assert cr["Ec2Configuration"] == [{"ImageType": "ECS_AL2023",
                                           "ImageIdOverride": "{{resolve:ssm:" + AMI_PARAMETER + "}}"}]
        assert "ImageId" not in cr  # deprecated in favour of Ec2Configuration.imageIdOverride
        assert cr["AllocationStrategy"] in strategies
        if cr["Type"] == "SPOT":
            # A spot fleet role is needed only for BEST_FIT or no strategy (botocore's batch model,
            # ComputeResource.spotIamFleetRole); price-capacity-optimized needs none.
            assert cr["AllocationStrategy"] == "SPOT_PRICE_CAPACITY_OPTIMIZED" and "SpotIamFleetRole" not in cr
    # A pinned AMI replaces the SSM parameter.
    ami = template()["Resources"]["BatchInf2XlargeEnvironment"]["Properties"]["ComputeResources"]["Ec2Configuration"]
    assert ami[0]["ImageIdOverride"]["Fn::If"][:2] == ["HasBatchImageId", {"Ref": "BatchImageId"}]


def test_launch_template_has_a_gp3_root_of_at_least_100_gib_and_requires_imdsv2():
    raw = template()
    volume = raw["Parameters"]["BatchRootVolumeGiB"]
    assert volume["MinValue"] >= 100 and volume["Default"] >= 100
    data = raw["Resources"]["BatchLaunchTemplate"]["Properties"]["LaunchTemplateData"]
    assert data["MetadataOptions"] == {"HttpEndpoint": "enabled", "HttpTokens": "required",
                                       "HttpPutResponseHopLimit": 2}
    (root,) = data["BlockDeviceMappings"]
    assert root == {"DeviceName": "/dev/xvda", "Ebs": {"VolumeType": "gp3", "VolumeSize": {"Ref": "BatchRootVolumeGiB"},
                                                      "Encrypted": True, "DeleteOnTermination": True}}


# --- queues: jobs stuck RUNNABLE are cancelled -------------------------------------------------


def test_each_queue_cancels_jobs_stuck_runnable_for_every_actionable_reason():
    model = botocore.session.get_session().get_service_model("batch")
    shape = model.shape_for("JobStateTimeLimitAction")
    states = set(model.shape_for("JobStateTimeLimitActionsState").enum)
    actions = set(model.shape_for("JobStateTimeLimitActionsAction").enum)
    wait = template()["Parameters"]["BatchCapacityWaitSeconds"]
    # botocore: maxTimeSeconds "minimum value is 600 (10 minutes) and the maximum value is 86,400".
    assert 600 <= wait["MinValue"] <= wait["Default"] <= wait["MaxValue"] <= 86400
    for name, queue in queues().items():
        limits = queue["JobStateTimeLimitActions"]
        assert {k[0].lower() + k[1:] for limit in limits for k in limit} == set(shape.members), name
        assert {limit["Reason"] for limit in limits} == ACTIONABLE_REASONS, name
        for limit in limits:
            assert limit["State"] in states and limit["State"] == "RUNNABLE"
            assert limit["Action"] in actions and limit["Action"] == "CANCEL"
            expected = "<BatchCapacityWaitSeconds>" if limit["Reason"].startswith("CAPACITY:") else 600
            assert limit["MaxTimeSeconds"] == expected, (name, limit)
        assert queue["State"] == "ENABLED"


# --- job definitions ---------------------------------------------------------------------------


def test_job_definitions_run_the_catalog_image_with_neuron_devices_memlock_shm_and_our_logs():
    image = catalog.image(None)
    raw = template()
    assert raw["Parameters"]["BatchImageTag"]["Default"] == image.tag  # the SageMaker path's default image
    sagemaker_uri = image.uri(REGION).replace(f":{image.tag}", ":<BatchImageTag>")
    for name, props in job_definitions().items():
        chips = int(name.removeprefix(f"{STACK}-neuron-").removesuffix("chip"))
        container = props["ContainerProperties"]
        assert props["Type"] == "container" and props["PlatformCapabilities"] == ["EC2"]
        assert container["Image"] == sagemaker_uri
        assert container["JobRoleArn"] == "<BatchJobRole.Arn>"
        linux = container["LinuxParameters"]
        assert linux["Devices"] == [{"HostPath": f"/dev/neuron{i}", "ContainerPath": f"/dev/neuron{i}",
                                     "Permissions": ["READ", "WRITE"]} for i in range(chips)]
        assert container["Ulimits"] == [{"Name": "memlock", "SoftLimit": -1, "HardLimit": -1}]
        # The smallest type with that many chips: the defaults a request without overrides gets.
        smallest = catalog.instance(smallest_type_with(chips))
        target = catalog.resolve(batch_spec(smallest.type, False))
        defaults = [{"type": r["Type"], "value": r["Value"]} for r in container["ResourceRequirements"]]
        assert defaults == batch_request.resources(target)
        assert 0 < linux["SharedMemorySize"] <= smallest.host_memory_gib * 1024
        assert container["LogConfiguration"] == {"LogDriver": "awslogs", "Options": {
            "awslogs-group": "<BatchLogGroup>", "awslogs-region": REGION}}
        # moto's CloudFormation needs a retry strategy; the request's own replaces it.
        assert props["RetryStrategy"] == {"Attempts": 1}


@pytest.mark.parametrize("use_kms", [False, True])
def test_the_log_group_is_the_one_the_operator_reads_with_retention_and_the_stacks_key(use_kms):
    group = resolved(use_kms)["Resources"]["BatchLogGroup"]["Properties"]
    assert group["LogGroupName"] == f"/orchestrator/{STACK}/batch"
    assert group["RetentionInDays"] == "<BatchLogRetentionDays>"
    assert (group.get("KmsKeyId") == "<EncryptionKey.Arn>") is use_kms
    operator = infra.operator_policy(None, stack_name=STACK, region=REGION)
    reads = next(st for st in operator["Statement"] if st["Sid"] == "ReadBatchJobLogs")
    assert reads["Resource"].startswith(
        f"arn:aws:logs:{REGION}:<ACCOUNT_ID>:log-group:{group['LogGroupName']}:log-stream:")


# --- roles -------------------------------------------------------------------------------------


def test_the_instance_role_is_the_ecs_instance_role_aws_documents_and_only_it_has_a_managed_policy():
    raw = resolved()
    managed = {name: r["Properties"]["ManagedPolicyArns"] for name, r in of_type(raw, "AWS::IAM::Role").items()
               if "ManagedPolicyArns" in r["Properties"]}
    # AWS Batch user guide, "Amazon ECS instance role"; AWS managed policy reference,
    # AmazonEC2ContainerServiceforEC2Role (the ECS container agent's calls).
    assert managed == {"BatchInstanceRole": ["arn:aws:iam::aws:policy/service-role/AmazonEC2ContainerServiceforEC2Role"]}
    role = raw["Resources"]["BatchInstanceRole"]["Properties"]
    assert "Policies" not in role
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]
    assert raw["Resources"]["BatchInstanceProfile"]["Properties"]["Roles"] == ["<BatchInstanceRole>"]


def test_the_job_role_is_trusted_only_by_ecs_tasks_of_this_account():
    trust = resolved()["Resources"]["BatchJobRole"]["Properties"]["AssumeRolePolicyDocument"]
    (statement,) = trust["Statement"]
    assert statement["Principal"] == {"Service": "ecs-tasks.amazonaws.com"}
    assert statement["Condition"] == {"StringEquals": {"aws:SourceAccount": ACCOUNT},
                                      "ArnLike": {"aws:SourceArn": f"arn:aws:ecs:{REGION}:{ACCOUNT}:*"}}


def test_the_operator_may_submit_to_every_queue_and_definition_of_the_stack_and_no_other():
    """SubmitJob is authorized on the job queue and on the job definition (Service
    Authorization Reference for AWS Batch; tests/data/iam_resource_formats.json)."""
    operator = infra.operator_policy(None, stack_name=STACK, region=REGION)
    arn = f"arn:aws:batch:{REGION}:<ACCOUNT_ID>"

    def allowed(action: str, resource: str) -> bool:
        return any(action in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])
                   and any(fnmatch.fnmatchcase(resource, r) for r in
                           ([st["Resource"]] if isinstance(st["Resource"], str) else st["Resource"]))
                   for st in operator["Statement"])

    for queue in queues():
        assert allowed("batch:SubmitJob", f"{arn}:job-queue/{queue}"), queue
    for definition in job_definitions():
        assert allowed("batch:SubmitJob", f"{arn}:job-definition/{definition}"), definition
        assert allowed("batch:SubmitJob", f"{arn}:job-definition/{definition}:3"), definition
    assert not allowed("batch:SubmitJob", f"{arn}:job-queue/other-inf2-xlarge")
    assert not allowed("batch:SubmitJob", f"{arn}:job-definition/other-neuron-1chip")
    # No iam:PassRole for Batch: SubmitJob passes no role (the job definition, registered by the
    # stack, carries the job role), and the reference lists no PassRole among its dependent actions.
    passes = [st for st in operator["Statement"] if st["Action"] == "iam:PassRole"]
    assert [st["Condition"] for st in passes] == [{"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}]


# --- deployed into moto, outputs written, a job submitted -------------------------------------------


@pytest.fixture
def network(moto_server):
    """A subnet, a security group and (for moto only) a Batch service role; moto's Batch docker
    runner off."""
    body = json.dumps({"batch": {"use_docker": False}}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{moto_server}/moto-api/config", data=body, method="POST"),
                           timeout=patience(10)).read()
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24")["Subnet"]["SubnetId"] for i in (1, 2)]
    group = ec2.create_security_group(GroupName="inf2", Description="inf2", VpcId=vpc)["GroupId"]
    role = boto3.client("iam").create_role(RoleName="batch-service", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    return {"subnets": subnets, "group": group, "role": role}


def test_deploy_with_enable_batch_write_outputs_and_submit_an_inf2_job_to_what_it_made(
        moto_server, moto_change_set_outputs, network, orch_home, tmp_path, monkeypatch, capsys):
    from orchestrator.backends.batch import BatchBackend
    from orchestrator.ledger import Ledger
    from tests.test_infra import run_cli

    code, out, err = run_cli(
        monkeypatch, capsys, "infra", "deploy", "--yes", "--region", REGION, "--kms",
        "--param", "EnableBatch=true", "--param", f"BatchSubnets={','.join(network['subnets'])}",
        "--param", f"BatchSecurityGroupIds={network['group']}", "--param", f"BatchServiceRoleArn={network['role']}")
    assert code == 0, err
    for resource in ("BatchInf2XlargeQueue", "BatchInf248xlargeSpotEnvironment", "BatchNeuron12ChipJobDefinition",
                     "BatchLaunchTemplate", "BatchJobRole", "BatchLogGroup"):
        assert any(resource in line and "Add" in line for line in out.splitlines()), resource
    batch = boto3.client("batch", region_name=REGION)
    made = {q["jobQueueName"]: q for q in batch.describe_job_queues()["jobQueues"]}
    assert set(made) == set(queues())
    envs = {e["computeEnvironmentArn"]: e for e in batch.describe_compute_environments()["computeEnvironments"]}
    for name, queue in made.items():
        (order,) = queue["computeEnvironmentOrder"]
        resources = envs[order["computeEnvironment"]]["computeResources"]
        assert resources["minvCpus"] == 0 and sorted(resources["subnets"]) == sorted(network["subnets"])
        assert resources["securityGroupIds"] == [network["group"]]
        assert resources["type"] == ("SPOT" if name.endswith("-spot") else "EC2")
    definitions = {d["jobDefinitionName"]: d for d in batch.describe_job_definitions()["jobDefinitions"]}
    assert set(definitions) == set(job_definitions())
    group = definitions[f"{STACK}-neuron-1chip"]["containerProperties"]["logConfiguration"]["options"]["awslogs-group"]
    (log_group,) = boto3.client("logs", region_name=REGION).describe_log_groups(logGroupNamePrefix=group)["logGroups"]
    assert log_group["retentionInDays"] == 30

    infra_file = tmp_path / "configs" / "infra.yaml"
    code, out, err = run_cli(monkeypatch, capsys, "infra", "outputs", "--region", REGION, "--write", str(infra_file))
    assert code == 0, err
    assert yaml.safe_load(infra_file.read_text())["stack_name"] == STACK
    job_file = tmp_path / "configs" / "job.yaml"
    job_file.write_text("name: vit-inf2\nbackend: batch\ninfra: infra.yaml\n"
                        "instance: {type: inf2.8xlarge, spot: true}\nmax_retry_attempts: 2\n"
                        "data: {source: synthetic, num_workers: 1}\n")
    loaded = spec.load(job_file)
    assert loaded.batch.stack == STACK
    prepared = request.prepare(loaded)
    assert prepared.request["jobQueue"] == f"{STACK}-inf2-8xlarge-spot"
    backend = BatchBackend.connect(REGION, ledger=Ledger())
    submitted = backend.submit(prepared)  # checks the queue and its compute environment first
    assert submitted.created
    (job,) = batch.describe_jobs(jobs=[submitted.arn.rsplit("/", 1)[1]])["jobs"]
    assert job["jobQueue"] == made[f"{STACK}-inf2-8xlarge-spot"]["jobQueueArn"]
    assert job["jobDefinition"] == definitions[f"{STACK}-neuron-1chip"]["jobDefinitionArn"]


def test_the_missing_queue_hint_names_parameters_the_template_has():
    from orchestrator.backends.batch.backend import DEPLOY_HINT

    named = re.findall(r"--param (\w+)=", DEPLOY_HINT)
    assert named == ["EnableBatch", "BatchSubnets", "BatchSecurityGroupIds"]
    assert set(named) <= set(template()["Parameters"])
    assert "does not create" not in DEPLOY_HINT


def test_a_deploy_without_enable_batch_creates_no_batch_resource(moto_server, moto_change_set_outputs, monkeypatch,
                                                                  capsys):
    from tests.test_infra import run_cli

    code, out, err = run_cli(monkeypatch, capsys, "infra", "deploy", "--yes", "--region", REGION)
    assert code == 0, err
    # (moto's change set lists the conditional resources as Add; CloudFormation leaves them out.)
    batch = boto3.client("batch", region_name=REGION)
    assert batch.describe_job_queues()["jobQueues"] == []
    assert batch.describe_compute_environments()["computeEnvironments"] == []
    assert batch.describe_job_definitions()["jobDefinitions"] == []
    assert boto3.client("logs", region_name=REGION).describe_log_groups(logGroupNamePrefix="/orchestrator/")[
        "logGroups"] == []
    assert boto3.client("ec2", region_name=REGION).describe_launch_templates()["LaunchTemplates"] == []
