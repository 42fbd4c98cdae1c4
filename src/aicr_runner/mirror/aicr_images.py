"""aicr's own images: the validator images of each phase, the images its checks
start, and the snapshot agent. Facts of aicr v0.11.1's source (recipes/validators/
catalog.yaml, validators/*), which later 1.x releases keep under the same names."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from aicr_runner.mirror.images import normalize
from aicr_runner.mirror.items import Item, Kind

__all__ = ["CHECK_IMAGES", "validator_items"]

_VALIDATORS = "ghcr.io/nvidia/aicr-validators"
#: Images a check starts itself (hard-coded in the validator, not in any chart).
CHECK_IMAGES: Mapping[str, tuple[str, ...]] = {
    "check-nvidia-smi": ("nvcr.io/nvidia/cuda:13.0.0-base-ubuntu22.04",),
    "gang-scheduling": ("nvidia/cuda:12.9.0-base-ubuntu24.04",),
    "secure-accelerator-access": ("nvidia/cuda:12.9.0-base-ubuntu24.04", "busybox:1.37"),
    "pod-autoscaling": ("busybox:1.37",),
    "cluster-autoscaling": ("ubuntu:22.04",),
}
#: The NCCL bandwidth check's test images, per service.
_NCCL_IMAGES: Mapping[str, tuple[str, ...]] = {
    "eks": ("public.ecr.aws/hpc-cloud/nccl-tests:cuda12.8.1-efa1.43.2-ofiv1.16.3-ncclv2.27.7-1-testsv2.16.9",),
    "gke": (
        "nvcr.io/nvidia/pytorch:25.06-py3",
        "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.20",
    ),
}


def validator_items(
    aicr_version: str,
    phases: Iterable[str],
    checks: Mapping[str, Iterable[str]],
    *,
    service: str,
    snapshot_agent: str | None,
) -> list[Item]:
    """The validator image of each phase, the images its recipe's checks start, and the agent."""
    tag = f"v{aicr_version.removeprefix('v')}"
    items: list[Item] = []
    for phase in phases:
        items.append(Item(Kind.IMAGE, f"{_VALIDATORS}/{phase}:{tag}", (f"aicr validate ({phase} phase)",)))
        for check in checks.get(phase, ()):
            started = _NCCL_IMAGES.get(service, ()) if check == "nccl-all-reduce-bw" else CHECK_IMAGES.get(check, ())
            for image in started:
                items.append(Item(Kind.IMAGE, normalize(image), (f"aicr validate check {check}",)))
    if snapshot_agent:
        items.append(Item(Kind.IMAGE, normalize(snapshot_agent), ("aicr snapshot agent",)))
    return items
