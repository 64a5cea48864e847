"""Doctor rules about the training image, the region and the runtime: an image the catalog
knows for the SDK and region (N009, N010, N011, N024), and the Neuron image and runtime on
the right hardware (N020, N025)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from orchestrator import catalog
from orchestrator.doctor.finding import Finding
from orchestrator.doctor.instance import NEURON_TYPES_HINT

if TYPE_CHECKING:
    from orchestrator.spec import JobSpec

ECR_REGION = re.compile(r"\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com")


def image_and_region(spec: JobSpec) -> list[Finding]:
    """N009, N010, N024, N011: the image for the SDK version and runtime, pulled from the
    job's region, which has Trainium training."""
    out = []
    regions = catalog.image_regions()
    if spec.image.uri is None:
        version = spec.image.neuron_sdk or catalog.default_sdk()
        last = catalog.last_xla_training_sdk()
        if spec.training.runtime == "xla" and catalog.version_key(version) > catalog.version_key(last):
            out.append(Finding(
                "N009-xla-after-last-sdk", "error",
                f"runtime xla with Neuron SDK {version}: PyTorch/XLA training on Trainium ended with Neuron {last}",
                f"use image.neuron_sdk: \"{last}\" for runtime xla", "image.neuron_sdk"))
        if version not in catalog.images():
            known = ", ".join(sorted(catalog.images(), key=catalog.version_key))
            out.append(Finding(
                "N010-image-unknown", "error",
                f"no PyTorch Neuron training image is known for Neuron SDK {version}",
                f"use one of {known}, or pin an image with image.uri", "image.neuron_sdk"))
    else:
        found = ECR_REGION.search(spec.image.uri)
        if found and found.group(1) != spec.region:
            out.append(Finding(
                "N024-image-uri-region", "warning",
                f"image.uri is in {found.group(1)} but the job runs in {spec.region}; SageMaker pulls the "
                "training image from the job's region",
                f"use the {spec.region} copy of the image", "image.uri"))
    if spec.region not in regions:
        out.append(Finding(
            "N011-region-unsupported", "error",
            f"region {spec.region} has no Trainium training instances or PyTorch Neuron training images in the catalog",
            f"use one of {', '.join(regions)}", "region"))
    return out


def runtime(spec: JobSpec, target: catalog.Target) -> list[Finding]:
    """N025, N020: the Neuron image needs Trainium, and Trainium needs the xla runtime."""
    neuron_image = spec.image.uri is None or f"/{catalog.image_repository()}:" in spec.image.uri
    # Types SageMaker does not train on at all get N001; this is for the ones it does.
    if neuron_image and not target.trainium and spec.instance.type in catalog.training_instance_types():
        image = spec.image.uri or (f"{catalog.image_repository()} (the catalog's image for Neuron SDK "
                                   f"{spec.image.neuron_sdk or catalog.default_sdk()})")
        return [Finding(
            "N025-neuron-image-off-trainium", "error",
            f"{spec.instance.type} has no NeuronCores, but the job runs the PyTorch Neuron training image "
            f"{image}, which needs Trainium",
            f"use a Trainium type ({NEURON_TYPES_HINT})", "instance.type")]
    if spec.training.runtime == "native" and target.trainium:
        return [Finding(
            "N020-native-on-neuron", "warning",
            f"runtime native on {spec.instance.type} runs eager PyTorch on the host CPUs: the "
            "NeuronCores stay idle (the TorchNeuron eager backend is not in the training images)",
            "use runtime: xla", "training.runtime")]
    return []
