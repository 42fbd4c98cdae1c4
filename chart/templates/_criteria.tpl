{{/*
"nvidia-aicr.criteriaSupported": the render-time criteria check (fail fast on
criteria), the same rule aicr v1.x applies when it resolves a recipe.

files/criteria-catalog.json holds every embedded overlay of the pinned aicr
(scripts/gen-catalog.py, from `aicr recipe list --format json --no-health`):
name, the five criteria dimensions ("any" is a wildcard) and whether it is a
leaf. For the stated criteria (empty values and service "any" are unstated):

  applied  = overlays whose every non-"any" dimension equals the stated value
             (an overlay naming a dimension the user left unstated does not apply);
  the rule = every stated value must be carried by an applied overlay, i.e. an
             applied overlay names exactly that value.

Over-stated criteria (intent with a service whose overlays do not declare it,
gke without os cos, k0s + h200 + training without os ubuntu, a service with no
recipe for the accelerator, a value no recipe provides) fail here, at render
time, with aicr's own wording instead of minutes later in the Job. Under-stated
criteria still pass: aicr resolves a thinner recipe for them (recipe.expect.*
guards against that at runtime).

Skipped when pack.ref is set (a pack may register values and overlays; the
runtime then checks the criteria against the pack), when criteria.preflight is
false, when aicr.version is not the catalog's version, and when aicr.binary.path
is set (a preinstalled aicr may be any version; aicr itself decides, and the
runtime lists what that aicr supports). The catalog says where it comes from
(its "source"); the refusal names it.
*/}}
{{- define "nvidia-aicr.criteriaSupported" -}}
{{- $v := .Values -}}
{{- $binary := default dict $v.aicr.binary -}}
{{- if and $v.criteria.preflight (not $v.pack.ref) (not $binary.path) -}}
{{- $catalog := .Files.Get "files/criteria-catalog.json" | fromJson -}}
{{- if or (hasKey $catalog "Error") (not (kindIs "slice" $catalog.entries)) -}}
{{- fail "chart files/criteria-catalog.json is missing or not a catalog; regenerate it with scripts/gen-catalog.py." -}}
{{- end -}}
{{- $catalogVersion := toString $catalog.aicrVersion -}}
{{- if eq (trimPrefix "v" $catalogVersion) (trimPrefix "v" (toString $v.aicr.version)) -}}
{{- $dims := list "service" "accelerator" "intent" "os" "platform" -}}
{{- $query := dict -}}
{{- $stated := list -}}
{{- range $d := $dims -}}
{{- $val := toString (default "" (get $v.criteria $d)) -}}
{{- if and $val (ne $val "any") -}}
{{- $_ := set $query $d $val -}}
{{- $stated = append $stated $d -}}
{{- end -}}
{{- end -}}

{{- /* applied overlays */ -}}
{{- $applied := list -}}
{{- range $e := $catalog.entries -}}
{{- $applies := true -}}
{{- range $d := $dims -}}
{{- $ev := toString (get $e $d) -}}
{{- if and (ne $ev "any") (ne $ev (toString (get $query $d))) -}}{{- $applies = false -}}{{- end -}}
{{- end -}}
{{- if $applies -}}{{- $applied = append $applied $e -}}{{- end -}}
{{- end -}}

{{- /* every stated value must be carried */ -}}
{{- $problems := list -}}
{{- range $d := $stated -}}
{{- $value := get $query $d -}}
{{- $carried := false -}}
{{- range $e := $applied -}}{{- if eq (toString (get $e $d)) $value -}}{{- $carried = true -}}{{- end -}}{{- end -}}
{{- if not $carried -}}
{{- /* carriers: overlays naming this value; their other dimensions are what it needs */ -}}
{{- $combos := dict -}}
{{- $compatible := false -}}
{{- range $e := $catalog.entries -}}
{{- if eq (toString (get $e $d)) $value -}}
{{- $parts := list -}}
{{- $fits := true -}}
{{- range $o := $dims -}}
{{- $ev := toString (get $e $o) -}}
{{- if and (ne $o $d) (ne $ev "any") -}}
{{- $parts = append $parts (printf "%s=%s" $o $ev) -}}
{{- if and (hasKey $query $o) (ne (get $query $o) $ev) -}}{{- $fits = false -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if $fits -}}{{- $compatible = true -}}{{- end -}}
{{- $_ := set $combos (join ", " $parts) $parts -}}
{{- end -}}
{{- end -}}
{{- if not $combos -}}
{{- $known := dict -}}
{{- range $e := $catalog.entries -}}{{- $ev := toString (get $e $d) -}}{{- if ne $ev "any" -}}{{- $_ := set $known $ev true -}}{{- end -}}{{- end -}}
{{- $problems = append $problems (printf "no recipe provides %s '%s' (values with a recipe: %s)" $d $value (keys $known | sortAlpha | join ", ")) -}}
{{- else -}}
{{- /* keep the minimal combinations: drop any that contains another */ -}}
{{- $minimal := list -}}
{{- range $key, $parts := $combos -}}
{{- $isMinimal := true -}}
{{- range $okey, $oparts := $combos -}}
{{- if ne $okey $key -}}
{{- $contained := true -}}
{{- range $p := $oparts -}}{{- if not (has $p $parts) -}}{{- $contained = false -}}{{- end -}}{{- end -}}
{{- if $contained -}}{{- $isMinimal = false -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if $isMinimal -}}{{- $minimal = append $minimal (printf "(%s)" $key) -}}{{- end -}}
{{- end -}}
{{- if $compatible -}}
{{- $problems = append $problems (printf "%s '%s' requires additional criteria; supported combinations: %s" $d $value (sortAlpha $minimal | join ", ")) -}}
{{- else -}}
{{- $others := list -}}
{{- range $o := $stated -}}{{- if ne $o $d -}}{{- $others = append $others (printf "%s=%s" $o (get $query $o)) -}}{{- end -}}{{- end -}}
{{- $problems = append $problems (printf "no recipe provides %s '%s' with %s; supported combinations: %s" $d $value (join ", " $others) (sortAlpha $minimal | join ", ")) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- if $problems -}}
{{- $statedText := list -}}
{{- range $d := $stated -}}{{- $statedText = append $statedText (printf "%s=%s" $d (get $query $d)) -}}{{- end -}}
{{- fail (printf "criteria (%s) are not supported by aicr %s: %s. State a supported combination (`aicr recipe list` lists them; chart files/criteria-catalog.json holds the same, %s), set pack.ref if your pack provides this combination, or set criteria.preflight=false if aicr %s accepts it." (join ", " $statedText) $catalogVersion (join "; " $problems) (toString $catalog.source) $catalogVersion) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
