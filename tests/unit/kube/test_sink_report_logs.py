"""Sinks, the run report and log redaction."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest

from aicr_runner import logs
from aicr_runner.errors import CaptureError
from aicr_runner.kube.api import configmap_body
from aicr_runner.kube.sink import CONFIGMAP_BUDGET_BYTES, RESULT_LABELS, ConfigMapSink, DirectorySink, payload_size
from aicr_runner.run.machine import Machine
from aicr_runner.run.report import StepStatus
from aicr_runner.settings.config import LogFormat
from tests.support.fakes import FakeKubeApi


def test_configmap_sink_applies_with_result_labels_only() -> None:
    api = FakeKubeApi()
    ConfigMapSink(api, "ns").put("aicr-recipe", data={"summary.txt": "x"}, binary_data={"recipe.yaml.gz": b"\x1f"})
    stored = api.objects[("ns", "aicr-recipe")]
    assert stored["labels"] == RESULT_LABELS
    assert "app.kubernetes.io/instance" not in stored["labels"], "Argo CD label tracking would prune it"
    assert stored["binaryData"] == {"recipe.yaml.gz": b"\x1f"}


def test_configmap_sink_refuses_over_budget_payloads() -> None:
    with pytest.raises(CaptureError, match="over the 921600-byte budget"):
        ConfigMapSink(FakeKubeApi(), "ns").put("big", data={"a": "x" * (CONFIGMAP_BUDGET_BYTES + 1)})


@pytest.mark.parametrize("sink", [ConfigMapSink(FakeKubeApi(), "ns"), DirectorySink(Path("unused"))])
def test_the_sink_fits_a_payload_into_its_budget_and_says_what_it_cut(sink: ConfigMapSink | DirectorySink) -> None:
    import os

    summary = {"summary.txt": "s" * 1000}
    small = sink.fit(summary, large={"recipe.yaml": b"kind: RecipeResult\n"})
    assert (small.data, small.binary_data) == ({**summary, "recipe.yaml": "kind: RecipeResult\n"}, {})
    assert (small.compressed, small.dropped) == ((), ())
    # Over what the summary leaves, compressible: gzip-compressed, said.
    squeezed = sink.fit(summary, large={"recipe.yaml": b"x" * CONFIGMAP_BUDGET_BYTES})
    assert set(squeezed.data) == {"summary.txt"}
    assert set(squeezed.binary_data) == {"recipe.yaml.gz"}
    assert (squeezed.compressed, squeezed.dropped) == (("recipe.yaml",), ())
    # Incompressible and over the budget: dropped, said; what is kept whole stays.
    noise = os.urandom(CONFIGMAP_BUDGET_BYTES)
    cut = sink.fit(summary, large={"recipe.yaml": noise})
    assert (cut.data, cut.binary_data, cut.dropped) == (summary, {}, ("recipe.yaml",))
    # The budget is the whole payload's: what fits beside the summary, exactly, is kept.
    edge = sink.fit(summary, large={"doc": b"d" * (CONFIGMAP_BUDGET_BYTES - 1000)})
    assert edge.dropped == ()
    assert edge.compressed == ()
    assert payload_size(edge.data, edge.binary_data) == CONFIGMAP_BUDGET_BYTES


def test_the_sink_fits_a_directory_as_an_archive_or_says_it_did_not(tmp_path: Path) -> None:
    import os

    bundle = tmp_path / "evidence"
    bundle.mkdir()
    (bundle / "summary.yaml").write_text("passed: 1\n")
    sink = DirectorySink(tmp_path / "results")
    fitted = sink.fit({"pointer.yaml": "p"}, archives={"evidence.tgz": bundle})
    assert set(fitted.binary_data) == {"evidence.tgz"}
    assert fitted.dropped == ()
    (bundle / "noise.bin").write_bytes(os.urandom(CONFIGMAP_BUDGET_BYTES))
    fitted = sink.fit({"pointer.yaml": "p"}, archives={"evidence.tgz": bundle})
    assert (fitted.data, fitted.binary_data, fitted.dropped) == ({"pointer.yaml": "p"}, {}, ("evidence.tgz",))


def test_configmap_body_is_a_full_object_for_server_side_apply() -> None:
    body = configmap_body("ns", "n", data={"k": "v"}, binary_data={"b": b"\x00\x01"}, labels={"l": "1"})
    assert body["apiVersion"] == "v1"
    assert body["kind"] == "ConfigMap"
    assert body["metadata"] == {"name": "n", "namespace": "ns", "labels": {"l": "1"}}
    assert base64.b64decode(body["binaryData"]["b"]) == b"\x00\x01"


def test_directory_sink_writes_each_key_as_a_file(tmp_path: Path) -> None:
    sink = DirectorySink(tmp_path)
    sink.put("aicr-run-status", data={"report.json": "{}"}, binary_data={"x.gz": b"\x1f\x8b"})
    sink.put("aicr-run-status", data={"report.json": '{"v": 2}'})
    assert (tmp_path / "aicr-run-status" / "report.json").read_text() == '{"v": 2}'
    assert (tmp_path / "aicr-run-status" / "x.gz").read_bytes() == b"\x1f\x8b"
    assert sink.describe("aicr-run-status") == str(tmp_path / "aicr-run-status")


def test_directory_sink_refuses_path_keys(tmp_path: Path) -> None:
    with pytest.raises(CaptureError):
        DirectorySink(tmp_path).put("n", data={"..": "x"})


def test_report_json_and_summary_carry_every_step() -> None:
    report = Machine.new_report(runner_version="0.1", aicr_version="v1.2.0", criteria={"accelerator": "h100"})
    report.step("fetch").status = StepStatus.SUCCEEDED
    report.step("fetch").exit_code = 0
    report.supported_combinations = ["(service=eks)"]
    data = json.loads(report.to_json())
    assert [s["state"] for s in data["steps"]][:3] == ["fetch", "pack", "recipe"]
    assert data["steps"][0]["status"] == "succeeded"
    assert data["supportedCombinations"] == ["(service=eks)"]
    assert data["aicrVersion"] == "v1.2.0"
    assert data["runBy"] == ""  # outside a pod nothing names the writer
    text = report.summary_text()
    assert "fetch" in text
    assert "supported combinations:\n- (service=eks)" in text
    assert "run by:" not in text


def test_redaction_of_registered_secrets_and_dockerconfig() -> None:
    auth = base64.b64encode(b"robot:s3cr3t-pass").decode()
    logs.register_dockerconfig_secrets(json.dumps({"auths": {"reg.example": {"auth": auth}}}))
    logs.register_secret("tok-abcdef")
    text = f"user robot:s3cr3t-pass auth {auth} token tok-abcdef password s3cr3t-pass"
    redacted = logs.redact(text)
    for secret in ("s3cr3t-pass", auth, "tok-abcdef"):
        assert secret not in redacted
    assert "***" in redacted


def test_log_lines_are_redacted_in_both_formats() -> None:
    logs.register_secret("hunter2-token")
    for fmt in (LogFormat.CONSOLE, LogFormat.JSON):
        out = io.StringIO()
        logs.configure(fmt, stream=out)
        logs.get_logger().info("relayed hunter2-token", detail={"t": "hunter2-token"})
        assert "hunter2-token" not in out.getvalue()
        assert "relayed ***" in out.getvalue()
    out = io.StringIO()
    logs.configure(LogFormat.JSON, stream=out)
    logs.get_logger().info("hello", step="recipe")
    record = json.loads(out.getvalue())
    assert record["event"] == "hello"
    assert record["step"] == "recipe"
    assert record["level"] == "info"


def test_relayed_aicr_json_lines_read_like_text() -> None:
    line = '{"time":"t","level":"INFO","msg":"recipe generation completed","module":"aicr","components":12}'
    assert logs.format_relayed_line(line) == "recipe generation completed components=12"
    assert logs.format_relayed_line('{"level":"ERROR","msg":"command failed"}') == "ERROR command failed"
    assert logs.format_relayed_line("plain line\n") == "plain line"
    assert logs.format_relayed_line("{not json}") == "{not json}"
