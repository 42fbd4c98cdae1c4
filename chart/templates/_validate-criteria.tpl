{{/*
The aicr that runs and the criteria it is asked to resolve: a preinstalled
binary's pin, values aicr reads as something else (G-03, G-17b: their wording
depends on aicr.version), criteria that resolve nothing or that aicr rejects.
The catalog check of the combination itself is _criteria.tpl (C-07).
Guards C-02, G-03, G-17b, G-04, G-17a, G-17c (_validate.tpl says how the guards work).
*/}}
{{- define "nvidia-aicr.validate.criteria" -}}
{{- $v := .Values -}}
{{- $service := toString (default "" $v.criteria.service) -}}
{{- $accelerator := toString (default "" $v.criteria.accelerator) -}}
{{- $intent := toString (default "" $v.criteria.intent) -}}
{{- $aliases := list "self-managed" "self" "vanilla" -}}
{{- $concreteService := not (has $service (concat (list "" "any") $aliases)) -}}

{{- /* C-02: aicr.binary.sha256 pins a preinstalled binary. */ -}}
{{- $binary := default dict $v.aicr.binary -}}
{{- if and $binary.sha256 (not $binary.path) -}}
{{- fail "aicr.binary.sha256 is set but aicr.binary.path is empty: the hash pins a preinstalled aicr in a custom image. Give its path in aicr.binary.path, or drop aicr.binary.sha256 (downloads are pinned with aicr.sha256)." -}}
{{- end -}}

{{- /* G-03 and G-17b say what aicr.version does with the value (1.x and 0.x differ).
A preinstalled aicr.binary.path may be any version: the runtime refuses the same
values once it has asked the binary, in that version's words. */ -}}
{{- $zeroX := semverCompare "< 1.0.0-0" (toString $v.aicr.version) -}}
{{- if not $binary.path -}}

{{- /* G-03: "any" is not an accelerator. */ -}}
{{- if and (eq $accelerator "any") (not $zeroX) -}}
{{- fail "criteria.accelerator=any: 'any' is not an accelerator value (aicr answers 'no criteria provided'). Leave criteria.accelerator empty and state criteria another way (pack.ref, or a concrete criteria.service with a criteria.intent), or name a real accelerator such as h100; `aicr recipe list` shows what exists." -}}
{{- else if eq $accelerator "any" -}}
{{- fail (printf "criteria.accelerator=any: 'any' is not an accelerator value (aicr %s reads it as no accelerator and resolves the other criteria alone, without any accelerator overlay). Leave criteria.accelerator empty and state criteria another way (pack.ref, or a concrete criteria.service with a criteria.intent), or name a real accelerator such as h100." (toString $v.aicr.version)) -}}
{{- end -}}

{{- /* G-17b: service aliases resolve to generic (1.x), which has no recipe for most accelerators, or to any (0.x). */ -}}
{{- if and (has $service $aliases) (not $zeroX) -}}
{{- fail (printf "criteria.service=%s: aicr maps this alias to 'generic', which has no recipe for most accelerators (the Job would fail with 'no recipe provides service'). Use criteria.service: any (the default) for a self-managed cluster, or name the service (eks, gke, k0s, rke2, ...)." $service) -}}
{{- else if has $service $aliases -}}
{{- fail (printf "criteria.service=%s: aicr %s maps this alias to 'any', so no service overlay applies. Say criteria.service: any (the same thing, stated plainly), or name the service (aks, eks, gke, kind, oke)." $service (toString $v.aicr.version)) -}}
{{- end -}}
{{- end -}}

{{- /* G-04: some criteria must be stated. */ -}}
{{- if and (not $accelerator) (not $v.pack.ref) (not (and $concreteService $intent)) -}}
{{- fail (printf "no criteria stated (criteria.service=%s, criteria.accelerator=\"\", criteria.intent=%q, pack.ref=\"\"): aicr would resolve nothing. Do one of: set criteria.accelerator (e.g. --set criteria.accelerator=h100), set pack.ref to your organisation's pack, or name a concrete criteria.service together with a criteria.intent (e.g. criteria.service=bcm, criteria.intent=inference). `aicr recipe list --gpu <accelerator>` lists the combinations." (default "any" $service) $intent) -}}
{{- end -}}

{{- /* G-17a: a stated intent needs a service whose overlays declare it, even with an accelerator. */ -}}
{{- if and $intent (not $concreteService) -}}
{{- fail (printf "criteria.intent=%s with criteria.service=%s: a stated intent needs a service whose overlays declare it, so aicr rejects this combination at runtime. Name the service (aks, bcm, eks, kind, lke, ocp, rke2; cks or k0s with os ubuntu; gke with os cos; oke with os ol) or leave criteria.intent empty." $intent (default "any" $service)) -}}
{{- end -}}

{{- /* G-17c: service k0s exists from aicr v0.22.0. */ -}}
{{- if and (eq $service "k0s") (semverCompare "< 0.22.0-0" (toString $v.aicr.version)) -}}
{{- fail (printf "criteria.service=k0s with aicr.version=%s: aicr knows service k0s from v0.22.0 ('invalid service type: k0s' before). Raise aicr.version (the chart default is v1.2.0) or, on an older aicr, use criteria.service: any with a pack that carries the k0s containerd settings." (toString $v.aicr.version)) -}}
{{- end -}}
{{- end -}}
