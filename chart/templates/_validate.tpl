{{/*
Render-time guards. Every message names the value, says why it is refused and
what to do instead. job.yaml and secret-pack-auth.yaml both include
"nvidia-aicr.validate", so the pack-credential rules hold for both objects.

The schema (values.schema.json) checks types and enums first; the guards below
are the cross-field rules, and they repeat the enum checks that matter so that a
render with --skip-schema-validation (Argo CD skipSchemaValidation, Flux
disableSchemaValidation) still refuses bad input. The runtime checks the same
rules again (aicr_runner.settings) for `docker run` users.

Anchor guards G-01..G-14 keep the anchor chart's gist; G-17* close the gaps the
anchor left to runtime; C-* are new.
*/}}
{{- define "nvidia-aicr.validate" -}}
{{- $v := .Values -}}
{{- $service := toString (default "" $v.service) -}}
{{- $accelerator := toString (default "" $v.accelerator) -}}
{{- $intent := toString (default "" $v.intent) -}}
{{- $aliases := list "self-managed" "self" "vanilla" -}}
{{- $concreteService := not (has $service (concat (list "" "any") $aliases)) -}}
{{- $validate := default dict $v.validate -}}
{{- $publish := default dict $validate.publish -}}
{{- $tokenSecret := default dict $publish.identityTokenSecret -}}

{{- /* C-01: values removed in 0.4.0 (schema admits them only for this message). */ -}}
{{- if hasKey $v "runtimeImage" -}}
{{- fail "runtimeImage was removed in chart 0.4.0: the Job runs the aicr-runner image, which carries python, bash, helm and kubectl. Delete runtimeImage; to change the image set image.repository / image.tag / image.digest (and aicrBinary.path for a custom image with aicr preinstalled)." -}}
{{- end -}}
{{- if hasKey $v "orasImage" -}}
{{- fail "orasImage was removed in chart 0.4.0: the runtime pulls and verifies the data pack itself, there is no oras initContainer. Delete orasImage; dataPack, dataPackSecret, dataPackPlainHTTP and dataPackInsecureTLS work as before." -}}
{{- end -}}

{{- /* G-14: environment.k0sContainerd was removed in 0.3.0. The string "false" also fails. */ -}}
{{- $env := default dict $v.environment -}}
{{- if and (kindIs "map" $env) (hasKey $env "k0sContainerd") -}}
{{- $k0s := index $env "k0sContainerd" -}}
{{- if not (or (kindIs "invalid" $k0s) (and (kindIs "bool" $k0s) (not $k0s))) -}}
{{- fail (printf "environment.k0sContainerd was removed in chart 0.3.0 (got %v). Set service: k0s instead (aicr v0.22 or later wires the k0s containerd itself); for a pack-private service put the k0s containerd settings in the pack overlay. Then delete environment.k0sContainerd." $k0s) -}}
{{- end -}}
{{- end -}}

{{- /* G-01: aicrSha256 is a per-arch map since 0.3.0. */ -}}
{{- if not (kindIs "map" $v.aicrSha256) -}}
{{- fail (printf "aicrSha256 must be a map of per-architecture pins, not %q. Move the value under the key for aicrArch (%s), e.g. aicrSha256: {%s: <64 hex>}; an empty entry skips the strict pin for that architecture." (toString $v.aicrSha256) (toString (default "the node's architecture" $v.aicrArch)) (toString (default "arm64" $v.aicrArch))) -}}
{{- end -}}

{{- /* C-02: aicrBinary.sha256 pins a preinstalled binary. */ -}}
{{- $binary := default dict $v.aicrBinary -}}
{{- if and $binary.sha256 (not $binary.path) -}}
{{- fail "aicrBinary.sha256 is set but aicrBinary.path is empty: the hash pins a preinstalled aicr in a custom image. Give its path in aicrBinary.path, or drop aicrBinary.sha256 (downloads are pinned with aicrSha256)." -}}
{{- end -}}

{{- /* G-03 and G-17b say what aicrVersion does with the value (1.x and 0.x differ).
A preinstalled aicrBinary.path may be any version: the runtime refuses the same
values once it has asked the binary, in that version's words. */ -}}
{{- $zeroX := semverCompare "< 1.0.0-0" (toString $v.aicrVersion) -}}
{{- if not $binary.path -}}

