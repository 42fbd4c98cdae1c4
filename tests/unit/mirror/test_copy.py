"""``copy_all``'s decisions with a fake copier (the real one, oras and helm against
real registries, is tests/integration/test_mirror_copy.py): where each item lands,
what is sent again, and the final check by digest."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from aicr_runner.mirror.copy import copy_all, target_of
from aicr_runner.mirror.errors import CopyError, MirrorExit
from aicr_runner.mirror.items import Item, Kind

D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
IMAGE = Item(Kind.IMAGE, "nvcr.io/nvidia/driver:580-ubuntu24.04", ("gpu-operator",))
OCI_CHART = Item(
    Kind.CHART,
    "x",
    ("kai",),
    chart_source="oci://ghcr.io/nvidia/kai-scheduler",
    chart_name="kai-scheduler",
    version="v1",
)
REPO_CHART = Item(
    Kind.CHART, "y", ("cm",), chart_source="https://charts.jetstack.io", chart_name="cert-manager", version="v1.17.2"
)
FILE = Item(Kind.FILE, "https://r.example/aicr.tar.gz", ("fetch",))


@dataclass
class FakeCopier:
    manifests: dict[str, str] = field(default_factory=dict)
    charts: dict[str, str] = field(default_factory=dict)
    sent: list[str] = field(default_factory=list)
    #: What a copy puts in the target instead of the source's digest (a corrupting copier).
    lands_as: str | None = None
    #: A copy that reports success but leaves nothing.
    loses: bool = False

    def digest(self, reference: str, *, source_side: bool) -> str | None:
        return self.manifests.get(reference)

    def copy(self, source: str, target: str) -> str:
        self.sent.append(target)
        landed = self.lands_as or self.manifests[source]
        if not self.loses:
            self.manifests[target] = landed
        return landed

    def chart_digest(self, reference: str) -> str | None:
        return self.charts.get(reference)

    def push_chart(self, source: str, chart: str, version: str, target: str) -> tuple[str, bool]:
        if self.charts.get(target) == D2:
            return D2, False
        self.sent.append(target)
        self.charts[target] = D2
        return D2, True


def test_each_item_lands_under_its_upstream_host() -> None:
    assert target_of(IMAGE, "oci://m:5000/air/") == "m:5000/air/nvcr.io/nvidia/driver:580-ubuntu24.04"
    assert target_of(OCI_CHART, "oci://m/air") == "m/air/ghcr.io/nvidia/kai-scheduler/kai-scheduler:v1"
    assert target_of(REPO_CHART, "oci://m/air") == "m/air/charts.jetstack.io/cert-manager:v1.17.2"
    pinned = Item(Kind.IMAGE, "127.0.0.1:5001/a/b@" + D1)
    assert target_of(pinned, "oci://m") == "m/127.0.0.1_5001/a/b@" + D1


def test_a_second_run_sends_nothing_and_files_are_named_not_copied() -> None:
    copier = FakeCopier({IMAGE.reference: D1, "ghcr.io/nvidia/kai-scheduler/kai-scheduler:v1": D2})
    first = copy_all([IMAGE, OCI_CHART, REPO_CHART, FILE], "oci://m/air", copier)
    assert (first.sent, len(first.copied)) == (3, 3)
    assert [item for item, _ in first.not_copied] == [FILE]
    again = copy_all([IMAGE, OCI_CHART, REPO_CHART, FILE], "oci://m/air", copier)
    assert again.sent == 0
    assert len(copier.sent) == 3


def test_an_item_missing_at_its_source_is_named() -> None:
    with pytest.raises(CopyError) as caught:
        copy_all([IMAGE], "oci://m", FakeCopier())
    assert (caught.value.exit_code, caught.value.reference) == (MirrorExit.NOT_FOUND, IMAGE.reference)


def test_a_copy_that_lands_another_digest_fails_closed() -> None:
    with pytest.raises(CopyError) as caught:
        copy_all([IMAGE], "oci://m", FakeCopier({IMAGE.reference: D1}, lands_as=D2))
    assert caught.value.exit_code == MirrorExit.DIGEST_MISMATCH
    assert caught.value.message == (
        f"digest mismatch: m/nvcr.io/nvidia/driver:580-ubuntu24.04: copied {D2}, the source has {D1}"
    )


def test_the_final_check_names_an_item_the_target_lost() -> None:
    with pytest.raises(CopyError) as caught:
        copy_all([IMAGE], "oci://m", FakeCopier({IMAGE.reference: D1}, loses=True))
    assert caught.value.exit_code == MirrorExit.INCOMPLETE
    assert caught.value.message.startswith("missing from the target: m/nvcr.io/nvidia/driver:580-ubuntu24.04")


def test_every_mirror_exit_code_is_documented() -> None:
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[3] / "docs" / "configuration.md").read_text()
    table = docs.split("<!-- exit-codes:start -->")[1].split("<!-- exit-codes:end -->")[0]
    for code in MirrorExit:
        (row,) = [line for line in table.splitlines() if line.startswith(f"| {int(code)} |")]
        assert "`aicr-runner mirror` only" in row


def test_an_absent_item_the_user_allowed_is_reported_and_the_rest_copied() -> None:
    copier = FakeCopier({IMAGE.reference: D1})
    absent = Item(
        Kind.IMAGE, "nvcr.io/nvidia/cloud-native/nvidia-fs:2.26.6", ("gpu-operator (ClusterPolicy spec.gds)",)
    )
    report = copy_all([absent, IMAGE], "oci://m", copier, allow_missing=frozenset({absent.reference}))
    assert [c.item for c in report.copied] == [IMAGE]
    ((item, why),) = report.not_copied
    assert item == absent
    assert why.startswith("not at its source, allowed by --allow-missing: not found at its source: nvcr.io/")
    # Allowing one reference allows no other.
    with pytest.raises(CopyError) as caught:
        copy_all([absent], "oci://m", copier, allow_missing=frozenset({"nvcr.io/other:1"}))
    assert caught.value.exit_code == MirrorExit.NOT_FOUND


def test_a_repository_chart_the_target_holds_by_its_recorded_digest_is_not_pulled_again() -> None:
    recorded = Item(
        Kind.CHART, "y", ("cm",), D2, chart_source="https://charts.jetstack.io", chart_name="cert-manager", version="v1"
    )
    copier = FakeCopier()
    pulls: list[str] = []
    push = copier.push_chart

    def counted(source: str, chart: str, version: str, target: str) -> tuple[str, bool]:
        pulls.append(target)
        return push(source, chart, version, target)

    copier.push_chart = counted  # type: ignore[method-assign]
    assert copy_all([recorded], "oci://m", copier).sent == 1
    assert copy_all([recorded], "oci://m", copier).sent == 0
    assert len(pulls) == 1  # the second run read the target's digest and pulled nothing
    copier.charts[target_of(recorded, "oci://m")] = D1  # the target holds another archive: pulled and pushed
    assert copy_all([recorded], "oci://m", copier).sent == 1
    assert len(pulls) == 2
