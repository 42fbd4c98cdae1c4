{{/*
The data pack's pull: one credential source, a dockerconfigjson, and
transport settings only with a pack.
Guards G-11, G-13, G-12, C-03, G-17d, C-17 (_validate.tpl says how the guards work).
*/}}
{{- define "nvidia-aicr.validate.pack" -}}
{{- $v := .Values -}}

{{- /* G-11: pack.auth (or its earlier name dataPackAuth, which the compatibility
layer carries over only as a map) must be a map. */ -}}
{{- range $key, $auth := dict "pack.auth" $v.pack.auth "dataPackAuth" $v.dataPackAuth -}}
{{- if and $auth (not (kindIs "map" $auth)) -}}
{{- fail (printf "%s must be a map with a dockerconfigjson key, not %s. Write pack.auth: {dockerconfigjson: '<json>'} (best delivered through valuesFrom), or use pack.secret with an existing Secret." $key (kindOf $auth)) -}}
{{- end -}}
{{- end -}}
{{- $packAuth := "" -}}
{{- if kindIs "map" $v.pack.auth -}}{{- $packAuth = toString (default "" $v.pack.auth.dockerconfigjson) -}}{{- end -}}

{{- /* G-13: one pack credential source. */ -}}
{{- if and $v.pack.secret $packAuth -}}
{{- fail (printf "pack.secret=%s and pack.auth.dockerconfigjson are both set: set only one, an existing Secret (pack.secret) or the chart-created one (pack.auth)." (toString $v.pack.secret)) -}}
{{- end -}}

{{- /* G-12: the chart-created Secret needs a consumer (the pack pull, or the aicr release's from a registry). */ -}}
{{- if and $packAuth (not $v.pack.ref) (not $v.aicr.releaseRef) -}}
{{- fail "pack.auth.dockerconfigjson is set but pack.ref and aicr.releaseRef are empty: the Secret would have no consumer. Set pack.ref to the pack's OCI reference (or aicr.releaseRef to the aicr release's), or drop pack.auth." -}}
{{- end -}}

{{- /* C-03: the chart-created Secret must hold a dockerconfigjson. */ -}}
{{- if $packAuth -}}
{{- $parsed := fromJson $packAuth -}}
{{- if or (hasKey $parsed "Error") (not (kindIs "map" (get $parsed "auths"))) -}}
{{- fail "pack.auth.dockerconfigjson is not a dockerconfigjson: it must be JSON with an \"auths\" map, e.g. {\"auths\":{\"ghcr.io\":{\"auth\":\"<base64 user:token>\"}}} (the content of `kubectl create secret docker-registry --dry-run=client -o jsonpath='{.data.\\.dockerconfigjson}' | base64 -d`)." -}}
{{- end -}}
{{- end -}}

{{- /* G-17d: pack transport settings need a pull from a registry (the pack, or the aicr release). */ -}}
{{- if and (not $v.pack.ref) (not $v.aicr.releaseRef) (or $v.pack.secret $v.pack.plainHTTP $v.pack.insecureTLS) -}}
{{- fail "pack.secret / pack.plainHTTP / pack.insecureTLS are set but pack.ref and aicr.releaseRef are empty: these settings only apply to a pull from a registry. Set pack.ref to the pack's OCI reference (or aicr.releaseRef to the aicr release's), or drop them." -}}
{{- end -}}

{{- /* C-17: the aicr release comes from one place. */ -}}
{{- if and $v.aicr.releaseRef (ne (toString $v.aicr.releaseBaseUrl) "https://github.com/NVIDIA/aicr/releases/download") -}}
{{- fail (printf "aicr.releaseRef=%s and aicr.releaseBaseUrl=%s are both set: the aicr release comes from one place. Unset aicr.releaseBaseUrl to fetch it from the registry, or aicr.releaseRef to fetch it over HTTP." (toString $v.aicr.releaseRef) (toString $v.aicr.releaseBaseUrl)) -}}
{{- end -}}
{{- end -}}
