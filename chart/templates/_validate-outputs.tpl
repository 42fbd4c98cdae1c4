{{/*
Where the verdict goes: evidence publishing (its mode, target and
credentials) and one ConfigMap per capture.
Guards G-17e, G-06, G-07, G-08, G-09, G-10, C-04, C-05 (_validate.tpl says how the guards work).
*/}}
{{- define "nvidia-aicr.validate.outputs" -}}
{{- $v := .Values -}}
{{- $validate := default dict $v.validate -}}
{{- $publish := default dict $validate.publish -}}
{{- $tokenSecret := default dict $publish.identityTokenSecret -}}

{{- /* G-17e: publish credentials only mean something when publishing. */ -}}
{{- if not $publish.enabled -}}
{{- if $publish.registrySecret -}}
{{- fail (printf "validate.publish.registrySecret=%s is set but validate.publish.enabled=false: the push credential would be unused. Enable publishing or drop registrySecret." (toString $publish.registrySecret)) -}}
{{- end -}}
{{- if $tokenSecret.name -}}
{{- fail (printf "validate.publish.identityTokenSecret.name=%s is set but validate.publish.enabled=false: the signing token would be unused. Enable publishing (mode signed) or drop identityTokenSecret.name." (toString $tokenSecret.name)) -}}
{{- end -}}
{{- end -}}

{{- if $publish.enabled -}}
{{- /* G-06 */ -}}
{{- if not $validate.enabled -}}
{{- fail "validate.publish.enabled=true needs validate.enabled=true: publishing needs a validation run to produce the evidence bundle." -}}
{{- end -}}
{{- /* G-07 */ -}}
{{- if not $validate.emitEvidence -}}
{{- fail "validate.publish.enabled=true needs validate.emitEvidence=true: without --emit-attestation there is no evidence bundle to publish." -}}
{{- end -}}
{{- /* G-08 */ -}}
{{- if not (has (toString $publish.mode) (list "signed" "unsigned")) -}}
{{- fail (printf "validate.publish.mode=%q: must be signed or unsigned." (toString $publish.mode)) -}}
{{- end -}}
{{- /* G-09 */ -}}
{{- if not $publish.ref -}}
{{- fail "validate.publish.enabled=true needs validate.publish.ref: the OCI push target (--push), e.g. ghcr.io/acme/aicr-evidence." -}}
{{- end -}}
{{- /* G-10 */ -}}
{{- if and (eq (toString $publish.mode) "signed") (not $tokenSecret.name) -}}
{{- fail "validate.publish.mode=signed needs validate.publish.identityTokenSecret.name: an existing Secret holding a short-lived OIDC token (public Fulcio does not trust cluster issuers). Or set mode=unsigned and sign later from a trusted host with `aicr evidence sign <pointer> --relocate`." -}}
{{- end -}}
{{- /* C-04: the token is only read in signed mode. */ -}}
{{- if and (eq (toString $publish.mode) "unsigned") $tokenSecret.name -}}
{{- fail (printf "validate.publish.identityTokenSecret.name=%s is set but validate.publish.mode=unsigned: the token is only used to sign. Drop identityTokenSecret.name, or set mode=signed." (toString $tokenSecret.name)) -}}
{{- end -}}
{{- end -}}

{{- /* C-05: each capture needs its own ConfigMap, or one overwrites another. */ -}}
{{- $seen := dict -}}
{{- range $key, $name := dict "recipe.configMap" $v.recipe.configMap "validate.resultConfigMap" $validate.resultConfigMap "validate.evidenceConfigMap" $validate.evidenceConfigMap "status.configMap" $v.status.configMap -}}
{{- if $name -}}
{{- if hasKey $seen (toString $name) -}}
{{- fail (printf "%s and %s are both %q: every capture needs its own ConfigMap or one overwrites the other. Give them different names (empty turns a capture off)." (get $seen (toString $name)) $key (toString $name)) -}}
{{- end -}}
{{- $_ := set $seen (toString $name) $key -}}
{{- end -}}
{{- end -}}
{{- end -}}
