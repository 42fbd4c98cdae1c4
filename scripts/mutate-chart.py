#!/usr/bin/env python3
"""Mutation check for the chart's render suite.

Each mutation is a deliberate breakage of a copy of chart/ (drop a guard, drop a
mount, flip a default, put a secret in env, ...). The render suite (tests/chart)
runs against the copy (AICR_CHART_DIR points it there) and must fail. A mutation
the suite does not notice "survives": the suite has a blind spot.

Every mutation names the tests that should catch it, so a run costs a few
targeted pytest calls instead of the whole suite per mutation. First the same
selection runs once against the unmodified chart and must pass, so a kill always
means the mutation was noticed, not that the tests were already red.

    scripts/mutate-chart.py            # all mutations; exit 1 if any survives
    scripts/mutate-chart.py --list
    scripts/mutate-chart.py --only drop-pod-failure-policy
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "chart"
PYTHON = ROOT / ".venv" / "bin" / "python"


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str  # relative to chart/
    edits: tuple[tuple[str, str], ...]  # (old, new); old must occur exactly once
    tests: str  # test file in tests/chart
    select: str  # pytest -k expression


def m(name: str, file: str, old: str, new: str, tests: str, select: str) -> Mutation:  # noqa: PLR0917
    """One mutation that replaces one piece of text (positional: the table reads like a table)."""
    return Mutation(name, file, ((old, new),), tests, select)


EXTRA_ENV = """        {{- with $v.job.extraEnv }}
        # job.extraEnv, verbatim, after the chart's own entries.
        {{- toYaml . | nindent 8 }}
        {{- end }}
