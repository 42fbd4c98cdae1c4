#!/usr/bin/env python3
"""Mutation check for the chart's render suite.

Each mutation is a deliberate breakage of the chart (drop a guard, drop a mount,
flip a default, put a secret in env, ...) and names the tests of tests/chart that
are meant to catch it. One pytest session collects those tests once, against a
copy of chart/ (AICR_CHART_DIR points the suite there, Helm 4 only: a mutation is
about the chart's logic, which both majors share). Then, for each mutation, the
script edits the copy, runs the named tests in order until one fails and puts the
copy back. A mutation whose named tests all pass "survives": the suite has a blind
spot. A named test the suite does not have is an error, so renaming a test cannot
disarm a check. Each test that killed a mutation then runs once more against the
unmodified chart and must pass there: a kill means the mutation was noticed, not
that the test was red anyway. The mutations are split over --jobs such sessions
(processes; default: the cores, 4 at most): helm and the suite's Python each keep
a core busy.

    scripts/mutate-chart.py                # all mutations
    scripts/mutate-chart.py --list
    scripts/mutate-chart.py --only drop-pod-failure-policy
    scripts/mutate-chart.py --only drop-read-only-root --tests test_job.py::test_ttl_is_rendered_only_when_set
        # the same breakage against other tests: which tests catch a new mutation?

Exit 0: every mutation killed. 1: a mutation survived or could not be checked
(its text is not in the chart, a named test does not exist, a killing test fails
on the unmodified chart too). 2: bad arguments, or the named tests' files did not
collect.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "chart"
SUITE = "tests/chart"
#: A test of the render suite: <file>::<function> (every parametrization) or <file>::<function>[<id>].
TEST_ID = re.compile(r"test_\w+\.py::test_\w+(\[.+\])?")


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str  # relative to chart/
    edits: tuple[tuple[str, str], ...]  # (old, new); old must occur exactly once
    tests: tuple[str, ...]  # the tests meant to catch it (TEST_ID, relative to tests/chart), cheapest first

    def __post_init__(self) -> None:
        if not self.tests:
            raise ValueError(f"mutation {self.name}: names no test that must catch it")
        for test in self.tests:
            if not TEST_ID.fullmatch(test):
                raise ValueError(
                    f"mutation {self.name}: {test!r} is not a test id; write <file>.py::<test function> "
                    "or <file>.py::<test function>[<parameter id>] (relative to tests/chart)"
                )


def m(name: str, file: str, old: str, new: str, *tests: str) -> Mutation:
    """One mutation that replaces one piece of text (positional: the table reads like a table)."""
    return Mutation(name, file, ((old, new),), tests)


EXTRA_ENV = """        {{- with $v.job.extraEnv }}
        # job.extraEnv, verbatim, after the chart's own entries.
        {{- toYaml . | nindent 8 }}
        {{- end }}
