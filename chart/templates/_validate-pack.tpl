{{/*
The data pack's pull: one credential source, a dockerconfigjson, and
transport settings only with a pack.
Guards G-11, G-13, G-12, C-03, G-17d, C-17 (_validate.tpl says how the guards work).
*/}}
{{- define "nvidia-aicr.validate.pack" -}}
{{- $v := .Values -}}

{{- /* G-11: dataPackAuth must be a map. */ -}}
{{- if and $v.dataPackAuth (not (kindIs "map" $v.dataPackAuth)) -}}
{{- fail (printf "dataPackAuth must be a map with a dockerconfigjson key, not %s. Write dataPackAuth: {dockerconfigjson: '<json>'} (best delivered through valuesFrom), or use dataPackSecret with an existing Secret." (kindOf $v.dataPackAuth)) -}}
{{- end -}}
{{- $packAuth := "" -}}
{{- if kindIs "map" $v.dataPackAuth -}}{{- $packAuth = toString (default "" $v.dataPackAuth.dockerconfigjson) -}}{{- end -}}

{{- /* G-13: one pack credential source. */ -}}
{{- if and $v.dataPackSecret $packAuth -}}
{{- fail (printf "dataPackSecret=%s and dataPackAuth.dockerconfigjson are both set: set only one, an existing Secret (dataPackSecret) or the chart-created one (dataPackAuth)." (toString $v.dataPackSecret)) -}}
{{- end -}}

{{- /* G-12: the chart-created Secret needs a consumer (the pack pull, or the aicr release's from a registry). */ -}}
{{- if and $packAuth (not $v.dataPack) (not $v.aicr.releaseRef) -}}
{{- fail "dataPackAuth.dockerconfigjson is set but dataPack and aicr.releaseRef are empty: the Secret would have no consumer. Set dataPack to the pack's OCI reference (or aicr.releaseRef to the aicr release's), or drop dataPackAuth." -}}
{{- end -}}

{{- /* C-03: the chart-created Secret must hold a dockerconfigjson. */ -}}
{{- if $packAuth -}}
{{- $parsed := fromJson $packAuth -}}
{{- if or (hasKey $parsed "Error") (not (kindIs "map" (get $parsed "auths"))) -}}
{{- fail "dataPackAuth.dockerconfigjson is not a dockerconfigjson: it must be JSON with an \"auths\" map, e.g. {\"auths\":{\"ghcr.io\":{\"auth\":\"<base64 user:token>\"}}} (the content of `kubectl create secret docker-registry --dry-run=client -o jsonpath='{.data.\\.dockerconfigjson}' | base64 -d`)." -}}
{{- end -}}
{{- end -}}

{{- /* G-17d: pack transport settings need a pull from a registry (the pack, or the aicr release). */ -}}
{{- if and (not $v.dataPack) (not $v.aicr.releaseRef) (or $v.dataPackSecret $v.dataPackPlainHTTP $v.dataPackInsecureTLS) -}}
{{- fail "dataPackSecret / dataPackPlainHTTP / dataPackInsecureTLS are set but dataPack and aicr.releaseRef are empty: these settings only apply to a pull from a registry. Set dataPack to the pack's OCI reference (or aicr.releaseRef to the aicr release's), or drop them." -}}
{{- end -}}

{{- /* C-17: the aicr release comes from one place. */ -}}
{{- if and $v.aicr.releaseRef (ne (toString $v.aicr.releaseBaseUrl) "https://github.com/NVIDIA/aicr/releases/download") -}}
{{- fail (printf "aicr.releaseRef=%s and aicr.releaseBaseUrl=%s are both set: the aicr release comes from one place. Unset aicr.releaseBaseUrl to fetch it from the registry, or aicr.releaseRef to fetch it over HTTP." (toString $v.aicr.releaseRef) (toString $v.aicr.releaseBaseUrl)) -}}
{{- end -}}
{{- end -}}