"""

MUTATIONS: tuple[Mutation, ...] = (
    # -- guards ------------------------------------------------------------------------------------------
    m(
        "drop-no-criteria-guard",
        "templates/_validate.tpl",
        "{{- if and (not $accelerator) (not $v.dataPack) (not (and $concreteService $intent)) -}}",
        "{{- if false -}}",
        "test_guards.py",
        "g04",
    ),
    m(
        "drop-accelerator-any-guard",
        "templates/_validate.tpl",
        '{{- if and (eq $accelerator "any") (not $zeroX) -}}',
        "{{- if false -}}",
        "test_guards.py",
        "g03",
    ),
    m(
        "every-aicr-version-gets-the-1x-guard-texts",
        "templates/_validate.tpl",
        '{{- $zeroX := semverCompare "< 1.0.0-0" (toString $v.aicrVersion) -}}',
        "{{- $zeroX := false -}}",
        "test_guards.py",
        "0x",
    ),
    m(
        "a-preinstalled-aicr-gets-the-release-guards",
        "templates/_validate.tpl",
        "{{- if not $binary.path -}}",
        "{{- if true -}}",
        "test_guards.py",
        "preinstalled",
    ),
    m(
        "drop-service-alias-guard",
        "templates/_validate.tpl",
        "{{- if and (has $service $aliases) (not $zeroX) -}}",
        "{{- if false -}}",
        "test_guards.py",
        "g17b",
    ),
    m(
        "drop-intent-needs-service-guard",
        "templates/_validate.tpl",
        "{{- if and $intent (not $concreteService) -}}",
        "{{- if false -}}",
        "test_guards.py",
        "g17a",
    ),
    m(
        "drop-k0s-version-floor",
        "templates/_validate.tpl",
        '(semverCompare "< 0.22.0-0" (toString $v.aicrVersion))',
        "false",
        "test_guards.py",
        "g17c",
    ),
    m(
        "drop-signed-needs-token-guard",
        "templates/_validate.tpl",
        '{{- if and (eq (toString $publish.mode) "signed") (not $tokenSecret.name) -}}',
        "{{- if false -}}",
        "test_guards.py",
        "g10",
    ),
    m(
        "drop-one-pack-credential-guard",
        "templates/_validate.tpl",
        "{{- if and $v.dataPackSecret $packAuth -}}",
        "{{- if false -}}",
        "test_guards.py",
        "g13",
    ),
    m(
        "accept-k0s-containerd",
        "templates/_validate.tpl",
        '{{- if and (kindIs "map" $env) (hasKey $env "k0sContainerd") -}}',
        "{{- if false -}}",
        "test_guards.py",
        "g14",
    ),
    m(
        "drop-pack-transport-guard",
        "templates/_validate.tpl",
        "{{- if and (not $v.dataPack) (or $v.dataPackSecret $v.dataPackPlainHTTP $v.dataPackInsecureTLS) -}}",
        "{{- if and (not $v.dataPack) $v.dataPackSecret -}}",
        "test_guards.py",
        "g17d",
    ),
    m(
        "allow-credentials-in-extra-env",
        "templates/_validate.tpl",
        '(has $name (list "DOCKER_CONFIG" "COSIGN_IDENTITY_TOKEN"))',
        "false",
        "test_guards.py",
        "c06",
    ),
    m(
        "secret-template-skips-the-guards",
        "templates/secret-pack-auth.yaml",
        '{{- include "nvidia-aicr.validate" . -}}\n',
        "",
        "test_guards.py",
        "secret_too",
    ),
    m(
        "phases-keep-empty-entries",
        "templates/_helpers.tpl",
        "{{- if . -}}{{- $phases = append $phases (toString .) -}}{{- end -}}",
        "{{- $phases = append $phases (toString .) -}}",
        "test_job.py or test_guards.py",
        "phases or g02",
    ),
    # -- criteria ------------------------------------------------------------------------------------------
    m(
        "drop-criteria-check",
        "templates/_validate.tpl",
        '{{- include "nvidia-aicr.criteriaSupported" . -}}',
        "",
        "test_criteria.py",
        "rejects or accepts_exactly",
    ),
    m(
        "unstated-dimensions-match-any-overlay",
        "templates/_criteria.tpl",
        '{{- if and (ne $ev "any") (ne $ev (toString (get $query $d))) -}}{{- $applies = false -}}{{- end -}}',
        '{{- if and (ne $ev "any") (hasKey $query $d) (ne $ev (toString (get $query $d))) -}}'
        "{{- $applies = false -}}{{- end -}}",
        "test_criteria.py",
        "rejects or accepts_exactly",
    ),
    m(
        "data-pack-no-longer-skips-the-check",
        "templates/_criteria.tpl",
        "{{- if and $v.criteriaPreflight (not $v.dataPack) (not $binary.path) -}}",
        "{{- if and $v.criteriaPreflight (not $binary.path) -}}",
        "test_criteria.py",
        "data_pack",
    ),
    m(
        "a-preinstalled-aicr-no-longer-skips-the-check",
        "templates/_criteria.tpl",
        "{{- if and $v.criteriaPreflight (not $v.dataPack) (not $binary.path) -}}",
        "{{- if and $v.criteriaPreflight (not $v.dataPack) -}}",
        "test_criteria.py",
        "preinstalled",
    ),
    m(
        "check-ignores-the-catalog-version",
        "templates/_criteria.tpl",
        '{{- if eq (trimPrefix "v" $catalogVersion) (trimPrefix "v" (toString $v.aicrVersion)) -}}',
        "{{- if true -}}",
        "test_criteria.py",
        "another_aicr_version",
    ),
    # -- the Job and its name ------------------------------------------------------------------------------
    m(
        "name-by-release-revision",
        "templates/_helpers.tpl",
        "($identity | sha256sum | trunc 10)",
        "(.Release.Revision | toString)",
        "test_job.py",
        "job_name",
    ),
    # The identity before issue 13: a list of run-defining settings instead of the
    # pod template, so a change to scheduling or resources kept the name and the
    # upgrade failed with "field is immutable".
    m(
        "name-hashes-the-settings-not-the-pod-template",
        "templates/_helpers.tpl",
        '{{- $identity := include "nvidia-aicr.immutableJobSpec" . -}}',
        '{{- $identity := include "nvidia-aicr.runtimeEnv" . -}}',
        "test_job_identity.py",
        "tolerations or resources",
    ),
    # The bug of issue 13: the chart version on the pod template. Same values, new
    # chart version: the same Job name with another template ("field is immutable").
    m(
        "pod-template-carries-the-chart-version",
        "templates/_helpers.tpl",
        "app.kubernetes.io/component: installer\n{{- with .Values.job.podLabels }}",
        'app.kubernetes.io/component: installer\nhelm.sh/chart: {{ include "nvidia-aicr.chart" . | quote }}\n'
        "{{- with .Values.job.podLabels }}",
        "test_job_identity.py",
        "chart_version",
    ),
    m(
        "pod-template-carries-the-app-version",
        "templates/_helpers.tpl",
        "app.kubernetes.io/component: installer\n{{- with .Values.job.podLabels }}",
        "app.kubernetes.io/component: installer\napp.kubernetes.io/version: {{ .Chart.AppVersion | quote }}\n"
        "{{- with .Values.job.podLabels }}",
        "test_job_identity.py",
        "chart_version",
    ),
    # The bug of issue 9: hashing raw values splits the name between Helm 3 and Helm 4
    # (Helm 4 drops null defaults) and renames the Job on every TTL or credential change.
    m(
        "name-hashes-raw-values",
        "templates/_helpers.tpl",
        '{{- $identity := include "nvidia-aicr.immutableJobSpec" . -}}',
        '{{- $identity := printf "%s%s" (include "nvidia-aicr.immutableJobSpec" .) (toJson .Values) -}}',
        "test_job_identity.py",
        "TTL or helm3 or rotating",
    ),
    m(
        "name-ignores-the-rerun-token",
        "templates/_helpers.tpl",
        '(toString (default "" .Values.rerun))',
        '""',
        "test_job_identity.py",
        "rerun",
    ),
    m(
        "drop-pod-failure-policy",
        "templates/_pod.tpl",
        "\npodFailurePolicy:\n",
        "\npodFailurePolicyX:\n",
        "test_job.py",
        "pod_failure_policy",
    ),
    m(
        "drop-read-only-root",
        "templates/_pod.tpl",
        "        readOnlyRootFilesystem: true\n",
        "",
        "test_job.py",
        "locked_down",
    ),
    m("drop-run-as-non-root", "templates/_pod.tpl", "    runAsNonRoot: true\n", "", "test_job.py", "locked_down"),
    m(
        "always-render-ttl",
        "templates/job.yaml",
        '  {{- if not (kindIs "invalid" $v.job.ttlSecondsAfterFinished) }}\n'
        "  ttlSecondsAfterFinished: {{ int64 $v.job.ttlSecondsAfterFinished }}\n  {{- end }}",
        "  ttlSecondsAfterFinished: {{ int64 $v.job.ttlSecondsAfterFinished }}",
        "test_job.py",
        "ttl",
    ),
    m(
        "ignore-image-digest",
        "templates/_helpers.tpl",
        "{{- if $img.digest -}}",
        "{{- if false -}}",
        "test_job.py",
        "image_defaults",
    ),
    m(
        "drop-pack-auth-mount",
        "templates/_pod.tpl",
        "        - name: pack-auth\n          mountPath: /etc/aicr-runner/pack-auth\n          readOnly: true\n",
        "",
        "test_job.py",
        "pack",
    ),
    m(
        "identity-token-as-env",
        "templates/_pod.tpl",
        "        - name: AICR_RUNNER_SHUTDOWN_GRACE_SECONDS\n",
        '        {{- if eq $identityToken "true" }}\n        - name: COSIGN_IDENTITY_TOKEN\n'
        "          valueFrom:\n            secretKeyRef:\n"
        "              name: {{ $publish.identityTokenSecret.name | quote }}\n"
        "              key: {{ $publish.identityTokenSecret.key | quote }}\n        {{- end }}\n"
        "        - name: AICR_RUNNER_SHUTDOWN_GRACE_SECONDS\n",
        "test_job.py",
        "signed",
    ),
    m(
        "push-credential-mounted-without-a-secret",
        "templates/_helpers.tpl",
        "{{- if and .Values.validate.publish.enabled .Values.validate.publish.registrySecret -}}true{{- end -}}",
        "{{- if .Values.validate.publish.enabled -}}true{{- end -}}",
        "test_job.py",
        "push_credential",
    ),
    Mutation(
        "extra-env-before-chart-env",
        "templates/_pod.tpl",
        ((EXTRA_ENV, ""), ("      env:\n", "      env:\n" + EXTRA_ENV)),
        "test_job.py",
        "extra_env",
    ),
    m(
        "shutdown-grace-without-margin",
        "templates/_helpers.tpl",
        "(sub (int64 .Values.job.terminationGracePeriodSeconds) 15)",
        "(int64 .Values.job.terminationGracePeriodSeconds)",
        "test_job.py or test_contract.py",
        "grace",
    ),
    m(
        "binding-name-without-namespace",
        "templates/_helpers.tpl",
        '{{- printf "%s-%s-installer" .Release.Namespace .Release.Name | trunc 253 | trimSuffix "-" -}}',
        '{{- printf "%s-installer" .Release.Name -}}',
        "test_job.py",
        "rbac or binding",
    ),
    m(
        "unknown-runtime-variable",
        "templates/_helpers.tpl",
        "AICR_RUNNER_WORK_DIR: /work\n",
        'AICR_RUNNER_WORK_DIR: /work\nAICR_RUNNER_RETRIES: "3"\n',
        "test_contract.py",
        "every_runtime_setting",
    ),
    m(
        "runtime-setting-not-rendered",
        "templates/_helpers.tpl",
        "AICR_RUNNER_BUNDLE__STORAGE_CLASS: {{ toString $v.storageClass | quote }}\n",
        "",
        "test_contract.py",
        "every_runtime_setting",
    ),
    # -- chart knobs --------------------------------------------------------------------------------------
    m(
        "global-image-registry-ignored",
        "templates/_helpers.tpl",
        "{{- if $registry -}}",
        "{{- if false -}}",
        "test_job.py",
        "image_registry",
    ),
    m(
        "global-pull-secrets-ignored",
        "templates/_helpers.tpl",
        "{{- $global = default list .Values.global.imagePullSecrets -}}",
        "",
        "test_job.py",
        "pull_secrets",
    ),
    m(
        "schema-accepts-a-tag-in-the-repository",
        "values.schema.json",
        '"pattern": "^([a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?(:[0-9]+)?/)?[a-z0-9]+',
        '"pattern": "^.*$|^([a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?(:[0-9]+)?/)?[a-z0-9]+',
        "test_guards.py",
        "repository",
    ),
    m(
        "drop-repository-tag-guard",
        "templates/_validate.tpl",
        '{{- else if contains ":" $lastPart -}}',
        "{{- else if false -}}",
        "test_guards.py",
        "repository",
    ),
    m(
        "service-account-name-ignored",
        "templates/_helpers.tpl",
        "{{- if .Values.serviceAccount.name -}}",
        "{{- if false -}}",
        "test_job.py",
        "service_account",
    ),
    m(
        "rbac-always-cluster-admin",
        "templates/clusterrolebinding.yaml",
        "{{ if .Values.rbac.clusterAdmin }}cluster-admin{{ else }}",
        "{{ if true }}cluster-admin{{ else }}",
        "test_job.py",
        "rbac",
    ),
    m(
        "narrow-role-without-escalate-and-bind",
        "templates/clusterrole.yaml",
        '"delete", "escalate", "bind"]',
        '"delete"]',
        "test_job.py",
        "rbac",
    ),
    m(
        "role-loses-the-result-configmaps",
        "templates/role.yaml",
        "    resourceNames: {{ toJson $configMaps }}\n",
        '    resourceNames: ["aicr-run-status"]\n',
        "test_job.py",
        "rbac",
    ),
    m(
        "role-reaches-every-job",
        "templates/role.yaml",
        '    resourceNames: [{{ include "nvidia-aicr.jobName" . | quote }}]\n',
        "",
        "test_job.py",
        "rbac",
    ),
    m(
        "extra-volumes-dropped",
        "templates/_pod.tpl",
        "    {{- with $v.job.extraVolumes }}",
        "    {{- with false }}",
        "test_job.py",
        "extra_volumes",
    ),
    m(
        "extra-volume-may-replace-a-chart-volume",
        "templates/_validate.tpl",
        "{{- if has $name $chartVolumes -}}",
        "{{- if false -}}",
        "test_guards.py",
        "extra_volume",
    ),
    m(
        "pod-labels-dropped",
        "templates/_helpers.tpl",
        "{{- with .Values.job.podLabels }}",
        "{{- with false }}",
        "test_job.py",
        "pod_labels",
    ),
    # -- values and schema --------------------------------------------------------------------------------
    m(
        "flip-log-format-default",
        "values.yaml",
        "logFormat: console\n",
        "logFormat: json\n",
        "test_job.py or test_contract.py",
        "default",
    ),
    m(
        "ttl-default-3600",
        "values.yaml",
        "  ttlSecondsAfterFinished: null\n",
        "  ttlSecondsAfterFinished: 3600\n",
        "test_job.py",
        "ttl",
    ),
    m(
        "schema-accepts-unknown-keys",
        "values.schema.json",
        '  "type": "object",\n  "additionalProperties": false,\n  "properties": {\n    "global"',
        '  "type": "object",\n  "properties": {\n    "global"',
        "test_guards.py",
        "schema",
    ),
    m(
        "provenance-off-by-default",
        "values.yaml",
        "  mode: require\n",
        '  mode: "off"\n',
        "test_job.py",
        "notes_say_whether",
    ),
    m(
        "provenance-fail-closed-not-in-pod-failure-policy",
        "templates/_pod.tpl",
        "values: [2, 4, 21, 24, 25, 29]",
        "values: [2, 4, 21, 24, 25]",
        "test_job.py",
        "failure_policy or pod_failure",
    ),
    m(
        "notes-forget-the-pack-check",
        "templates/NOTES.txt",
        "  criteria against aicr's catalog: the runtime checks them against the pack when",
        "  criteria against aicr's catalog.",
        "test_job.py",
        "notes",
    ),
)


def _pytest(chart: Path, tests: str, select: str) -> subprocess.CompletedProcess[str]:
    files = [str(ROOT / "tests" / "chart" / name.strip()) for name in tests.split(" or ")]
    # One helm major: a mutation is about the chart's logic, which both majors share.
    env = dict(os.environ, AICR_CHART_DIR=str(chart), AICR_CHART_HELM_MAJORS="4", PYTHONDONTWRITEBYTECODE="1")
    argv = [str(PYTHON), "-m", "pytest", *files, "-x", "-q", "-p", "no:cacheprovider", "-k", select,
            "-o", "addopts=", "--timeout=300"]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, check=False, timeout=900)


def _apply(mutation: Mutation, work: Path) -> Path:
    copy = work / mutation.name / "chart"
    shutil.copytree(CHART, copy)
    target = copy / mutation.file
    text = target.read_text()
    for old, new in mutation.edits:
        found = text.count(old)
        if found != 1:
            raise RuntimeError(f"{mutation.name}: expected the text once in {mutation.file}, found {found}: {old!r}")
        text = text.replace(old, new)
    target.write_text(text)
    return copy


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--only", action="append", default=[], help="run only this mutation (repeatable)")
    parser.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    args = parser.parse_args(argv)

    mutations = [mu for mu in MUTATIONS if not args.only or mu.name in args.only]
    if args.list:
        for mu in MUTATIONS:
            print(f"{mu.name:45} {mu.file:32} {mu.tests} -k '{mu.select}'")
        return 0
    if not mutations:
        print(f"mutate-chart: no mutation named {args.only}", file=sys.stderr)
        return 2

    # Baseline: every selection passes on the unmodified chart.
    files = sorted({name.strip() for mu in mutations for name in mu.tests.split(" or ")})
    union = " or ".join(f"({mu.select})" for mu in mutations)
    baseline = _pytest(CHART, " or ".join(files), union)
    if baseline.returncode != 0:
        print("mutate-chart: the selected tests fail on the unmodified chart:", file=sys.stderr)
        print(baseline.stdout[-4000:] + baseline.stderr[-2000:], file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="mutate-chart-") as tmp:
        work = Path(tmp)

        def run(mutation: Mutation) -> tuple[Mutation, str, str]:
            try:
                chart = _apply(mutation, work)
            except RuntimeError as exc:
                return mutation, "error", str(exc)
            proc = _pytest(chart, mutation.tests, mutation.select)
            if proc.returncode == 1:
                failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
                return mutation, "killed", failed[0] if failed else "a test failed"
            if proc.returncode == 0:
                return mutation, "survived", "every selected test passed"
            return mutation, "error", f"pytest exited {proc.returncode}: {proc.stdout[-600:]}{proc.stderr[-600:]}"

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(run, mutations))

    for mutation, outcome, detail in results:
        print(f"{outcome:9} {mutation.name}: {detail}")
    killed = sum(1 for _, outcome, _ in results if outcome == "killed")
    print(f"mutate-chart: {killed}/{len(results)} mutations killed")
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