"""

MUTATIONS: tuple[Mutation, ...] = (
    # -- the compatibility layer of the values regrouping ---------------------------------------------------
    m(
        "null-guard-off",
        "templates/_validate-nulls.tpl",
        '{{- if or (not $found) (kindIs "invalid" $node) -}}',
        "{{- if false -}}",
        "test_guards.py::test_c20_a_null_the_chart_cannot_render_is_refused[helm4-string]",
    ),
    m(
        "null-guard-blind-to-a-null-map-above",
        "templates/_validate-nulls.tpl",
        "{{- $found = false -}}",
        "",
        "test_guards.py::test_c20_a_null_the_chart_cannot_render_is_refused[helm4-group]",
    ),
    m(
        "helm-apply-guard-off",
        "templates/_validate-run.tpl",
        '{{- if not (has $apply (list "client" "server" "auto")) -}}',
        "{{- if false -}}",
        "test_guards.py::test_c19_deploy_helm_apply_is_refused_without_the_schema_too[helm4-bogus]",
    ),
    m(
        "renamed-values-not-honoured",
        "templates/_compat.tpl",
        "{{- if $set -}}",
        "{{- if false -}}",
        "test_renamed_values.py::test_an_upgrade_with_unchanged_values_renders_what_the_chart_rendered_before",
        "test_renamed_values.py::test_an_earlier_name_renders_what_its_new_name_renders",
    ),
    m(
        "renamed-value-dropped-from-the-list",
        "templates/_renamed.tpl",
        '- {old: deployFlags, new: deploy.flags, default: "--best-effort --no-wait"}\n',
        "",
        "test_renamed_values.py::test_an_earlier_name_renders_what_its_new_name_renders[helm4-deployFlags]",
    ),
    m(
        "drop-renamed-value-conflict-guard",
        "templates/_compat.tpl",
        "{{- else if ne (toJson $new) (toJson $old) -}}",
        "{{- else if false -}}",
        "test_renamed_values.py::test_c18_an_earlier_name_and_its_new_name_set_apart_fail",
    ),
    m(
        "an-earlier-name-wins-over-a-set-new-name",
        "templates/_compat.tpl",
        "{{- if eq (toJson $new) (toJson $entry.default) -}}",
        "{{- if true -}}",
        "test_renamed_values.py::test_c18_an_earlier_name_and_its_new_name_set_apart_fail",
    ),
    m(
        "c18-shows-a-credential",
        "templates/_compat.tpl",
        "{{- if $entry.secret -}}",
        "{{- if false -}}",
        "test_renamed_values.py::test_c18_an_earlier_name_and_its_new_name_set_apart_fail",
    ),
    m(
        "g11-earlier-name-unchecked",
        "templates/_validate-pack.tpl",
        '{{- range $key, $auth := dict "pack.auth" $v.pack.auth "dataPackAuth" $v.dataPackAuth -}}',
        '{{- range $key, $auth := dict "pack.auth" $v.pack.auth -}}',
        "test_guards.py::test_g11_scalar_data_pack_auth_is_rejected",
    ),
    m(
        "g01-earlier-name-unchecked",
        "templates/_validate-removed.tpl",
        '{{- if and (hasKey $v "aicrSha256") (not (kindIs "map" $v.aicrSha256)) -}}',
        "{{- if false -}}",
        "test_guards.py::test_g01_scalar_aicr_sha256_is_rejected",
    ),
    # -- guards ------------------------------------------------------------------------------------------
    m(
        "drop-no-criteria-guard",
        "templates/_validate-criteria.tpl",
        "{{- if and (not $accelerator) (not $v.pack.ref) (not (and $concreteService $intent)) -}}",
        "{{- if false -}}",
        "test_guards.py::test_g04_bare_defaults_are_rejected",
        "test_guards.py::test_g04_a_concrete_service_alone_is_not_enough",
        "test_guards.py::test_g04_intent_alone_with_service_any_is_rejected",
    ),
    m(
        "drop-exists-toleration-with-a-value-guard",
        "templates/_validate-cluster.tpl",
        '(ne (toString (default "" $t.value)) "") -}}',
        "false -}}",
        "test_snapshot.py::test_an_exists_toleration_with_a_value_is_refused_not_rendered_without_it",
    ),
    m(
        "snapshot-toleration-objects-always-equal",
        "templates/_helpers.tpl",
        '(eq (toString (default "Equal" .operator)) "Exists")',
        "false",
        "test_snapshot.py::test_kubernetes_toleration_objects_become_aicrs_form_beside_its_own_strings",
    ),
    m(
        "drop-accelerator-any-guard",
        "templates/_validate-criteria.tpl",
        '{{- if and (eq $accelerator "any") (not $zeroX) -}}',
        "{{- if false -}}",
        "test_guards.py::test_g03_accelerator_any_is_rejected",
    ),
    m(
        "every-aicr-version-gets-the-1x-guard-texts",
        "templates/_validate-criteria.tpl",
        '{{- $zeroX := semverCompare "< 1.0.0-0" (toString $v.aicr.version) -}}',
        "{{- $zeroX := false -}}",
        "test_guards.py::test_g03_and_g17b_say_what_an_0x_aicrversion_does_with_the_value",
    ),
    m(
        "a-preinstalled-aicr-gets-the-release-guards",
        "templates/_validate-criteria.tpl",
        "{{- if not $binary.path -}}",
        "{{- if true -}}",
        "test_guards.py::test_g03_and_g17b_leave_a_preinstalled_aicr_to_the_runtime_which_asks_its_version",
    ),
    m(
        "drop-service-alias-guard",
        "templates/_validate-criteria.tpl",
        "{{- if and (has $service $aliases) (not $zeroX) -}}",
        "{{- if false -}}",
        "test_guards.py::test_g17b_service_aliases_are_rejected_with_a_pointer_to_any",
    ),
    m(
        "drop-intent-needs-service-guard",
        "templates/_validate-criteria.tpl",
        "{{- if and $intent (not $concreteService) -}}",
        "{{- if false -}}",
        "test_guards.py::test_g17a_intent_with_service_any_is_rejected_even_with_an_accelerator",
    ),
    m(
        "drop-k0s-version-floor",
        "templates/_validate-criteria.tpl",
        '(semverCompare "< 0.22.0-0" (toString $v.aicr.version))',
        "false",
        "test_guards.py::test_g17c_k0s_needs_aicr_v0_22",
    ),
    m(
        "drop-signed-needs-token-guard",
        "templates/_validate-outputs.tpl",
        '{{- if and (eq (toString $publish.mode) "signed") (not $tokenSecret.name) -}}',
        "{{- if false -}}",
        "test_guards.py::test_g10_signed_mode_needs_a_token_secret",
    ),
    m(
        "drop-one-pack-credential-guard",
        "templates/_validate-pack.tpl",
        "{{- if and $v.pack.secret $packAuth -}}",
        "{{- if false -}}",
        "test_guards.py::test_g13_one_pack_credential_source",
    ),
    m(
        "accept-k0s-containerd",
        "templates/_validate-removed.tpl",
        '{{- if and (kindIs "map" $env) (hasKey $env "k0sContainerd") -}}',
        "{{- if false -}}",
        "test_guards.py::test_g14_k0s_containerd_fails_with_the_removal_message",
    ),
    m(
        "drop-pack-transport-guard",
        "templates/_validate-pack.tpl",
        "{{- if and (not $v.pack.ref) (not $v.aicr.releaseRef) (or $v.pack.secret $v.pack.plainHTTP "
        "$v.pack.insecureTLS) -}}",
        "{{- if and (not $v.pack.ref) (not $v.aicr.releaseRef) $v.pack.secret -}}",
        "test_guards.py::test_g17d_pack_transport_settings_need_a_pack",
    ),
    m(
        "pack-transport-guard-ignores-the-release-ref",
        "templates/_validate-pack.tpl",
        "{{- if and (not $v.pack.ref) (not $v.aicr.releaseRef) (or $v.pack.secret",
        "{{- if and (not $v.pack.ref) (or $v.pack.secret",
        "test_guards.py::test_g12_g17d_the_aicr_release_from_a_registry_is_a_consumer_of_the_pack_transport",
    ),
    m(
        "drop-one-release-source-guard",
        "templates/_validate-pack.tpl",
        "{{- if and $v.aicr.releaseRef (ne (toString $v.aicr.releaseBaseUrl)",
        "{{- if and false (ne (toString $v.aicr.releaseBaseUrl)",
        "test_guards.py::test_c17_the_aicr_release_comes_from_one_place",
    ),
    m(
        "allow-credentials-in-extra-env",
        "templates/_validate-pod.tpl",
        '(has $name (list "DOCKER_CONFIG" "COSIGN_IDENTITY_TOKEN"))',
        "false",
        "test_guards.py::test_c06_extra_env_cannot_set_runner_settings_or_credentials",
    ),
    m(
        "secret-template-skips-the-guards",
        "templates/secret-pack-auth.yaml",
        '{{- include "nvidia-aicr.validate" . -}}\n',
        "",
        "test_guards.py::test_the_guards_run_for_the_pack_auth_secret_too",
    ),
    m(
        "phases-keep-empty-entries",
        "templates/_helpers.tpl",
        "{{- if . -}}{{- $phases = append $phases (toString .) -}}{{- end -}}",
        "{{- $phases = append $phases (toString .) -}}",
        "test_job.py::test_phases_drop_empty_entries",
        "test_guards.py::test_g02_validation_needs_a_phase",
    ),
    m(
        "drop-fullname-override-length-guard",
        "templates/_validate-names.tpl",
        "{{- else if gt (len $full) 44 -}}",
        "{{- else if false -}}",
        "test_names.py::test_c15_a_fullname_override_too_long_for_the_jobs_label_is_refused",
    ),
    m(
        "name-override-may-be-any-text",
        "templates/_validate-names.tpl",
        "{{- if and $name (not (regexMatch $dnsLabel $name)) -}}",
        "{{- if false -}}",
        "test_names.py::test_c15_c16_a_name_kubernetes_would_refuse_is_refused",
    ),
    # -- names ---------------------------------------------------------------------------------------------
    m(
        "fullname-override-ignored",
        "templates/_helpers.tpl",
        "{{- if .Values.fullnameOverride -}}",
        "{{- if false -}}",
        "test_names.py::test_fullname_override_starts_every_objects_name_in_place_of_the_release",
    ),
    m(
        "name-override-label-unquoted",
        "templates/_helpers.tpl",
        '{{ include "nvidia-aicr.name" . | quote }}',
        '{{ include "nvidia-aicr.name" . }}',
        "test_names.py::test_a_name_override_yaml_would_read_as_another_type_stays_a_string",
    ),
    m(
        "notes-without-the-revalidate-command",
        "templates/NOTES.txt",
        "  kubectl create job -n {{ $ns }} --from=cronjob/{{ $cron }} {{ $cron }}-$(date +%s)\n",
        "",
        "test_revalidate.py::test_notes_name_the_cronjob_and_the_command_that_starts_a_revalidation_now",
    ),
    # -- criteria ------------------------------------------------------------------------------------------
    m(
        "drop-criteria-check",
        "templates/_validate.tpl",
        '{{- include "nvidia-aicr.criteriaSupported" . -}}',
        "",
        "test_criteria.py::test_rejects_a_value_no_recipe_provides",
        "test_criteria.py::test_rejects_a_service_without_a_recipe_for_the_accelerator",
        "test_criteria.py::test_rejects_a_platform_the_combination_does_not_have",
        "test_criteria.py::test_the_chart_accepts_exactly_what_aicr_accepts",
    ),
    m(
        "unstated-dimensions-match-any-overlay",
        "templates/_criteria.tpl",
        '{{- if and (ne $ev "any") (ne $ev (toString (get $query $d))) -}}{{- $applies = false -}}{{- end -}}',
        '{{- if and (ne $ev "any") (hasKey $query $d) (ne $ev (toString (get $query $d))) -}}'
        "{{- $applies = false -}}{{- end -}}",
        "test_criteria.py::test_rejects_an_accelerator_that_needs_a_service",
        "test_criteria.py::test_rejects_an_intent_that_needs_an_os",
        "test_criteria.py::test_the_chart_accepts_exactly_what_aicr_accepts",
    ),
    m(
        "data-pack-no-longer-skips-the-check",
        "templates/_criteria.tpl",
        "{{- if and $v.criteria.preflight (not $v.pack.ref) (not $binary.path) -}}",
        "{{- if and $v.criteria.preflight (not $binary.path) -}}",
        "test_criteria.py::test_a_data_pack_skips_the_catalog_check",
    ),
    m(
        "a-preinstalled-aicr-no-longer-skips-the-check",
        "templates/_criteria.tpl",
        "{{- if and $v.criteria.preflight (not $v.pack.ref) (not $binary.path) -}}",
        "{{- if and $v.criteria.preflight (not $v.pack.ref) -}}",
        "test_criteria.py::test_a_preinstalled_aicr_skips_the_catalog_check_as_plan_aicr_binary_does",
    ),
    m(
        "check-ignores-the-catalog-version",
        "templates/_criteria.tpl",
        '{{- if eq (trimPrefix "v" $catalogVersion) (trimPrefix "v" (toString $v.aicr.version)) -}}',
        "{{- if true -}}",
        "test_criteria.py::test_another_aicr_version_skips_the_catalog_check",
    ),
    # -- the Job and its name ------------------------------------------------------------------------------
    m(
        "name-by-release-revision",
        "templates/_helpers.tpl",
        "($identity | sha256sum | trunc 10)",
        "(.Release.Revision | toString)",
        "test_job.py::test_job_name_is_content_addressed_and_fits_a_label",
        "test_job.py::test_any_value_or_image_change_gives_a_new_job_name",
    ),
    # The identity before issue 13: a list of run-defining settings instead of the
    # pod template, so a change to scheduling or resources kept the name and the
    # upgrade failed with "field is immutable".
    m(
        "name-hashes-the-settings-not-the-pod-template",
        "templates/_helpers.tpl",
        '{{- $identity := include "nvidia-aicr.immutableJobSpec" . -}}',
        '{{- $identity := include "nvidia-aicr.runtimeEnv" . -}}',
        "test_job_identity.py::test_a_value_change_renames_the_job_exactly_when_it_changes_the_pod_template"
        "[tolerations]",
        "test_job_identity.py::test_a_value_change_renames_the_job_exactly_when_it_changes_the_pod_template[resources]",
    ),
    # The bug of issue 13: the chart version on the pod template. Same values, new
    # chart version: the same Job name with another template ("field is immutable").
    m(
        "pod-template-carries-the-chart-version",
        "templates/_helpers.tpl",
        "app.kubernetes.io/component: installer\n{{- with .Values.job.podLabels }}",
        'app.kubernetes.io/component: installer\nhelm.sh/chart: {{ include "nvidia-aicr.chart" . | quote }}\n'
        "{{- with .Values.job.podLabels }}",
        "test_job_identity.py::test_a_chart_version_bump_keeps_the_job_name_and_its_spec_byte_for_byte",
    ),
    m(
        "pod-template-carries-the-app-version",
        "templates/_helpers.tpl",
        "app.kubernetes.io/component: installer\n{{- with .Values.job.podLabels }}",
        "app.kubernetes.io/component: installer\napp.kubernetes.io/version: {{ .Chart.AppVersion | quote }}\n"
        "{{- with .Values.job.podLabels }}",
        "test_job_identity.py::test_a_chart_version_bump_keeps_the_job_name_and_its_spec_byte_for_byte",
    ),
    # The bug of issue 9: hashing raw values splits the name between Helm 3 and Helm 4
    # (Helm 4 drops null defaults) and renames the Job on every TTL or credential change.
    m(
        "name-hashes-raw-values",
        "templates/_helpers.tpl",
        '{{- $identity := include "nvidia-aicr.immutableJobSpec" . -}}',
        '{{- $identity := printf "%s%s" (include "nvidia-aicr.immutableJobSpec" .) (toJson .Values) -}}',
        "test_job_identity.py::test_rotating_the_pack_credential_keeps_the_job_name",
        "test_job_identity.py::test_a_value_change_renames_the_job_exactly_when_it_changes_the_pod_template[TTL]",
        "test_job_identity.py::test_helm3_and_helm4_render_every_example_s_job_byte_for_byte",
    ),
    m(
        "name-ignores-the-rerun-token",
        "templates/_helpers.tpl",
        '(toString (default "" .Values.job.rerun))',
        '""',
        "test_job_identity.py::test_a_value_change_renames_the_job_exactly_when_it_changes_the_pod_template"
        "[rerun token]",
    ),
    m(
        "drop-pod-failure-policy",
        "templates/_pod.tpl",
        "\npodFailurePolicy:\n",
        "\npodFailurePolicyX:\n",
        "test_job.py::test_pod_failure_policy_fails_fast_on_the_runtimes_deterministic_codes",
    ),
    m(
        "drop-read-only-root",
        "templates/_pod.tpl",
        "        readOnlyRootFilesystem: true\n",
        "",
        "test_job.py::test_pod_is_locked_down",
    ),
    m(
        "drop-run-as-non-root",
        "templates/_pod.tpl",
        "    runAsNonRoot: true\n",
        "",
        "test_job.py::test_pod_is_locked_down",
    ),
    m(
        "always-render-ttl",
        "templates/job.yaml",
        '  {{- if not (kindIs "invalid" $v.job.ttlSecondsAfterFinished) }}\n'
        "  ttlSecondsAfterFinished: {{ int64 $v.job.ttlSecondsAfterFinished }}\n  {{- end }}",
        "  ttlSecondsAfterFinished: {{ int64 $v.job.ttlSecondsAfterFinished }}",
        "test_job.py::test_ttl_is_rendered_only_when_set",
    ),
    m(
        "ignore-image-digest",
        "templates/_helpers.tpl",
        "{{- if $img.digest -}}",
        "{{- if false -}}",
        "test_job.py::test_image_defaults_to_app_version_and_uses_a_digest_when_given",
    ),
    m(
        "drop-pack-auth-mount",
        "templates/_pod.tpl",
        "        - name: pack-auth\n          mountPath: /etc/aicr-runner/pack-auth\n          readOnly: true\n",
        "",
        "test_job.py::test_an_existing_pack_secret_is_mounted_as_a_file",
        "test_job.py::test_pack_auth_creates_the_secret_the_job_mounts",
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
        "test_job.py::test_signed_publish_mounts_the_token_as_a_file_and_never_as_env",
    ),
    m(
        "push-credential-mounted-without-a-secret",
        "templates/_helpers.tpl",
        "{{- if and .Values.validate.publish.enabled .Values.validate.publish.registrySecret -}}true{{- end -}}",
        "{{- if .Values.validate.publish.enabled -}}true{{- end -}}",
        "test_job.py::test_the_push_credential_is_mounted_only_when_publishing_with_a_registry_secret",
    ),
    Mutation(
        "extra-env-before-chart-env",
        "templates/_pod.tpl",
        ((EXTRA_ENV, ""), ("      env:\n", "      env:\n" + EXTRA_ENV)),
        ("test_job.py::test_extra_env_is_appended_after_the_chart_env",),
    ),
    m(
        "shutdown-grace-without-margin",
        "templates/_helpers.tpl",
        "(sub (int64 .Values.job.terminationGracePeriodSeconds) 15)",
        "(int64 .Values.job.terminationGracePeriodSeconds)",
        "test_job.py::test_termination_grace_leaves_the_runtime_15_seconds",
    ),
    m(
        "binding-name-without-namespace",
        "templates/_helpers.tpl",
        '{{- printf "%s-%s-installer" .Release.Namespace (include "nvidia-aicr.baseName" .) '
        '| trunc 253 | trimSuffix "-" -}}',
        '{{- printf "%s-installer" (include "nvidia-aicr.baseName" .) -}}',
        "test_job.py::test_the_binding_name_is_cut_to_253_characters_without_a_trailing_dash",
        "test_job.py::test_rbac_binds_the_installer_account_to_cluster_admin",
        "test_job.py::test_rbac_cluster_admin_false_binds_the_charts_narrower_cluster_role",
    ),
    m(
        "unknown-runtime-variable",
        "templates/_env.tpl",
        "AICR_RUNNER_WORK_DIR: /work\n",
        'AICR_RUNNER_WORK_DIR: /work\nAICR_RUNNER_RETRIES: "3"\n',
        "test_contract.py::test_every_runtime_setting_is_rendered_and_nothing_else",
    ),
    m(
        "runtime-setting-not-rendered",
        "templates/_env.tpl",
        "AICR_RUNNER_BUNDLE__STORAGE_CLASS: {{ toString $v.bundle.storageClass | quote }}\n",
        "",
        "test_contract.py::test_every_runtime_setting_is_rendered_and_nothing_else",
    ),
    # -- chart knobs --------------------------------------------------------------------------------------
    m(
        "work-size-limit-ignored",
        "templates/_pod.tpl",
        "{{- if $v.job.workSizeLimit }}",
        "{{- if false }}",
        "test_job.py::test_job_work_size_limit_bounds_the_work_volume_only",
    ),
    m(
        "global-image-registry-ignored",
        "templates/_helpers.tpl",
        "{{- if $registry -}}",
        "{{- if false -}}",
        "test_job.py::test_global_image_registry_replaces_the_registry_of_the_repository",
        "test_job.py::test_a_new_image_registry_is_a_new_job",
    ),
    m(
        "global-pull-secrets-ignored",
        "templates/_helpers.tpl",
        "{{- $global = default list .Values.global.imagePullSecrets -}}",
        "",
        "test_job.py::test_global_image_pull_secrets_come_first_as_names_or_references_each_once",
    ),
    m(
        "schema-accepts-a-tag-in-the-repository",
        "values.schema.json",
        '"pattern": "^([a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?(:[0-9]+)?/)?[a-z0-9]+',
        '"pattern": "^.*$|^([a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?(:[0-9]+)?/)?[a-z0-9]+',
        "test_guards.py::test_c08_image_repository_with_a_tag_or_digest_is_refused",
    ),
    m(
        "drop-repository-tag-guard",
        "templates/_validate-pod.tpl",
        '{{- else if contains ":" $lastPart -}}',
        "{{- else if false -}}",
        "test_guards.py::test_c08_image_repository_with_a_tag_or_digest_is_refused",
    ),
    m(
        "service-account-name-ignored",
        "templates/_helpers.tpl",
        "{{- if .Values.serviceAccount.name -}}",
        "{{- if false -}}",
        "test_job.py::test_service_account_name_and_annotations",
    ),
    m(
        "rbac-always-cluster-admin",
        "templates/clusterrolebinding.yaml",
        "{{ if .Values.rbac.clusterAdmin }}cluster-admin{{ else }}",
        "{{ if true }}cluster-admin{{ else }}",
        "test_job.py::test_rbac_cluster_admin_false_binds_the_charts_narrower_cluster_role",
    ),
    m(
        "narrow-role-without-escalate-and-bind",
        "templates/clusterrole.yaml",
        '"delete", "escalate", "bind"]',
        '"delete"]',
        "test_job.py::test_rbac_cluster_admin_false_binds_the_charts_narrower_cluster_role",
    ),
    m(
        "role-loses-the-result-configmaps",
        "templates/role.yaml",
        "    resourceNames: {{ toJson $configMaps }}\n",
        '    resourceNames: ["aicr-run-status"]\n',
        "test_job.py::test_rbac_the_namespaced_role_is_the_lease_the_result_configmaps_and_the_job",
        "test_job.py::test_rbac_cluster_admin_false_binds_the_charts_narrower_cluster_role",
    ),
    m(
        "role-reaches-every-job",
        "templates/role.yaml",
        '    resourceNames: [{{ include "nvidia-aicr.jobName" . | quote }}]\n',
        "",
        "test_job.py::test_rbac_the_namespaced_role_is_the_lease_the_result_configmaps_and_the_job",
    ),
    m(
        "role-reaches-every-report",
        "templates/role.yaml",
        '    resourceNames: [{{ include "nvidia-aicr.reportName" $ | quote }}]\n',
        "",
        "test_reports.py::test_each_setting_reaches_the_runtime_and_the_role_grants_only_its_report[helm4-auto]",
    ),
    m(
        "role-ignores-reports-api",
        "templates/role.yaml",
        "{{- $api := toString $v.reports.api -}}",
        '{{- $api := "auto" -}}',
        "test_reports.py::test_each_setting_reaches_the_runtime_and_the_role_grants_only_its_report[helm4-none]",
    ),
    m(
        "reports-api-ignored",
        "templates/_env.tpl",
        "AICR_RUNNER_REPORTS__API: {{ toString $v.reports.api | quote }}",
        'AICR_RUNNER_REPORTS__API: "auto"',
        "test_reports.py::test_each_setting_reaches_the_runtime_and_the_role_grants_only_its_report[helm4-wgpolicy]",
    ),
    m(
        "extra-volumes-dropped",
        "templates/_pod.tpl",
        "    {{- with $v.job.extraVolumes }}",
        "    {{- with false }}",
        "test_job.py::test_extra_volumes_and_mounts_follow_the_charts_own",
    ),
    m(
        "extra-volume-may-replace-a-chart-volume",
        "templates/_validate-pod.tpl",
        "{{- if has $name $chartVolumes -}}",
        "{{- if false -}}",
        "test_guards.py::test_c10_an_extra_volume_cannot_take_a_chart_volume_s_name",
    ),
    m(
        "pod-labels-dropped",
        "templates/_helpers.tpl",
        "{{- with .Values.job.podLabels }}",
        "{{- with false }}",
        "test_job.py::test_pod_labels_are_added_to_the_charts_own",
    ),
    # -- values and schema --------------------------------------------------------------------------------
    m(
        "flip-log-format-default",
        "values.yaml",
        "  format: console\n",
        "  format: json\n",
        "test_contract.py::test_defaults_mean_the_runtime_defaults_except_where_the_chart_decides",
        "test_job.py::test_default_config_map_names_and_versions",
    ),
    m(
        "ttl-default-3600",
        "values.yaml",
        "  ttlSecondsAfterFinished: null\n",
        "  ttlSecondsAfterFinished: 3600\n",
        "test_job.py::test_ttl_is_rendered_only_when_set",
    ),
    m(
        "schema-accepts-unknown-keys",
        "values.schema.json",
        '  "type": "object",\n  "additionalProperties": false,\n  "properties": {\n    "global"',
        '  "type": "object",\n  "properties": {\n    "global"',
        "test_guards.py::test_schema_refuses_bad_types_and_typos",
    ),
    m(
        "provenance-off-by-default",
        "values.yaml",
        "  mode: require\n",
        '  mode: "off"\n',
        "test_job.py::test_notes_say_whether_aicrs_provenance_is_enforced",
    ),
    m(
        "provenance-fail-closed-not-in-pod-failure-policy",
        "templates/_pod.tpl",
        "values: [2, 4, 21, 24, 25, 29, 35]",
        "values: [2, 4, 21, 24, 25, 35]",
        "test_job.py::test_pod_failure_policy_fails_fast_on_the_runtimes_deterministic_codes",
    ),
    m(
        "upgrade-stop-not-in-pod-failure-policy",
        "templates/_pod.tpl",
        "values: [2, 4, 21, 24, 25, 29, 35]",
        "values: [2, 4, 21, 24, 25, 29]",
        "test_job.py::test_pod_failure_policy_fails_fast_on_the_runtimes_deterministic_codes",
    ),
    m(
        "notes-forget-the-pack-check",
        "templates/NOTES.txt",
        "  check them: the runtime checks them against the pack, and a refusal fails the Job with exit 2)",
        "  check them)",
        "test_job.py::test_notes_say_the_runtime_checks_a_packs_criteria",
    ),
    m(
        "notes-wait-ignores-a-failed-job",
        "templates/NOTES.txt",
        '--for=condition=Failed --timeout=0 >/dev/null 2>&1 && { echo "Job failed"; exit 1; }',
        '--for=condition=Failed --timeout=0 >/dev/null 2>&1 && echo "Job failed"',
        "test_job.py::test_notes_give_the_commands_that_come_next_and_a_link_to_the_rest",
    ),
)


#: (mutation name, killed | survived | error, detail)
Result = tuple[str, str, str]


@dataclass
class Outcome:
    mutation: Mutation
    verdict: str  # killed | survived | error
    detail: str
    killer: pytest.Item | None = None


def _reason(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = " ".join(str(crash.message if crash is not None else report.longrepr).split())
    return f"{report.nodeid} ({report.when}): {text[:200] or 'failed'}"


class MutationRun:
    """A pytest plugin that replaces the session's run loop: every mutation against
    its named tests, then the killing tests against the unmodified chart."""

    def __init__(self, mutations: Sequence[Mutation], chart: Path) -> None:
        self.mutations = mutations
        self.chart = chart
        self.outcomes: list[Outcome] = []
        self.collect_errors: list[str] = []
        self.finished = False
        self._failures: list[pytest.TestReport] = []

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors.append(f"{report.nodeid}: {report.longreprtext[-2000:]}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self._failures.append(report)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        if self.collect_errors:
            return True
        for mutation in self.mutations:
            started = time.monotonic()
            outcome = self._check(session.items, mutation)
            self.outcomes.append(outcome)
            print(
                f"{outcome.verdict:9} {mutation.name} ({time.monotonic() - started:.1f} s): {outcome.detail}",
                flush=True,
            )
        self._rerun_killers_on_the_unmodified_chart()
        self.finished = True
        return True

    def _first_failure(self, items: Sequence[pytest.Item]) -> tuple[pytest.Item, pytest.TestReport] | None:
        for item in items:
            self._failures.clear()
            # Fixtures are set up and torn down around each test (nextitem=None):
            # nothing computed from one version of the chart reaches the next.
            item.ihook.pytest_runtest_protocol(item=item, nextitem=None)
            if self._failures:
                return item, self._failures[0]
        return None

    def _check(self, collected: Sequence[pytest.Item], mutation: Mutation) -> Outcome:
        items: list[pytest.Item] = []
        for test in mutation.tests:
            node = f"{SUITE}/{test}"
            found = [item for item in collected if item.nodeid == node or item.nodeid.startswith(node + "[")]
            if not found:
                return Outcome(mutation, "error", f"names {test}, which {SUITE} does not have (renamed or removed?)")
            items += [item for item in found if item not in items]
        target = self.chart / mutation.file
        original = target.read_text()
        text = original
        for old, new in mutation.edits:
            count = text.count(old)
            if count != 1:
                return Outcome(mutation, "error", f"expected the text once in {mutation.file}, found {count}: {old!r}")
            text = text.replace(old, new)
        from tests.chart.helm import forget_renders  # imported by the suite (collection), with AICR_CHART_DIR set

        target.write_text(text)
        forget_renders()
        try:
            failure = self._first_failure(items)
        finally:
            target.write_text(original)
            forget_renders()
        if failure is None:
            return Outcome(mutation, "survived", f"every named test passed ({len(items)} run)")
        item, report = failure
        return Outcome(mutation, "killed", _reason(report), item)

    def _rerun_killers_on_the_unmodified_chart(self) -> None:
        killers = {outcome.killer.nodeid: outcome.killer for outcome in self.outcomes if outcome.killer}
        red: dict[str, str] = {}
        started = time.monotonic()
        for nodeid, item in killers.items():
            failure = self._first_failure([item])
            if failure:
                red[nodeid] = _reason(failure[1])
        passed = f"{len(killers) - len(red)}/{len(killers)}"
        print(f"{passed} killing tests pass on the unmodified chart ({time.monotonic() - started:.1f} s)", flush=True)
        for outcome in self.outcomes:
            if outcome.killer and outcome.killer.nodeid in red:
                outcome.verdict = "error"
                outcome.detail = f"the killing test fails on the unmodified chart too: {red[outcome.killer.nodeid]}"
                print(f"{outcome.verdict:9} {outcome.mutation.name}: {outcome.detail}", flush=True)


def _select(args: argparse.Namespace) -> list[Mutation]:
    names = [mu.name for mu in MUTATIONS]
    unknown = [name for name in args.only if name not in names]
    if unknown:
        raise ValueError(f"--only {', '.join(unknown)}: no such mutation (scripts/mutate-chart.py --list names them)")
    mutations = [mu for mu in MUTATIONS if not args.only or mu.name in args.only]
    if args.tests:
        mutations = [dataclasses.replace(mu, tests=tuple(args.tests)) for mu in mutations]
    return mutations


def run_here(mutations: Sequence[Mutation]) -> list[Result] | None:
    """Every mutation in this process: one pytest session. None when pytest stopped
    before the mutations ran (the reason is on stderr)."""
    files = sorted({test.split("::")[0] for mu in mutations for test in mu.tests})
    with tempfile.TemporaryDirectory(prefix="mutate-chart-") as tmp:
        chart = Path(tmp) / "chart"
        shutil.copytree(CHART, chart)
        # Read when the suite's helpers are imported (during collection, below).
        os.environ.update(AICR_CHART_DIR=str(chart), AICR_CHART_HELM_MAJORS="4")
        plugin = MutationRun(mutations, chart)
        # No terminal (this script reports), so none of its options from the ini's addopts either.
        options = ["-p", "no:terminal", "-p", "no:cacheprovider", "-o", "addopts=--strict-markers"]
        code = pytest.main([f"{SUITE}/{name}" for name in files] + options, plugins=[plugin])
    if not plugin.finished:
        for error in plugin.collect_errors:
            print(error, file=sys.stderr)
        print(f"mutate-chart: pytest stopped before the mutations ran (exit {code})", file=sys.stderr)
        return None
    return [(outcome.mutation.name, outcome.verdict, outcome.detail) for outcome in plugin.outcomes]


def run_sharded(mutations: Sequence[Mutation], jobs: int, tests: Sequence[str]) -> list[Result] | None:
    """The mutations split over ``jobs`` processes of this script (each one pytest
    session): helm and the suite's Python each keep one core busy."""
    with tempfile.TemporaryDirectory(prefix="mutate-chart-shards-") as tmp:
        shards = []
        for index in range(jobs):
            report = Path(tmp) / f"shard-{index}.json"
            argv = [sys.executable, str(Path(__file__).resolve()), "--jobs", "1", "--report", str(report)]
            argv += [arg for mu in mutations[index::jobs] for arg in ("--only", mu.name)]
            argv += [arg for test in tests for arg in ("--tests", test)]
            # Each shard's progress lines go to its own file, copied to our stdout once
            # it ends: lines longer than a pipe's atomic write, from two shards sharing
            # one stdout, interleaved mid-line.
            with (Path(tmp) / f"shard-{index}.out").open("w") as progress:
                shards.append((subprocess.Popen(argv, stdout=progress), report))
        codes = [proc.wait() for proc, _ in shards]
        for index in range(jobs):
            sys.stdout.write((Path(tmp) / f"shard-{index}.out").read_text())
        sys.stdout.flush()
        if any(code not in {0, 1} or not report.is_file() for code, (_, report) in zip(codes, shards, strict=True)):
            print(f"mutate-chart: a shard stopped before its mutations ran (exits {codes})", file=sys.stderr)
            return None
        done = {row[0]: (row[0], row[1], row[2]) for _, report in shards for row in json.loads(report.read_text())}
    return [done.get(mu.name, (mu.name, "error", "its shard reported nothing")) for mu in mutations]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--list", action="store_true", help="list the mutations and the tests meant to catch them")
    parser.add_argument("--only", action="append", default=[], help="run only this mutation (repeatable)")
    parser.add_argument(
        "--tests",
        action="append",
        default=[],
        help="run these tests instead of the named ones (repeatable; <file>.py::<test function>[<id>])",
    )
    parser.add_argument(
        "--jobs", type=int, default=min(4, os.cpu_count() or 1), help="processes (default: cores, 4 at most)"
    )
    parser.add_argument("--report", type=Path, help=argparse.SUPPRESS)  # a shard's results, for run_sharded
    args = parser.parse_args(argv)
    if args.list:
        for mu in MUTATIONS:
            print(f"{mu.name:50} {mu.file:32} {' '.join(mu.tests)}")
        return 0
    try:
        mutations = _select(args)
    except ValueError as exc:
        print(f"mutate-chart: {exc}", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print(f"mutate-chart: --jobs {args.jobs}: needs 1 or more", file=sys.stderr)
        return 2
    os.chdir(ROOT)
    started = time.monotonic()
    jobs = min(args.jobs, len(mutations))
    results = run_sharded(mutations, jobs, args.tests) if jobs > 1 else run_here(mutations)
    if results is None:
        return 2
    if args.report:
        args.report.write_text(json.dumps(results))
        return 0 if all(verdict == "killed" for _, verdict, _ in results) else 1
    for name, verdict, detail in results:
        if verdict != "killed":
            print(f"not killed: {verdict} {name}: {detail}")
    killed = sum(1 for _, verdict, _ in results if verdict == "killed")
    print(f"mutate-chart: {killed}/{len(results)} mutations killed in {time.monotonic() - started:.0f} s ({jobs} jobs)")
    return 0 if killed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