{{- /* G-03: "any" is not an accelerator. */ -}}
{{- if and (eq $accelerator "any") (not $zeroX) -}}
{{- fail "accelerator=any: 'any' is not an accelerator value (aicr answers 'no criteria provided'). Leave accelerator empty and state criteria another way (a dataPack, or a concrete service with an intent), or name a real accelerator such as h100; `aicr recipe list` shows what exists." -}}
{{- else if eq $accelerator "any" -}}
{{- fail (printf "accelerator=any: 'any' is not an accelerator value (aicr %s reads it as no accelerator and resolves the other criteria alone, without any accelerator overlay). Leave accelerator empty and state criteria another way (a dataPack, or a concrete service with an intent), or name a real accelerator such as h100." (toString $v.aicrVersion)) -}}
{{- end -}}

{{- /* G-17b: service aliases resolve to generic (1.x), which has no recipe for most accelerators, or to any (0.x). */ -}}
{{- if and (has $service $aliases) (not $zeroX) -}}
{{- fail (printf "service=%s: aicr maps this alias to 'generic', which has no recipe for most accelerators (the Job would fail with 'no recipe provides service'). Use service: any (the default) for a self-managed cluster, or name the service (eks, gke, k0s, rke2, ...)." $service) -}}
{{- else if has $service $aliases -}}
{{- fail (printf "service=%s: aicr %s maps this alias to 'any', so no service overlay applies. Say service: any (the same thing, stated plainly), or name the service (aks, eks, gke, kind, oke)." $service (toString $v.aicrVersion)) -}}
{{- end -}}
{{- end -}}

{{- /* G-04: some criteria must be stated. */ -}}
{{- if and (not $accelerator) (not $v.dataPack) (not (and $concreteService $intent)) -}}
{{- fail (printf "no criteria stated (service=%s, accelerator=\"\", intent=%q, dataPack=\"\"): aicr would resolve nothing. Do one of: set accelerator (e.g. --set accelerator=h100), set dataPack to your organisation's pack, or name a concrete service together with an intent (e.g. service=bcm, intent=inference). `aicr recipe list --gpu <accelerator>` lists the combinations." (default "any" $service) $intent) -}}
{{- end -}}

{{- /* G-17a: a stated intent needs a service whose overlays declare it, even with an accelerator. */ -}}
{{- if and $intent (not $concreteService) -}}
{{- fail (printf "intent=%s with service=%s: a stated intent needs a service whose overlays declare it, so aicr rejects this combination at runtime. Name the service (aks, bcm, eks, kind, lke, ocp, rke2; cks or k0s with os ubuntu; gke with os cos; oke with os ol) or leave intent empty." $intent (default "any" $service)) -}}
{{- end -}}

{{- /* G-17c: service k0s exists from aicr v0.22.0. */ -}}
{{- if and (eq $service "k0s") (semverCompare "< 0.22.0-0" (toString $v.aicrVersion)) -}}
{{- fail (printf "service=k0s with aicrVersion=%s: aicr knows service k0s from v0.22.0 ('invalid service type: k0s' before). Raise aicrVersion (the chart default is v1.2.0) or, on an older aicr, use service: any with a pack that carries the k0s containerd settings." (toString $v.aicrVersion)) -}}
{{- end -}}

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

{{- /* G-12: the chart-created Secret needs a consumer. */ -}}
{{- if and $packAuth (not $v.dataPack) -}}
{{- fail "dataPackAuth.dockerconfigjson is set but dataPack is empty: the Secret would have no consumer. Set dataPack to the pack's OCI reference, or drop dataPackAuth." -}}
{{- end -}}

{{- /* C-03: the chart-created Secret must hold a dockerconfigjson. */ -}}
{{- if $packAuth -}}
{{- $parsed := fromJson $packAuth -}}
{{- if or (hasKey $parsed "Error") (not (kindIs "map" (get $parsed "auths"))) -}}
{{- fail "dataPackAuth.dockerconfigjson is not a dockerconfigjson: it must be JSON with an \"auths\" map, e.g. {\"auths\":{\"ghcr.io\":{\"auth\":\"<base64 user:token>\"}}} (the content of `kubectl create secret docker-registry --dry-run=client -o jsonpath='{.data.\\.dockerconfigjson}' | base64 -d`)." -}}
{{- end -}}
{{- end -}}

