{{/*
Render-time guards. Every message names the value, says why it is refused and
what to do instead. job.yaml and secret-pack-auth.yaml both include
"nvidia-aicr.validate", so the pack-credential rules hold for both objects.

The schema (values.schema.json) checks types and enums first; the guards are
the cross-field rules, and they repeat the enum checks that matter so that a
render with --skip-schema-validation (Argo CD skipSchemaValidation, Flux
disableSchemaValidation) still refuses bad input. The runtime checks the same
rules again (aicr_runner.settings) for `docker run` users.

Anchor guards G-01..G-14 keep the anchor chart's gist; G-17* close the gaps the
anchor left to runtime; C-* are new. One file per concern, run in this order
(the first guard that fails is the message):
  _validate-nulls.tpl     C-20                       a null where the chart needs a value
  _validate-removed.tpl   C-01 G-14 G-01             values an earlier release took
  _validate-criteria.tpl  C-02 G-03 G-17b G-04 G-17a G-17c   the aicr and its criteria
  _validate-pack.tpl      G-11 G-13 G-12 C-03 G-17d C-17  the data pack's pull, the release's from a registry
  _validate-run.tpl       G-05 G-02 C-19             deploy or validate, the phases, deploy.sh's helm apply
  _validate-outputs.tpl   G-17e G-06..G-10 C-04 C-05 evidence publishing, the captures
  _validate-pod.tpl       C-06 C-08 C-09 C-10 C-11   the Job's pod
  _validate-cluster.tpl   C-12 C-13 C-14             RBAC, the snapshot agent
  _validate-names.tpl     C-15 C-16                  fullnameOverride, nameOverride
  _criteria.tpl           C-07                       the combination at the pinned aicr
Before them, every template applies _compat.tpl (C-18: a renamed value set under
its earlier name and its new name to different values).
*/}}
{{- define "nvidia-aicr.validate" -}}
{{- include "nvidia-aicr.validate.nulls" . -}}
{{- include "nvidia-aicr.validate.removed" . -}}
{{- include "nvidia-aicr.validate.criteria" . -}}
{{- include "nvidia-aicr.validate.pack" . -}}
{{- include "nvidia-aicr.validate.run" . -}}
{{- include "nvidia-aicr.validate.outputs" . -}}
{{- include "nvidia-aicr.validate.pod" . -}}
{{- include "nvidia-aicr.validate.cluster" . -}}
{{- include "nvidia-aicr.validate.names" . -}}
{{- /* C-07: the criteria combination must exist at the pinned aicr (see _criteria.tpl). */ -}}
{{- include "nvidia-aicr.criteriaSupported" . -}}
{{- end -}}
