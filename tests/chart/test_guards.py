"""Every render-time guard refuses its input with its exact message.

`rejects_with` asserts the whole message of the template `fail`, so a render that
fails for another reason (a Go template error, a different guard) never passes
for a guard (anchor T-01). Guards that repeat a schema enum are also checked
with --skip-schema-validation, the switch Argo CD and Flux users can turn on.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.helm import rejects_by_schema, rejects_with, render, renders

SKIP_SCHEMA = ("--skip-schema-validation",)

NO_CRITERIA = (
    'no criteria stated (criteria.service={service}, criteria.accelerator="", criteria.intent="{intent}", '
    'pack.ref=""): aicr would resolve nothing. Do one of: set criteria.accelerator (e.g. --set '
    "criteria.accelerator=h100), set pack.ref to your organisation's pack, or name a concrete criteria.service "
    "together with a criteria.intent (e.g. criteria.service=bcm, criteria.intent=inference). `aicr recipe list "
    "--gpu <accelerator>` lists the combinations."
)
ANY_ACCELERATOR = (
    "criteria.accelerator=any: 'any' is not an accelerator value (aicr answers 'no criteria provided'). Leave "
    "criteria.accelerator empty and state criteria another way (pack.ref, or a concrete criteria.service with a "
    "criteria.intent), or name a real accelerator such as h100; `aicr recipe list` shows what exists."
)
ALIAS = (
    "criteria.service={service}: aicr maps this alias to 'generic', which has no recipe for most accelerators "
    "(the Job would fail with 'no recipe provides service'). Use criteria.service: any (the default) for a "
    "self-managed "
    "cluster, or name the service (eks, gke, k0s, rke2, ...)."
)
INTENT_WITHOUT_SERVICE = (
    "criteria.intent={intent} with criteria.service={service}: a stated intent needs a service whose overlays "
    "declare it, so aicr rejects this combination at runtime. Name the service (aks, bcm, eks, kind, lke, ocp, "
    "rke2; cks or k0s with os ubuntu; gke with os cos; oke with os ol) or leave criteria.intent empty."
)
PUBLISH_ON = {"enabled": True, "mode": "unsigned", "ref": "ghcr.io/acme/aicr-evidence"}
VALIDATE_EVIDENCE = {"enabled": True, "emitEvidence": True}


def publish(**over: Any) -> dict[str, Any]:
    return {"validate": {**VALIDATE_EVIDENCE, "publish": {**PUBLISH_ON, **over}}}


# -- criteria (G-03, G-04, G-17a, G-17b, G-17c) --------------------------------------------------


def test_g04_bare_defaults_are_rejected() -> None:
    rejects_with(None, NO_CRITERIA.format(service="any", intent=""), raw=True)


def test_g04_intent_alone_with_service_any_is_rejected() -> None:
    rejects_with({"intent": "training"}, NO_CRITERIA.format(service="any", intent="training"), raw=True)


def test_g04_a_concrete_service_alone_is_not_enough() -> None:
    rejects_with({"service": "eks"}, NO_CRITERIA.format(service="eks", intent=""), raw=True)


@pytest.mark.parametrize(
    "values",
    [
        {"accelerator": "h100"},
        {"dataPack": "ghcr.io/acme/aicr-pack:1.0.0"},
        {"service": "bcm", "intent": "inference"},
    ],
    ids=["accelerator", "dataPack", "service+intent"],
)
def test_g04_each_escape_renders(values: dict[str, Any]) -> None:
    renders(values, raw=True)


def test_g03_accelerator_any_is_rejected() -> None:
    rejects_with({"accelerator": "any"}, ANY_ACCELERATOR)
    rejects_with({"accelerator": "any"}, ANY_ACCELERATOR, args=SKIP_SCHEMA)


@pytest.mark.parametrize("alias", ["self-managed", "self", "vanilla"])
def test_g17b_service_aliases_are_rejected_with_a_pointer_to_any(alias: str) -> None:
    rejects_with({"service": alias}, ALIAS.format(service=alias))
    # With an intent (the anchor only caught this variant, through G-04).
    rejects_with({"service": alias, "intent": "training"}, ALIAS.format(service=alias), raw=True)


def test_g03_and_g17b_say_what_an_0x_aicrversion_does_with_the_value() -> None:
    rejects_with(
        {"accelerator": "any", "aicrVersion": "v0.11.1"},
        "criteria.accelerator=any: 'any' is not an accelerator value (aicr v0.11.1 reads it as no accelerator and "
        "resolves the other criteria alone, without any accelerator overlay). Leave criteria.accelerator empty and "
        "state criteria another way (pack.ref, or a concrete criteria.service with a criteria.intent), or name a "
        "real accelerator such as h100.",
    )
    rejects_with(
        {"service": "self-managed", "aicrVersion": "v0.11.1"},
        "criteria.service=self-managed: aicr v0.11.1 maps this alias to 'any', so no service overlay applies. Say "
        "criteria.service: any (the same thing, stated plainly), or name the service (aks, eks, gke, kind, oke).",
    )


@pytest.mark.parametrize("values", [{"accelerator": "any"}, {"service": "self-managed", "accelerator": "h100"}])
def test_g03_and_g17b_leave_a_preinstalled_aicr_to_the_runtime_which_asks_its_version(values: dict[str, Any]) -> None:
    result = renders({**values, "aicrBinary": {"path": "/opt/aicr/aicr"}}, raw=True)
    assert result.env["AICR_RUNNER_AICR__BINARY"] == "/opt/aicr/aicr"


def test_g17a_intent_with_service_any_is_rejected_even_with_an_accelerator() -> None:
    rejects_with({"intent": "training"}, INTENT_WITHOUT_SERVICE.format(intent="training", service="any"))
    rejects_with(
        {"intent": "inference", "service": ""},
        INTENT_WITHOUT_SERVICE.format(intent="inference", service="any"),
    )


def test_g17c_k0s_needs_aicr_v0_22() -> None:
    rejects_with(
        {"service": "k0s", "aicrVersion": "v0.21.3"},
        "criteria.service=k0s with aicr.version=v0.21.3: aicr knows service k0s from v0.22.0 ('invalid service "
        "type: k0s' before). Raise aicr.version (the chart default is v1.2.0) or, on an older aicr, use "
        "criteria.service: any with a pack that carries the k0s containerd settings.",
    )
    renders({"service": "k0s", "aicrVersion": "0.22.0", "criteriaPreflight": False})
    renders({"service": "k0s", "accelerator": "h200", "intent": "training", "os": "ubuntu"})


# -- nulls (C-20) ---------------------------------------------------------------------------------------

NULL = (
    "{path}=null: a null removes the chart's default with the key, and this value cannot be rendered without "
    "one. Leave {path} out to keep the default, or set the value you mean."
)


@pytest.mark.parametrize(
    ("values", "path"),
    [
        ({"deploy": {"flags": None}}, "deploy.flags"),
        ({"criteria": {"service": None}}, "criteria.service"),
        ({"aicr": {"download": {"attempts": None}}}, "aicr.download.attempts"),
        ({"deploy": None}, "deploy.flags"),
        ({"deployFlags": None}, "deploy.flags"),
        ({"image": {"repository": None}}, "image.repository"),
        ({"serviceAccount": {"create": None}}, "serviceAccount.create"),
        ({"rbac": {"clusterAdmin": None}}, "rbac.clusterAdmin"),
    ],
    ids=["string", "criteria", "integer", "group", "earlier-name", "image", "service-account", "rbac"],
)
def test_c20_a_null_the_chart_cannot_render_is_refused(values: dict[str, Any], path: str) -> None:
    """Without the guard each of these rendered "<nil>" or 0 into the Job, a false
    where the default is true, or failed in a template with no message (aicr.version)."""
    rejects_with(values, NULL.format(path=path))
    rejects_with(values, NULL.format(path=path), args=SKIP_SCHEMA)


@pytest.mark.parametrize(
    ("values", "env", "rendered"),
    [
        ({"validate": {"enabled": None}}, "AICR_RUNNER_VALIDATE__ENABLED", "false"),
        ({"recipe": {"args": None}}, "AICR_RUNNER_RECIPE__ARGS", "[]"),
    ],
    ids=["boolean", "list"],
)
def test_c20_a_null_boolean_reads_false_and_a_null_list_empty(values: dict[str, Any], env: str, rendered: str) -> None:
    assert renders(values).env[env] == rendered


# -- removed values (G-01, G-14, C-01) ------------------------------------------------------------


def test_g01_scalar_aicr_sha256_is_rejected() -> None:
    rejects_with(
        {"aicrSha256": "ab" * 32, "aicrArch": "arm64"},
        f'aicrSha256 must be a map of per-architecture pins, not "{"ab" * 32}". Move the value under the key '
        "for aicr.arch (arm64), e.g. aicr.sha256: {arm64: <64 hex>}; an empty entry skips the strict pin for "
        "that architecture.",
    )


K0S_REMOVED = (
    "environment.k0sContainerd was removed in chart 0.3.0 (got {got}). Set criteria.service: k0s instead (aicr v0.22 "
    "or later wires the k0s containerd itself); for a pack-private service put the k0s containerd settings "
    "in the pack overlay. Then delete environment.k0sContainerd."
)


@pytest.mark.parametrize(("value", "shown"), [(True, "true"), ("false", "false"), ("yes", "yes"), (1, "1")])
def test_g14_k0s_containerd_fails_with_the_removal_message(value: Any, shown: str) -> None:
    rejects_with({"environment": {"k0sContainerd": value}}, K0S_REMOVED.format(got=shown))


def test_g14_k0s_containerd_false_or_absent_renders() -> None:
    renders({"environment": {"k0sContainerd": False}})
    renders({"environment": {"k0sContainerd": None}})


def test_c01_runtime_and_oras_images_were_replaced() -> None:
    rejects_with(
        {"runtimeImage": "alpine/k8s:1.34.0"},
        "runtimeImage was removed in chart 0.4.0: the Job runs the aicr-runner image, which carries python, "
        "bash, helm and kubectl. Delete runtimeImage; to change the image set image.repository / image.tag / "
        "image.digest (and aicr.binary.path for a custom image with aicr preinstalled).",
    )
    rejects_with(
        {"orasImage": "ghcr.io/oras-project/oras:v1.2.0"},
        "orasImage was removed in chart 0.4.0: the runtime pulls and verifies the data pack itself, there "
        "is no oras initContainer. Delete orasImage; the data pack's settings (pack.ref, pack.secret, "
        "pack.plainHTTP, pack.insecureTLS) work as before.",
    )


def test_c02_binary_hash_needs_a_binary() -> None:
    rejects_with(
        {"aicrBinary": {"sha256": "a" * 64}},
        "aicr.binary.sha256 is set but aicr.binary.path is empty: the hash pins a preinstalled aicr in a "
        "custom image. Give its path in aicr.binary.path, or drop aicr.binary.sha256 (downloads are pinned "
        "with aicr.sha256).",
    )


# -- data pack credentials (G-11, G-12, G-13, G-17d, C-03) -----------------------------------------

PACK = "ghcr.io/acme/aicr-pack:1.0.0"
AUTH = '{"auths":{"ghcr.io":{"auth":"dXNlcjp0b2tlbg=="}}}'


@pytest.mark.parametrize(
    ("key", "values"),
    [("pack.auth", {"pack": {"ref": PACK, "auth": AUTH}}), ("dataPackAuth", {"dataPack": PACK, "dataPackAuth": AUTH})],
    ids=["pack.auth", "earlier-name"],
)
def test_g11_scalar_data_pack_auth_is_rejected(key: str, values: dict[str, Any]) -> None:
    rejects_with(
        values,
        f"{key} must be a map with a dockerconfigjson key, not string. Write pack.auth: "
        "{dockerconfigjson: '<json>'} (best delivered through valuesFrom), or use pack.secret with an "
        "existing Secret.",
    )


def test_g12_data_pack_auth_needs_a_pack() -> None:
    rejects_with(
        {"pack": {"auth": {"dockerconfigjson": AUTH}}},
        "pack.auth.dockerconfigjson is set but pack.ref and aicr.releaseRef are empty: the Secret would have "
        "no consumer. Set pack.ref to the pack's OCI reference (or aicr.releaseRef to the aicr release's), or "
        "drop pack.auth.",
    )


def test_g13_one_pack_credential_source() -> None:
    rejects_with(
        {"pack": {"ref": PACK, "secret": "regcred", "auth": {"dockerconfigjson": AUTH}}},
        "pack.secret=regcred and pack.auth.dockerconfigjson are both set: set only one, an existing "
        "Secret (pack.secret) or the chart-created one (pack.auth).",
    )


@pytest.mark.parametrize("auth", ["not json", '["a"]', '{"credsStore":"desktop"}'])
def test_c03_data_pack_auth_must_be_a_dockerconfigjson(auth: str) -> None:
    rejects_with(
        {"pack": {"ref": PACK, "auth": {"dockerconfigjson": auth}}},
        'pack.auth.dockerconfigjson is not a dockerconfigjson: it must be JSON with an "auths" map, e.g. '
        '{"auths":{"ghcr.io":{"auth":"<base64 user:token>"}}} (the content of `kubectl create secret '
        "docker-registry --dry-run=client -o jsonpath='{.data.\\.dockerconfigjson}' | base64 -d`).",
    )


@pytest.mark.parametrize(
    "values",
    [{"pack": {"secret": "regcred"}}, {"pack": {"plainHTTP": True}}, {"pack": {"insecureTLS": True}}],
    ids=["secret", "plain-http", "insecure-tls"],
)
def test_g17d_pack_transport_settings_need_a_pack(values: dict[str, Any]) -> None:
    rejects_with(
        values,
        "pack.secret / pack.plainHTTP / pack.insecureTLS are set but pack.ref and aicr.releaseRef are "
        "empty: these settings only apply to a pull from a registry. Set pack.ref to the pack's OCI reference "
        "(or aicr.releaseRef to the aicr release's), or drop them.",
    )


RELEASE_REF = "mirror.example:5000/aicr/nvidia/aicr/release:v0.11.1"


@pytest.mark.parametrize(
    "values",
    [
        {"dataPackSecret": "regcred"},
        {"dataPackPlainHTTP": True, "dataPackInsecureTLS": True},
        {"dataPackAuth": {"dockerconfigjson": AUTH}},
    ],
    ids=["secret", "transport", "chart-created-secret"],
)
def test_g12_g17d_the_aicr_release_from_a_registry_is_a_consumer_of_the_pack_transport(values: dict[str, Any]) -> None:
    rendered = renders({"aicrReleaseRef": RELEASE_REF, **values})
    [settings] = [d for d in rendered.docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-settings")]
    assert settings["data"]["AICR_RUNNER_AICR__RELEASE_REF"] == RELEASE_REF
    if "dataPackPlainHTTP" not in values:  # a credential: mounted as the file the registry pull reads
        assert "/etc/aicr-runner/pack-auth/config.json" in rendered.stdout


def test_c17_the_aicr_release_comes_from_one_place() -> None:
    rejects_with(
        {"aicrReleaseRef": RELEASE_REF, "aicrReleaseBaseUrl": "https://mirror.example/aicr"},
        f"aicr.releaseRef={RELEASE_REF} and aicr.releaseBaseUrl=https://mirror.example/aicr are both set: the aicr "
        "release comes from one place. Unset aicr.releaseBaseUrl to fetch it from the registry, or aicr.releaseRef "
        "to fetch it over HTTP.",
    )


# -- run shape (G-02, G-05, C-05) ------------------------------------------------------------------

NO_PHASE = (
    "validate.enabled=true needs at least one phase in validate.phases (deployment, performance, "
    "conformance): an empty list makes aicr run every phase, performance included. Set e.g. "
    "validate.phases={deployment}."
)


@pytest.mark.parametrize("phases", [[], [""], ["", ""], None], ids=["empty", "blank", "blanks", "null"])
def test_g02_validation_needs_a_phase(phases: Any) -> None:
    rejects_with({"validate": {"enabled": True, "phases": phases}}, NO_PHASE)


def test_g02_a_map_for_phases_is_refused_by_the_schema() -> None:
    rejects_by_schema({"validate": {"enabled": True, "phases": {}}}, "/validate/phases", "want null or array")


def test_g02_phases_do_not_matter_when_validation_is_off() -> None:
    renders({"validate": {"enabled": False, "phases": []}})


def test_g05_a_run_must_deploy_or_validate() -> None:
    rejects_with(
        {"deploy": {"enabled": False}},
        "deploy.enabled=false needs validate.enabled=true: a Job that neither deploys nor validates does "
        "nothing. Enable validation for an assert-only run, or turn deploy back on.",
    )
    renders({"deploy": {"enabled": False}, "validate": {"enabled": True}})


HELM_APPLY = (
    "deploy.helmApply={value}: must be client (the default: --server-side=false, as Helm 3 applies), server "
    "(--server-side=true, Helm 4 only) or auto (no flag: Helm 4's own choice)."
)


@pytest.mark.parametrize("value", ["bogus", "Client", 3])
def test_c19_deploy_helm_apply_is_refused_without_the_schema_too(value: Any) -> None:
    rejects_with({"deploy": {"helmApply": value}}, HELM_APPLY.format(value=value), args=SKIP_SCHEMA)


@pytest.mark.parametrize("value", ["client", "server", "auto"])
def test_c19_each_choice_renders_without_the_schema(value: str) -> None:
    renders({"deploy": {"helmApply": value}}, args=SKIP_SCHEMA)


def test_c05_captures_need_distinct_config_maps() -> None:
    rejects_with(
        {"status": {"configMap": "aicr-recipe"}},
        'recipe.configMap and status.configMap are both "aicr-recipe": every capture needs its own ConfigMap '
        "or one overwrites the other. Give them different names (empty turns a capture off).",
    )
    rejects_with(
        {"validate": {"resultConfigMap": "x", "evidenceConfigMap": "x"}},
        'validate.evidenceConfigMap and validate.resultConfigMap are both "x": every capture needs its own '
        "ConfigMap or one overwrites the other. Give them different names (empty turns a capture off).",
    )
    renders({"recipeConfigMap": "", "statusConfigMap": "", "validate": {"resultConfigMap": ""}})


# -- publishing (G-06..G-10, G-17e, C-04) -----------------------------------------------------------


def test_g06_publish_needs_validation() -> None:
    rejects_with(
        {"validate": {"enabled": False, "emitEvidence": True, "publish": PUBLISH_ON}},
        "validate.publish.enabled=true needs validate.enabled=true: publishing needs a validation run to "
        "produce the evidence bundle.",
    )


def test_g07_publish_needs_evidence() -> None:
    rejects_with(
        {"validate": {"enabled": True, "publish": PUBLISH_ON}},
        "validate.publish.enabled=true needs validate.emitEvidence=true: without --emit-attestation there is "
        "no evidence bundle to publish.",
    )


def test_g08_publish_mode_is_signed_or_unsigned() -> None:
    rejects_by_schema(publish(mode="keyless"), "/validate/publish/mode", "value must be one of")
    rejects_with(
        publish(mode="keyless"),
        'validate.publish.mode="keyless": must be signed or unsigned.',
        args=SKIP_SCHEMA,
    )


def test_g09_publish_needs_a_ref() -> None:
    rejects_with(
        publish(ref=""),
        "validate.publish.enabled=true needs validate.publish.ref: the OCI push target (--push), e.g. "
        "ghcr.io/acme/aicr-evidence.",
    )


def test_g10_signed_mode_needs_a_token_secret() -> None:
    rejects_with(
        publish(mode="signed"),
        "validate.publish.mode=signed needs validate.publish.identityTokenSecret.name: an existing Secret "
        "holding a short-lived OIDC token (public Fulcio does not trust cluster issuers). Or set "
        "mode=unsigned and sign later from a trusted host with `aicr evidence sign <pointer> --relocate`.",
    )


def test_c04_a_token_secret_in_unsigned_mode_is_refused() -> None:
    rejects_with(
        publish(mode="unsigned", identityTokenSecret={"name": "oidc"}),
        "validate.publish.identityTokenSecret.name=oidc is set but validate.publish.mode=unsigned: the "
        "token is only used to sign. Drop identityTokenSecret.name, or set mode=signed.",
    )


def test_g17e_publish_credentials_need_publishing() -> None:
    rejects_with(
        {"validate": {"publish": {"registrySecret": "push-cred"}}},
        "validate.publish.registrySecret=push-cred is set but validate.publish.enabled=false: the push "
        "credential would be unused. Enable publishing or drop registrySecret.",
    )
    rejects_with(
        {"validate": {"publish": {"identityTokenSecret": {"name": "oidc"}}}},
        "validate.publish.identityTokenSecret.name=oidc is set but validate.publish.enabled=false: the "
        "signing token would be unused. Enable publishing (mode signed) or drop identityTokenSecret.name.",
    )


# -- environment passthrough (C-06) ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["AICR_RUNNER_CRITERIA__OS", "aicr_runner_x", "COSIGN_IDENTITY_TOKEN", "DOCKER_CONFIG"]
)
def test_c06_extra_env_cannot_set_runner_settings_or_credentials(name: str) -> None:
    rejects_with(
        {"job": {"extraEnv": [{"name": "AICR_NCCL_FABRIC", "value": "roce"}, {"name": name, "value": "x"}]}},
        f"job.extraEnv[1] sets {name}: the chart renders every AICR_RUNNER_* setting from its values and "
        f"mounts credentials as files (COSIGN_IDENTITY_TOKEN and DOCKER_CONFIG in the environment would "
        f"reach every child process). Use the chart values (validate.publish.identityTokenSecret, "
        f"validate.publish.registrySecret, ...) instead.",
    )


# -- the image (C-08), the ServiceAccount (C-09), volumes (C-10), pod labels (C-11), RBAC (C-12) -------


@pytest.mark.parametrize(
    ("repository", "message"),
    [
        (
            "my.registry/aicr-runner:1.0",
            "image.repository=my.registry/aicr-runner:1.0 carries a tag: the chart appends image.tag itself, so "
            "the image would be my.registry/aicr-runner:1.0:0.1.0. Set image.repository=my.registry/aicr-runner "
            "and image.tag=1.0.",
        ),
        (
            "localhost:5000/aicr-runner:dev",
            "image.repository=localhost:5000/aicr-runner:dev carries a tag: the chart appends image.tag itself, so "
            "the image would be localhost:5000/aicr-runner:dev:0.1.0. Set image.repository=localhost:5000/aicr-runner "
            "and image.tag=dev.",
        ),
        (
            "my.registry/aicr-runner@sha256:" + "a" * 64,
            f"image.repository=my.registry/aicr-runner@sha256:{'a' * 64} carries a digest: the chart appends "
            f"image.digest (or image.tag) itself. Set image.repository=my.registry/aicr-runner and "
            f"image.digest=sha256:{'a' * 64}.",
        ),
    ],
    ids=["tag", "tag after a port", "digest"],
)
def test_c08_image_repository_with_a_tag_or_digest_is_refused(repository: str, message: str) -> None:
    rejects_by_schema({"image": {"repository": repository}}, "/image/repository", "does not match pattern")
    rejects_with({"image": {"repository": repository}}, message, args=SKIP_SCHEMA)


@pytest.mark.parametrize(
    "repository",
    [
        "ghcr.io/nvidia-aicr/aicr-runner",
        "localhost:5000/aicr-runner",
        "registry.example.com/a/b/aicr-runner",
        "aicr-runner",
    ],
)
def test_c08_a_repository_without_tag_or_digest_renders(repository: str) -> None:
    renders({"image": {"repository": repository}})
    renders({"image": {"repository": repository}}, args=SKIP_SCHEMA)


def test_c09_an_existing_service_account_must_be_named() -> None:
    message = (
        "serviceAccount.create=false needs serviceAccount.name: the Job must run as an account bound to what the "
        'install needs (README "Permissions"). Name your existing ServiceAccount in serviceAccount.name, or set '
        "serviceAccount.create=true."
    )
    rejects_with({"serviceAccount": {"create": False}}, message)
    renders({"serviceAccount": {"create": False, "name": "platform-installer"}})


@pytest.mark.parametrize("name", ["tmp", "work", "home", "pack-auth", "publish-auth", "identity-token"])
def test_c10_an_extra_volume_cannot_take_a_chart_volume_s_name(name: str) -> None:
    rejects_with(
        {"job": {"extraVolumes": [{"name": "ca", "emptyDir": {}}, {"name": name, "emptyDir": {}}]}},
        f"job.extraVolumes[1] is named {name}, a volume the chart defines itself (tmp, work, home, pack-auth, "
        f"publish-auth, identity-token): give it another name.",
    )


def test_c10_an_extra_volume_mount_needs_its_volume() -> None:
    rejects_with(
        {"job": {"extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/ssl/corp"}]}},
        "job.extraVolumeMounts[0] mounts the volume ca, which job.extraVolumes does not define. "
        "Add {name: ca, ...} to job.extraVolumes, or fix the name.",
    )


@pytest.mark.parametrize("path", ["/tmp", "/work/", "/home/aicr", "/etc/aicr-runner", "/etc/aicr-runner/pack-auth"])
def test_c10_an_extra_volume_mount_cannot_cover_the_chart_s_paths(path: str) -> None:
    rejects_with(
        {
            "job": {
                "extraVolumes": [{"name": "ca", "emptyDir": {}}],
                "extraVolumeMounts": [{"name": "ca", "mountPath": path}],
            }
        },
        f"job.extraVolumeMounts[0] mounts ca at {path.rstrip('/')}, where the chart mounts its own volumes "
        f"(/tmp, /work, /home/aicr, /etc/aicr-runner/...). Mount it elsewhere, e.g. /etc/ca.",
    )


def test_c10_schema_requires_names_and_absolute_mount_paths() -> None:
    rejects_by_schema({"job": {"extraVolumes": [{"emptyDir": {}}]}}, "/job/extraVolumes/0", "missing property 'name'")
    mount = {"name": "ca", "mountPath": "etc/ssl"}
    rejects_by_schema(
        {"job": {"extraVolumes": [{"name": "ca", "emptyDir": {}}], "extraVolumeMounts": [mount]}},
        "/job/extraVolumeMounts/0/mountPath",
        "does not match pattern",
    )


@pytest.mark.parametrize(
    "key", ["app.kubernetes.io/name", "app.kubernetes.io/instance", "batch.kubernetes.io/job-name", "job-name"]
)
def test_c11_pod_labels_cannot_replace_the_chart_s_own(key: str) -> None:
    rejects_with(
        {"job": {"podLabels": {"team": "gpu", key: "x"}}},
        f"job.podLabels sets {key}, a label the chart or the Job controller sets on the installer pod "
        f"(kubectl logs -l and the uninstall steps select on them). Use another key.",
    )


def test_c12_extra_rules_need_the_chart_s_narrower_cluster_role() -> None:
    rule = {"apiGroups": ["nvidia.com"], "resources": ["clusterpolicies"], "verbs": ["get"]}
    rejects_with(
        {"rbac": {"extraRules": [rule]}},
        "rbac.extraRules is set but rbac.clusterAdmin=true: cluster-admin already grants everything, so the rules "
        "would be unused. Set rbac.clusterAdmin=false to bind the chart's narrower ClusterRole, which they "
        "extend, or drop rbac.extraRules.",
    )
    rejects_with(
        {"rbac": {"create": False, "clusterAdmin": False, "extraRules": [rule]}},
        "rbac.extraRules is set but rbac.create=false: the chart creates no RBAC, so the rules would be unused. "
        "Add them to the RBAC you manage for serviceAccount.name, or drop rbac.extraRules.",
    )
    renders({"rbac": {"clusterAdmin": False, "extraRules": [rule]}})


# -- schema --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "pointer", "reason"),
    [
        ({"accelerator": "h1000"}, "/accelerator", "value must be one of"),
        ({"intent": "train"}, "/intent", "value must be one of"),
        ({"os": "debian"}, "/os", "value must be one of"),
        ({"platform": "ray"}, "/platform", "value must be one of"),
        ({"aicrArch": "x86_64"}, "/aicrArch", "value must be one of"),
        ({"validate": {"phases": ["all"]}}, "/validate/phases/0", "value must be one of"),
        ({"logFormat": "text"}, "/logFormat", "value must be one of"),
        ({"dataPack": "oci://ghcr.io/acme/pack:1"}, "/dataPack", "does not match pattern"),
        ({"aicrSha256": {"amd64": "abc"}}, "/aicrSha256/amd64", "does not match pattern"),
        ({"image": {"digest": "abc"}}, "/image/digest", "does not match pattern"),
        ({"aicrVersion": "latest"}, "/aicrVersion", "does not match pattern"),
        ({"recipeArgs": ["--nodes", 4]}, "/recipeArgs/1", "want string"),
        ({"deploy": {"enabled": "yes"}}, "/deploy/enabled", "want boolean"),
        ({"job": {"backoffLimit": -1}}, "/job/backoffLimit", "minimum"),
        ({"aicrDownload": {"attempts": 50}}, "/aicrDownload/attempts", "maximum"),
        ({"servce": "eks"}, "", "additional properties 'servce' not allowed"),
        ({"validate": {"publish": {"regsitrySecret": "x"}}}, "/validate/publish", "additional properties"),
        ({"serviceAccount": {"create": "yes"}}, "/serviceAccount/create", "want boolean"),
        ({"serviceAccount": {"nmae": "x"}}, "/serviceAccount", "additional properties 'nmae' not allowed"),
        ({"rbac": {"clusterAdmin": "false"}}, "/rbac/clusterAdmin", "want boolean"),
        (
            {"rbac": {"clusterAdmin": False, "extraRules": [{"apiGroups": [""]}]}},
            "/rbac/extraRules/0",
            "missing property 'verbs'",
        ),
        ({"job": {"podLabels": {"a": 1}}}, "/job/podLabels/a", "want string"),
        (
            {"global": {"imageRegistry": "https://mirror.example.com"}},
            "/global/imageRegistry",
            "does not match pattern",
        ),
        ({"global": {"imagePullSecrets": [{"nmae": "x"}]}}, "/global/imagePullSecrets/0", "missing property 'name'"),
        ({"podAnnotations": {"a": "b"}}, "", "additional properties 'podAnnotations' not allowed"),
    ],
)
def test_schema_refuses_bad_types_and_typos(values: dict[str, Any], pointer: str, reason: str) -> None:
    rejects_by_schema(values, pointer, reason)


def test_schema_admits_globals_from_parent_charts_and_delivery_tools() -> None:
    renders({"global": {"imageRegistry": "mirror.example.com", "storageClass": "fast", "security": {"x": True}}})


def test_the_guards_run_for_the_pack_auth_secret_too() -> None:
    """G-16: the Secret template includes the same validate helper as the Job."""
    result = render(
        {"dataPack": PACK, "dataPackAuth": {"dockerconfigjson": AUTH}, "accelerator": "any"},
        args=("--show-only", "templates/secret-pack-auth.yaml"),
    )
    assert result.error == ANY_ACCELERATOR
    assert "secret-pack-auth.yaml" in result.stderr


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (True, "got boolean, want string"),
        ("true", "value must be one of 'client', 'server', 'auto'"),
        ("ssa", "value must be one of 'client', 'server', 'auto'"),
        ("Client", "value must be one of 'client', 'server', 'auto'"),
    ],
)
def test_deploy_helm_apply_is_one_of_its_three_words(value: object, reason: str) -> None:
    rejects_by_schema({"deploy": {"helmApply": value}}, "/deploy/helmApply", reason)


@pytest.mark.parametrize("value", ["server", "auto"])
def test_deploy_helm_apply_reaches_the_pod_template_when_it_is_not_the_default(value: str) -> None:
    result = renders({"deploy": {"helmApply": value}})
    assert {"name": "AICR_RUNNER_DEPLOY__HELM_APPLY", "value": value} in result.env_list
    assert "AICR_RUNNER_DEPLOY__HELM_APPLY" not in result.env_from


def test_deploy_helm_apply_at_its_default_renders_nothing() -> None:
    # The render of unchanged values stays what it was before the setting existed
    # (the Job's name, and tests/chart/renamed-values.json's digests of whole renders).
    default, client = renders(), renders({"deploy": {"helmApply": "client"}})
    assert "HELM_APPLY" not in default.stdout
    assert client.stdout == default.stdout