{{- /* G-17d: pack transport settings need a pack. */ -}}
{{- if and (not $v.dataPack) (or $v.dataPackSecret $v.dataPackPlainHTTP $v.dataPackInsecureTLS) -}}
{{- fail "dataPackSecret / dataPackPlainHTTP / dataPackInsecureTLS are set but dataPack is empty: these settings only apply to a pack pull. Set dataPack to the pack's OCI reference, or drop them." -}}
{{- end -}}

{{- /* G-05: a run must deploy or validate. */ -}}
{{- if and (not (default dict $v.deploy).enabled) (not $validate.enabled) -}}
{{- fail "deploy.enabled=false needs validate.enabled=true: a Job that neither deploys nor validates does nothing. Enable validation for an assert-only run, or turn deploy back on." -}}
{{- end -}}

{{- /* G-02: at least one non-empty phase. */ -}}
{{- if $validate.enabled -}}
{{- if eq (include "nvidia-aicr.phases" .) "[]" -}}
{{- fail "validate.enabled=true needs at least one phase in validate.phases (deployment, performance, conformance): an empty list makes aicr run every phase, performance included. Set e.g. validate.phases={deployment}." -}}
{{- end -}}
{{- end -}}

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
{{- range $key, $name := dict "recipeConfigMap" $v.recipeConfigMap "validate.resultConfigMap" $validate.resultConfigMap "validate.evidenceConfigMap" $validate.evidenceConfigMap "statusConfigMap" $v.statusConfigMap -}}
{{- if $name -}}
{{- if hasKey $seen (toString $name) -}}
{{- fail (printf "%s and %s are both %q: every capture needs its own ConfigMap or one overwrites the other. Give them different names (empty turns a capture off)." (get $seen (toString $name)) $key (toString $name)) -}}
{{- end -}}
{{- $_ := set $seen (toString $name) $key -}}
{{- end -}}
{{- end -}}

{{- /* C-06: the chart owns the runtime's settings and the credentials. */ -}}
{{- range $i, $e := (default list (default dict $v.job).extraEnv) -}}
{{- $name := toString (default "" (get (default dict $e) "name")) -}}
{{- if or (hasPrefix "AICR_RUNNER_" (upper $name)) (has $name (list "DOCKER_CONFIG" "COSIGN_IDENTITY_TOKEN")) -}}
{{- fail (printf "job.extraEnv[%d] sets %s: the chart renders every AICR_RUNNER_* setting from its values and mounts credentials as files (COSIGN_IDENTITY_TOKEN and DOCKER_CONFIG in the environment would reach every child process). Use the chart values (validate.publish.identityTokenSecret, validate.publish.registrySecret, ...) instead." $i $name) -}}
{{- end -}}
{{- end -}}

{{- /* C-08: image.repository is a repository; the chart adds the tag or digest (the schema refuses it too). */ -}}
{{- $image := default dict $v.image -}}
{{- $repository := toString (default "" $image.repository) -}}
{{- $lastPart := last (splitList "/" $repository) -}}
{{- if contains "@" $repository -}}
{{- $byDigest := splitn "@" 2 $repository -}}
{{- fail (printf "image.repository=%s carries a digest: the chart appends image.digest (or image.tag) itself. Set image.repository=%s and image.digest=%s." $repository $byDigest._0 $byDigest._1) -}}
{{- else if contains ":" $lastPart -}}
{{- $tag := last (splitList ":" $lastPart) -}}
{{- fail (printf "image.repository=%s carries a tag: the chart appends image.tag itself, so the image would be %s. Set image.repository=%s and image.tag=%s." $repository (include "nvidia-aicr.image" .) (trimSuffix (printf ":%s" $tag) $repository) $tag) -}}
{{- end -}}

{{- /* C-09: the Job needs a ServiceAccount the chart creates or one that exists. */ -}}
{{- $serviceAccount := default dict $v.serviceAccount -}}
{{- if and (not $serviceAccount.create) (not $serviceAccount.name) -}}
{{- fail "serviceAccount.create=false needs serviceAccount.name: the Job must run as an account bound to what the install needs (README \"Permissions\"). Name your existing ServiceAccount in serviceAccount.name, or set serviceAccount.create=true." -}}
{{- end -}}

