{{/*
Shared helpers. Guards live in _validate.tpl; the criteria catalog check lives in
_criteria.tpl.
*/}}

{{/* Chart label value: name-version with "+" replaced (Helm label rules). */}}
{{- define "nvidia-aicr.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: stable across upgrades. */}}
{{- define "nvidia-aicr.selectorLabels" -}}
app.kubernetes.io/name: nvidia-aicr
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{/* Common labels on every object the chart renders. */}}
{{- define "nvidia-aicr.labels" -}}
{{ include "nvidia-aicr.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ include "nvidia-aicr.chart" . | quote }}
{{- end -}}

{{/*
Base name of the Job: "<release>-install", cut so that "-<10 hex>" still fits a
label value (63 characters; the Job controller labels pods with the Job name).
*/}}
{{- define "nvidia-aicr.fullname" -}}
{{- printf "%s-install" .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{/* The runner image reference: by digest when image.digest is set. */}}
{{- define "nvidia-aicr.image" -}}
{{- $img := .Values.image -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag | toString) -}}
{{- end -}}
{{- end -}}

{{/*
The runtime settings that define the install, as a map of environment variable
name -> string. The Job's env renders from it and the Job name hashes it, so the
two cannot drift. Every value is a string made here (toString, int64, toJson of
lists), so Helm 3 and Helm 4 give the same bytes: no nulls, no number formats.
Credentials (Secret contents), logFormat, lease timing, TTL, resources and
scheduling are deliberately not in it (README "What re-runs the install").
*/}}
{{- define "nvidia-aicr.identityEnv" -}}
{{- $v := .Values -}}
{{- $packSecret := include "nvidia-aicr.packSecretName" . -}}
{{- $publish := $v.validate.publish -}}
{{- $publishAuth := include "nvidia-aicr.publishAuthMounted" . -}}
{{- $identityToken := include "nvidia-aicr.identityTokenMounted" . -}}
{{- $sha := default dict $v.aicrSha256 -}}
AICR_RUNNER_CRITERIA__SERVICE: {{ toString $v.service | quote }}
AICR_RUNNER_CRITERIA__ACCELERATOR: {{ toString $v.accelerator | quote }}
AICR_RUNNER_CRITERIA__INTENT: {{ toString $v.intent | quote }}
AICR_RUNNER_CRITERIA__OS: {{ toString $v.os | quote }}
AICR_RUNNER_CRITERIA__PLATFORM: {{ toString $v.platform | quote }}
AICR_RUNNER_PACK__REF: {{ toString $v.dataPack | quote }}
AICR_RUNNER_PACK__CREDENTIALS_FILE: {{ ternary "/etc/aicr-runner/pack-auth/config.json" "" (ne $packSecret "") | quote }}
AICR_RUNNER_PACK__PLAIN_HTTP: {{ include "nvidia-aicr.bool" $v.dataPackPlainHTTP | quote }}
AICR_RUNNER_PACK__INSECURE_TLS: {{ include "nvidia-aicr.bool" $v.dataPackInsecureTLS | quote }}
AICR_RUNNER_AICR__VERSION: {{ toString $v.aicrVersion | quote }}
AICR_RUNNER_AICR__ARCH: {{ toString $v.aicrArch | quote }}
AICR_RUNNER_AICR__SHA256__AMD64: {{ toString (default "" $sha.amd64) | quote }}
AICR_RUNNER_AICR__SHA256__ARM64: {{ toString (default "" $sha.arm64) | quote }}
AICR_RUNNER_AICR__RELEASE_BASE_URL: {{ toString $v.aicrReleaseBaseUrl | quote }}
AICR_RUNNER_AICR__BINARY: {{ toString $v.aicrBinary.path | quote }}
AICR_RUNNER_AICR__BINARY_SHA256: {{ toString $v.aicrBinary.sha256 | quote }}
AICR_RUNNER_AICR__PROVENANCE__MODE: {{ toString $v.aicrProvenance.mode | quote }}
AICR_RUNNER_AICR__PROVENANCE__IDENTITY: {{ toString $v.aicrProvenance.identity | quote }}
AICR_RUNNER_AICR__PROVENANCE__ISSUER: {{ toString $v.aicrProvenance.issuer | quote }}
AICR_RUNNER_AICR__PROVENANCE__TRUSTED_ROOT: {{ toString $v.aicrProvenance.trustedRoot | quote }}
AICR_RUNNER_RECIPE__FLAGS: {{ toString $v.recipeFlags | quote }}
AICR_RUNNER_RECIPE__ARGS: {{ toJson (default list $v.recipeArgs) | quote }}
AICR_RUNNER_RECIPE__CONFIGMAP: {{ toString $v.recipeConfigMap | quote }}
AICR_RUNNER_RECIPE__EXPECT__MIN_COMPONENTS: {{ int64 $v.recipe.expect.minComponents | toString | quote }}
AICR_RUNNER_RECIPE__EXPECT__COMPONENTS: {{ toJson (default list $v.recipe.expect.components) | quote }}
AICR_RUNNER_RECIPE__EXPECT__OVERLAYS: {{ toJson (default list $v.recipe.expect.overlays) | quote }}
AICR_RUNNER_BUNDLE__FLAGS: {{ toString $v.bundleFlags | quote }}
AICR_RUNNER_BUNDLE__ARGS: {{ toJson (default list $v.bundleArgs) | quote }}
AICR_RUNNER_BUNDLE__STORAGE_CLASS: {{ toString $v.storageClass | quote }}
AICR_RUNNER_DEPLOY__ENABLED: {{ include "nvidia-aicr.bool" $v.deploy.enabled | quote }}
AICR_RUNNER_DEPLOY__FLAGS: {{ toString $v.deployFlags | quote }}
AICR_RUNNER_DEPLOY__ARGS: {{ toJson (default list $v.deployArgs) | quote }}
AICR_RUNNER_ENVIRONMENT__PREINSTALLED_DRIVER: {{ include "nvidia-aicr.bool" $v.environment.preinstalledDriver | quote }}
AICR_RUNNER_VALIDATE__ENABLED: {{ include "nvidia-aicr.bool" $v.validate.enabled | quote }}
AICR_RUNNER_VALIDATE__PHASES: {{ include "nvidia-aicr.phases" . | quote }}
AICR_RUNNER_VALIDATE__FAIL_ON_ERROR: {{ include "nvidia-aicr.bool" $v.validate.failOnError | quote }}
AICR_RUNNER_VALIDATE__EMIT_EVIDENCE: {{ include "nvidia-aicr.bool" $v.validate.emitEvidence | quote }}
AICR_RUNNER_VALIDATE__RESULT_CONFIGMAP: {{ toString $v.validate.resultConfigMap | quote }}
AICR_RUNNER_VALIDATE__EVIDENCE_CONFIGMAP: {{ toString $v.validate.evidenceConfigMap | quote }}
AICR_RUNNER_VALIDATE__FLAGS: {{ toString $v.validateFlags | quote }}
AICR_RUNNER_VALIDATE__ARGS: {{ toJson (default list $v.validateArgs) | quote }}
AICR_RUNNER_VALIDATE__PUBLISH__ENABLED: {{ include "nvidia-aicr.bool" $publish.enabled | quote }}
AICR_RUNNER_VALIDATE__PUBLISH__MODE: {{ toString $publish.mode | quote }}
AICR_RUNNER_VALIDATE__PUBLISH__REF: {{ toString $publish.ref | quote }}
AICR_RUNNER_VALIDATE__PUBLISH__FAIL_ON_ERROR: {{ include "nvidia-aicr.bool" $publish.failOnError | quote }}
AICR_RUNNER_VALIDATE__PUBLISH__INSECURE_TLS: {{ include "nvidia-aicr.bool" $publish.insecureTLS | quote }}
AICR_RUNNER_VALIDATE__PUBLISH__PLAIN_HTTP: {{ include "nvidia-aicr.bool" $publish.plainHTTP | quote }}
AICR_RUNNER_VALIDATE__PUBLISH__REGISTRY_CONFIG_DIR: {{ ternary "/etc/aicr-runner/publish-auth" "" (eq $publishAuth "true") | quote }}
AICR_RUNNER_VALIDATE__PUBLISH__IDENTITY_TOKEN_FILE: {{ ternary "/etc/aicr-runner/identity-token/token" "" (eq $identityToken "true") | quote }}
AICR_RUNNER_STATUS_CONFIGMAP: {{ toString $v.statusConfigMap | quote }}
AICR_RUNNER_NAMESPACE: {{ .Release.Namespace | quote }}
AICR_RUNNER_WORK_DIR: /work
AICR_RUNNER_TERMINATION_MESSAGE_PATH: /dev/termination-log
{{- end -}}

{{/*
Content-addressed Job name: "<fullname>-<sha256 cut to 10>" of the identity: the
identityEnv map, the image, job.extraEnv, the names of the mounted Secrets (not
their contents) and the rerun token, as JSON (maps are
key-sorted). The same install always gives the same name, under Helm 3 and Helm 4,
so a re-sync or a Helm upgrade is a no-op; a change to what is installed gives a
new Job. Never .Values as a whole (Helm 4 drops null defaults that Helm 3 keeps)
and never .Release.Revision (always 1 under `helm template`, which Argo CD uses).
*/}}
{{- define "nvidia-aicr.identity" -}}
{{- $extraEnv := default list .Values.job.extraEnv -}}
{{- $publish := .Values.validate.publish -}}
{{- $secrets := list (include "nvidia-aicr.packSecretName" .) -}}
{{- if include "nvidia-aicr.publishAuthMounted" . }}{{ $secrets = append $secrets (toString $publish.registrySecret) }}{{ end -}}
{{- if include "nvidia-aicr.identityTokenMounted" . }}{{ $secrets = append $secrets (printf "%s/%s" $publish.identityTokenSecret.name $publish.identityTokenSecret.key) }}{{ end -}}
{{- $inputs := dict "env" (include "nvidia-aicr.identityEnv" . | fromYaml) "image" (include "nvidia-aicr.image" .) "extraEnv" (toJson $extraEnv) "secretNames" (join "," $secrets) "rerun" (toString (default "" .Values.rerun)) -}}
{{- toJson $inputs -}}
{{- end -}}

{{- define "nvidia-aicr.jobName" -}}
{{- printf "%s-%s" (include "nvidia-aicr.fullname" .) (include "nvidia-aicr.identity" . | sha256sum | trunc 10) -}}
{{- end -}}

{{/* The install Lease: one per release, in the release namespace. */}}
{{- define "nvidia-aicr.leaseName" -}}
{{- include "nvidia-aicr.fullname" . -}}
{{- end -}}

{{/* The ConfigMap of runtime settings that may change without a new Job (envFrom). */}}
{{- define "nvidia-aicr.runtimeConfigName" -}}
{{- printf "%s-runner-settings" .Release.Name | trunc 253 | trimSuffix "-" -}}
{{- end -}}

{{- define "nvidia-aicr.serviceAccountName" -}}
{{- printf "%s-installer" .Release.Name | trunc 253 | trimSuffix "-" -}}
{{- end -}}

{{/* Namespace in the name: two same-named releases in different namespaces never collide. */}}
{{- define "nvidia-aicr.clusterRoleBindingName" -}}
{{- printf "%s-%s-installer" .Release.Namespace .Release.Name | trunc 253 | trimSuffix "-" -}}
{{- end -}}

{{/* Name of the chart-created pack pull Secret (dataPackAuth). */}}
{{- define "nvidia-aicr.packAuthSecretName" -}}
{{- printf "%s-pack-auth" .Release.Name | trunc 253 | trimSuffix "-" -}}
{{- end -}}

{{/*
The Secret the pack pull uses: dataPackSecret, the chart-created one, or "".
Both job.yaml and secret-pack-auth.yaml go through this, so the created name and
the mounted name cannot drift.
*/}}
{{- define "nvidia-aicr.packSecretName" -}}
{{- if .Values.dataPackSecret -}}
{{- .Values.dataPackSecret -}}
{{- else if and (kindIs "map" .Values.dataPackAuth) .Values.dataPackAuth.dockerconfigjson -}}
{{- include "nvidia-aicr.packAuthSecretName" . -}}
{{- end -}}
{{- end -}}

{{/* Booleans reach the runtime as exactly "true" or "false", decided by Helm truthiness here only. */}}
{{- define "nvidia-aicr.bool" -}}
{{- if . -}}true{{- else -}}false{{- end -}}
{{- end -}}

{{/* Validation phases with empty entries dropped. Returns JSON (a list). */}}
{{- define "nvidia-aicr.phases" -}}
{{- $phases := list -}}
{{- if kindIs "slice" .Values.validate.phases -}}
{{- range .Values.validate.phases -}}
{{- if . -}}{{- $phases = append $phases (toString .) -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $phases -}}
{{- end -}}

{{/* Whether publishing is on (validate.publish.enabled). */}}
{{- define "nvidia-aicr.publishEnabled" -}}
{{- if .Values.validate.publish.enabled -}}true{{- end -}}
{{- end -}}

{{/* The publish-auth mount exists exactly when publishing with a registrySecret. */}}
{{- define "nvidia-aicr.publishAuthMounted" -}}
{{- if and .Values.validate.publish.enabled .Values.validate.publish.registrySecret -}}true{{- end -}}
{{- end -}}

{{/* The identity token file exists exactly when publishing in signed mode. */}}
{{- define "nvidia-aicr.identityTokenMounted" -}}
{{- $p := .Values.validate.publish -}}
{{- if and $p.enabled (eq (toString $p.mode) "signed") $p.identityTokenSecret.name -}}true{{- end -}}
{{- end -}}

{{/* Seconds the runtime lets a running child finish after SIGTERM: the grace period minus 15 s for the status write. */}}
{{- define "nvidia-aicr.shutdownGraceSeconds" -}}
{{- max 0 (sub (int64 .Values.job.terminationGracePeriodSeconds) 15) -}}
{{- end -}}
