"""The data pack's OCI vocabulary and limits, and its reference check.

Shared by the pull (which verifies and places layers) and the registry client
(which asks for manifests): the media types a pack may use, the annotations the
Go oras CLI places layers by, and the bounds that stop a hostile registry from
filling the disk.
"""

from __future__ import annotations

from aicr_runner.errors import ConfigError
from aicr_runner.net.reference import InvalidReference, PackReference

__all__ = [
    "ACCEPTED_MANIFEST_TYPES",
    "ANNOTATION_TITLE",
    "ANNOTATION_UNPACK",
    "DOCKER_MANIFEST",
    "INDEX_MEDIA_TYPES",
    "MAX_LAYERS",
    "MAX_MANIFEST_BYTES",
    "MAX_PACK_BLOB_BYTES",
    "MAX_PACK_MEMBERS",
    "MAX_PACK_UNPACKED_BYTES",
    "MAX_PARALLEL_FETCHES",
    "OCI_MANIFEST",
    "TAR_GZIP_MEDIA_TYPES",
    "parse_ref",
]


ANNOTATION_TITLE = "org.opencontainers.image.title"
ANNOTATION_UNPACK = "io.deis.oras.content.unpack"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_MEDIA_TYPES = frozenset(
    {"application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"}
)
TAR_GZIP_MEDIA_TYPES = frozenset(
    {"application/vnd.oci.image.layer.v1.tar+gzip", "application/vnd.docker.image.rootfs.diff.tar.gzip"}
)
#: Indexes are accepted on the wire only so they can be reported clearly.
ACCEPTED_MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST, *sorted(INDEX_MEDIA_TYPES))

MAX_MANIFEST_BYTES = 4 * 1024 * 1024
MAX_LAYERS = 256
#: Packs are YAML; these bounds only stop a hostile registry from filling the disk.
MAX_PACK_BLOB_BYTES = 256 * 1024 * 1024
MAX_PACK_UNPACKED_BYTES = 1024 * 1024 * 1024
MAX_PACK_MEMBERS = 50_000
#: Blobs fetched at once (the Go oras CLI fetches 3).
MAX_PARALLEL_FETCHES = 4


def parse_ref(ref: str) -> PackReference:
    try:
        return PackReference.parse(ref)
    except InvalidReference as exc:
        raise ConfigError([f"AICR_RUNNER_PACK__REF={ref!r}: {exc}"]) from exc
