{{/*
Values an earlier chart release took and this one does not: each names the
release that removed or reshaped it and what to write instead.
Guards C-01, G-14, G-01 (_validate.tpl says how the guards work).
*/}}
{{- define "nvidia-aicr.validate.removed" -}}
{{- $v := .Values -}}

{{- /* C-01: values removed in 0.4.0 (schema admits them only for this message). */ -}}
{{- if hasKey $v "runtimeImage" -}}
{{- fail "runtimeImage was removed in chart 0.4.0: the Job runs the aicr-runner image, which carries python, bash, helm and kubectl. Delete runtimeImage; to change the image set image.repository / image.tag / image.digest (and aicr.binary.path for a custom image with aicr preinstalled)." -}}
{{- end -}}
{{- if hasKey $v "orasImage" -}}
{{- fail "orasImage was removed in chart 0.4.0: the runtime pulls and verifies the data pack itself, there is no oras initContainer. Delete orasImage; the data pack's settings (pack.ref, pack.secret, pack.plainHTTP, pack.insecureTLS) work as before." -}}
{{- end -}}

{{- /* G-14: environment.k0sContainerd was removed in 0.3.0. The string "false" also fails. */ -}}
{{- $env := default dict $v.environment -}}
{{- if and (kindIs "map" $env) (hasKey $env "k0sContainerd") -}}
{{- $k0s := index $env "k0sContainerd" -}}
{{- if not (or (kindIs "invalid" $k0s) (and (kindIs "bool" $k0s) (not $k0s))) -}}
{{- fail (printf "environment.k0sContainerd was removed in chart 0.3.0 (got %v). Set criteria.service: k0s instead (aicr v0.22 or later wires the k0s containerd itself); for a pack-private service put the k0s containerd settings in the pack overlay. Then delete environment.k0sContainerd." $k0s) -}}
{{- end -}}
{{- end -}}

{{- /* G-01: aicrSha256 (now aicr.sha256) is a per-arch map since 0.3.0; the
old name is checked first (a scalar there never reaches aicr.sha256). */ -}}
{{- $pinsKey := "aicr.sha256" -}}
{{- $pins := $v.aicr.sha256 -}}
{{- if and (hasKey $v "aicrSha256") (not (kindIs "map" $v.aicrSha256)) -}}
{{- $pinsKey = "aicrSha256" -}}
{{- $pins = $v.aicrSha256 -}}
{{- end -}}
{{- if not (kindIs "map" $pins) -}}
{{- fail (printf "%s must be a map of per-architecture pins, not %q. Move the value under the key for aicr.arch (%s), e.g. aicr.sha256: {%s: <64 hex>}; an empty entry skips the strict pin for that architecture." $pinsKey (toString $pins) (toString (default "the node's architecture" $v.aicr.arch)) (toString (default "arm64" $v.aicr.arch))) -}}
{{- end -}}
{{- end -}}