{{- /* C-10: extra volumes add to the chart's, never replace them. */ -}}
{{- $job := default dict $v.job -}}
{{- $chartVolumes := list "tmp" "work" "home" "pack-auth" "publish-auth" "identity-token" -}}
{{- $volumeNames := $chartVolumes -}}
{{- range $i, $volume := (default list $job.extraVolumes) -}}
{{- $name := toString (default "" (get (default dict $volume) "name")) -}}
{{- if has $name $chartVolumes -}}
{{- fail (printf "job.extraVolumes[%d] is named %s, a volume the chart defines itself (%s): give it another name." $i $name (join ", " $chartVolumes)) -}}
{{- end -}}
{{- $volumeNames = append $volumeNames $name -}}
{{- end -}}
{{- range $i, $mount := (default list $job.extraVolumeMounts) -}}
{{- $name := toString (default "" (get (default dict $mount) "name")) -}}
{{- $path := toString (default "" (get (default dict $mount) "mountPath")) | trimSuffix "/" -}}
{{- if not (has $name $volumeNames) -}}
{{- fail (printf "job.extraVolumeMounts[%d] mounts the volume %s, which job.extraVolumes does not define. Add {name: %s, ...} to job.extraVolumes, or fix the name." $i $name $name) -}}
{{- end -}}
{{- if or (has $path (list "/tmp" "/work" "/home/aicr" "/etc/aicr-runner")) (hasPrefix "/etc/aicr-runner/" $path) -}}
{{- fail (printf "job.extraVolumeMounts[%d] mounts %s at %s, where the chart mounts its own volumes (/tmp, /work, /home/aicr, /etc/aicr-runner/...). Mount it elsewhere, e.g. /etc/%s." $i $name $path $name) -}}
{{- end -}}
{{- end -}}

{{- /* C-11: the chart's own pod labels select the installer pod (logs, the uninstall steps). */ -}}
{{- range $key, $_ := (default dict $job.podLabels) -}}
{{- if or (has $key (list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/managed-by" "app.kubernetes.io/component" "job-name" "controller-uid")) (hasPrefix "batch.kubernetes.io/" $key) -}}
{{- fail (printf "job.podLabels sets %s, a label the chart or the Job controller sets on the installer pod (kubectl logs -l and the uninstall steps select on them). Use another key." $key) -}}
{{- end -}}
{{- end -}}

{{- /* C-12: extra rules only extend the chart's own ClusterRole. */ -}}
{{- $rbac := default dict $v.rbac -}}
{{- if and $rbac.extraRules (not $rbac.create) -}}
{{- fail "rbac.extraRules is set but rbac.create=false: the chart creates no RBAC, so the rules would be unused. Add them to the RBAC you manage for serviceAccount.name, or drop rbac.extraRules." -}}
{{- else if and $rbac.extraRules $rbac.clusterAdmin -}}
{{- fail "rbac.extraRules is set but rbac.clusterAdmin=true: cluster-admin already grants everything, so the rules would be unused. Set rbac.clusterAdmin=false to bind the chart's narrower ClusterRole, which they extend, or drop rbac.extraRules." -}}
{{- end -}}

{{- /* C-13: a toleration aicr cannot express is refused, never rendered as another one. */ -}}
{{- range $i, $t := (default list (default dict $v.snapshot).tolerations) -}}
{{- if and (kindIs "map" $t) (eq (toString (default "Equal" $t.operator)) "Exists") (ne (toString (default "" $t.value)) "") -}}
{{- fail (printf "snapshot.tolerations[%d] has operator Exists and value %q: Exists matches any value of the taint %s, so it takes none. Drop the value, or use operator Equal." $i (toString $t.value) (toString $t.key)) -}}
{{- end -}}
{{- end -}}

{{- /* C-14: aicr deletes the agent's ServiceAccount and Role in its namespace when it is done. */ -}}
{{- $snapshot := default dict $v.snapshot -}}
{{- if and $snapshot.enabled (eq (toString $snapshot.namespace) $.Release.Namespace) -}}
{{- fail (printf "snapshot.namespace is the release namespace %s: aicr deletes the agent's ServiceAccount and Role there when it is done. Use a namespace of its own (default aicr-validation)." $.Release.Namespace) -}}
{{- end -}}

{{- /* C-07: the criteria combination must exist at the pinned aicr (see _criteria.tpl). */ -}}
{{- include "nvidia-aicr.criteriaSupported" . -}}
{{- end -}}
