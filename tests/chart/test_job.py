"""The rendered objects: the Job, its pod, its env, mounts, RBAC and the pack Secret."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from aicr_runner.errors import DETERMINISTIC_EXIT_CODES
from tests.chart.helm import CHART, NAMESPACE, RELEASE, ROOT, helm, merge, rejects_by_schema, render, renders
from tests.repo.test_doc_links import HOME, Link, problem

PACK = "ghcr.io/acme/aicr-pack:1.0.0"
AUTH = '{"auths":{"ghcr.io":{"auth":"dXNlcjp0b2tlbg=="}}}'
SIGNED = {
    "validate": {
        "enabled": True,
        "emitEvidence": True,
        "publish": {
            "enabled": True,
            "mode": "signed",
            "ref": "ghcr.io/acme/aicr-evidence",
            "identityTokenSecret": {"name": "oidc-token", "key": "jwt"},
            "registrySecret": "push-cred",
        },
    }
}
UNSIGNED = merge(SIGNED, {"validate": {"publish": {"mode": "unsigned", "identityTokenSecret": {"name": ""}}}})


def secret_volume(result: Any, name: str) -> dict[str, Any]:
    return result.volumes[name]["secret"]  # type: ignore[no-any-return]


# -- objects, names, labels -------------------------------------------------------------------------


def test_defaults_render_the_service_account_bindings_settings_and_job_only() -> None:
    result = renders()
    assert sorted(result.kinds()) == [
        "ClusterRoleBinding",
        "ConfigMap",
        "Job",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ]


STABLE_LABELS = {
    "app.kubernetes.io/name": "nvidia-aicr",
    "app.kubernetes.io/instance": RELEASE,
    "app.kubernetes.io/managed-by": "Helm",
}
VERSION_LABELS = {"app.kubernetes.io/version": "0.1.0", "helm.sh/chart": "nvidia-aicr-0.4.0"}


def test_labels_follow_helm_conventions_on_every_object() -> None:
    result = renders()
    expected = STABLE_LABELS | VERSION_LABELS
    assert result.docs
    for doc in result.docs:
        labels = doc["metadata"]["labels"]
        assert {k: labels[k] for k in expected} == expected, doc["metadata"]


def test_the_pod_template_carries_no_version_label() -> None:
    # A Job's pod template cannot change: a version label there breaks the upgrade
    # to the next chart version. The versions stay on the Job's own metadata.
    result = renders()
    assert result.job["spec"]["template"]["metadata"]["labels"] == STABLE_LABELS | {
        "app.kubernetes.io/component": "installer"
    }
    assert {k: result.job["metadata"]["labels"][k] for k in VERSION_LABELS} == VERSION_LABELS


ROLE_RULES = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "resourceNames": [f"{RELEASE}-install"],
        "verbs": ["get", "update"],
    },
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": [
            "aicr-recipe",
            "aicr-validate-result",
            "aicr-evidence-bundle",
            "aicr-run-status",
            "aicr-validate-result-history",
        ],
        "verbs": ["get", "patch"],
    },
]


#: The verdict report under reports.api auto: either API, by the report's name (tests/chart/test_reports.py).
REPORT_RULES = [
    rule
    for group, resource in (("openreports.io", "reports"), ("wgpolicyk8s.io", "policyreports"))
    for rule in (
        {"apiGroups": [group], "resources": [resource], "verbs": ["create"]},
        {"apiGroups": [group], "resources": [resource], "resourceNames": [f"aicr-{RELEASE}"], "verbs": ["patch"]},
    )
]


def role_rules(job: str) -> list[dict[str, Any]]:
    """The namespaced Role: ROLE_RULES, the verdict report, then this Job by name
    (its labels read, its outcome annotations merged: aicr_runner.kube.events) and
    the Events recorded on it."""
    return [
        *ROLE_RULES,
        *REPORT_RULES,
        {"apiGroups": ["batch"], "resources": ["jobs"], "resourceNames": [job], "verbs": ["get", "patch"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
    ]


def test_rbac_binds_the_installer_account_to_cluster_admin() -> None:
    result = renders()
    sa = result.one("ServiceAccount")
    assert sa["metadata"] == {**sa["metadata"], "name": f"{RELEASE}-installer", "namespace": NAMESPACE}
    assert "annotations" not in sa["metadata"]
    crb = result.one("ClusterRoleBinding")
    assert crb["metadata"]["name"] == f"{NAMESPACE}-{RELEASE}-installer"
    assert crb["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "cluster-admin",
    }
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": f"{RELEASE}-installer", "namespace": NAMESPACE}]
    assert result.maybe("ClusterRole") is None
    assert result.pod["serviceAccountName"] == f"{RELEASE}-installer"


def test_rbac_the_namespaced_role_is_the_lease_the_result_configmaps_and_the_job() -> None:
    result = renders()
    role, binding = result.one("Role"), result.one("RoleBinding")
    assert role["metadata"]["name"] == binding["metadata"]["name"] == f"{RELEASE}-installer"
    assert role["rules"] == role_rules(result.job["metadata"]["name"])
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": f"{RELEASE}-installer",
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": f"{RELEASE}-installer", "namespace": NAMESPACE}]
    # Only the captures that are on; with none, no ConfigMap rule at all.
    some = renders({"recipeConfigMap": "", "validate": {"evidenceConfigMap": "my-evidence"}}).one("Role")["rules"]
    assert some[3]["resourceNames"] == [
        "aicr-validate-result",
        "my-evidence",
        "aicr-run-status",
        "aicr-validate-result-history",
    ]
    none = {"recipeConfigMap": "", "statusConfigMap": "", "validate": {"resultConfigMap": "", "evidenceConfigMap": ""}}
    assert [r for r in renders(none).one("Role")["rules"] if "configmaps" in r["resources"]] == []


def test_rbac_cluster_admin_false_binds_the_charts_narrower_cluster_role() -> None:
    result = renders({"rbac": {"clusterAdmin": False}})
    role = result.one("ClusterRole")
    name = f"{NAMESPACE}-{RELEASE}-installer"
    assert role["metadata"]["name"] == name
    assert result.one("ClusterRoleBinding")["roleRef"]["name"] == name
    rules = {
        (group, resource): rule["verbs"]
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    # What deploy.sh and helm need: namespaces, helm's release Secrets, CRDs, RBAC with escalate/bind.
    assert rules[("", "namespaces")] == ["get", "list", "watch", "create", "patch"], "no delete"  # patch: Helm 4's SSA
    assert "delete" in rules[("", "secrets")]
    assert "create" in rules[("apiextensions.k8s.io", "customresourcedefinitions")]
    assert {"escalate", "bind"} <= set(rules[("rbac.authorization.k8s.io", "clusterroles")])
    # What a failed run needs to tell Flux.
    assert rules[("", "events")] == ["get", "list", "watch", "create"]
    assert rules[("helm.toolkit.fluxcd.io", "helmreleases")] == ["get"]
    assert not any("*" in rule["verbs"] or "*" in rule["resources"] for rule in role["rules"]), "no wildcards"
    assert result.one("Role")["rules"] == role_rules(result.job["metadata"]["name"]), "not on the mode either"
    extra = {"apiGroups": ["monitoring.coreos.com"], "resources": ["servicemonitors"], "verbs": ["get", "create"]}
    extended = renders({"rbac": {"clusterAdmin": False, "extraRules": [extra]}}).one("ClusterRole")["rules"]
    assert extended == [*role["rules"], extra]


def test_rbac_create_false_renders_no_rbac_and_runs_as_the_named_account() -> None:
    result = renders({"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "platform-installer"}})
    assert sorted(result.kinds()) == ["ConfigMap", "Job"]
    assert result.pod["serviceAccountName"] == "platform-installer"
    # The chart may still create the account and leave the binding to you.
    own = renders({"rbac": {"create": False}})
    assert sorted(own.kinds()) == ["ConfigMap", "Job", "ServiceAccount"]


def test_service_account_name_and_annotations() -> None:
    irsa = {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/aicr"}
    result = renders({"serviceAccount": {"name": "gpu-installer", "annotations": irsa}})
    sa = result.one("ServiceAccount")
    assert (sa["metadata"]["name"], sa["metadata"]["annotations"]) == ("gpu-installer", irsa)
    assert result.pod["serviceAccountName"] == "gpu-installer"
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        assert result.one(kind)["subjects"][0]["name"] == "gpu-installer", kind


def test_the_binding_name_is_cut_to_253_characters_without_a_trailing_dash() -> None:
    namespace = "n" * 63
    release = "r" * 53
    name = render(release=release, namespace=namespace).one("ClusterRoleBinding")["metadata"]["name"]
    assert name == f"{namespace}-{release}-installer"[:253].rstrip("-")
    assert len(name) <= 253


def test_job_name_is_content_addressed_and_fits_a_label() -> None:
    result = renders(release="r" * 53)
    name = result.job["metadata"]["name"]
    base, digest = name.rsplit("-", 1)
    assert len(name) <= 63
    assert base == ("r" * 53 + "-install")[:52].rstrip("-")
    assert len(digest) == 10
    assert int(digest, 16) >= 0
    assert str(result.job).count("Revision") == 0


def job_name(values: dict[str, Any] | None = None, args: tuple[str, ...] = ()) -> str:
    return renders(values, args=args).job["metadata"]["name"]  # type: ignore[no-any-return]


def test_same_values_give_the_same_job_name() -> None:
    assert job_name({"service": "eks"}) == job_name({"service": "eks"})
    # Another helm process, the same inputs: still the same name (no randomness, no revision).
    proc = helm("template", RELEASE, str(CHART), "-n", NAMESPACE, "--set", "accelerator=h100", "--set", "service=eks")
    assert f"name: {job_name({'service': 'eks'})}\n" in proc.stdout


@pytest.mark.parametrize(
    "change",
    [
        {"service": "eks"},
        {"deployFlags": ""},
        {"validate": {"enabled": True}},
        {"job": {"extraEnv": [{"name": "AICR_NCCL_FABRIC", "value": "roce"}]}},
        {"image": {"tag": "0.1.1"}},
        {"image": {"digest": "sha256:" + "a" * 64}},
        {"image": {"repository": "registry.example.com/aicr-runner"}},
        {"dataPack": PACK, "dataPackAuth": {"dockerconfigjson": AUTH}},
    ],
    ids=lambda change: json.dumps(change)[:40],
)
def test_any_value_or_image_change_gives_a_new_job_name(change: dict[str, Any]) -> None:
    assert job_name(change) != job_name()


def test_an_app_version_change_renames_the_job_only_through_the_image(tmp_path: Any) -> None:
    import shutil

    copy = tmp_path / "chart"
    shutil.copytree(CHART, copy)
    chart_yaml = copy / "Chart.yaml"
    chart_yaml.write_text(chart_yaml.read_text().replace('appVersion: "0.1.0"', 'appVersion: "0.1.1"'))
    default = helm(
        "template",
        RELEASE,
        str(CHART),
        "-n",
        NAMESPACE,
        "--set",
        "image.tag=0.1.0",
        "--set",
        "accelerator=h100",
    )
    bumped = helm(
        "template",
        RELEASE,
        str(copy),
        "-n",
        NAMESPACE,
        "--set",
        "image.tag=0.1.0",
        "--set",
        "accelerator=h100",
    )
    assert default.returncode == bumped.returncode == 0, default.stderr + bumped.stderr

    def name(out: str) -> str:
        return next(line.split(": ")[1] for line in out.splitlines() if line.startswith("  name: t-install-"))

    # The image is pinned: the same install, so the same Job.
    assert name(default.stdout) == name(bumped.stdout)
    unpinned = [helm("template", RELEASE, str(c), "-n", NAMESPACE, "--set", "accelerator=h100") for c in (CHART, copy)]
    # The tag follows appVersion: another image, so another Job.
    assert name(unpinned[0].stdout) != name(unpinned[1].stdout)


# -- Job spec -----------------------------------------------------------------------------------------


def test_job_spec_comes_from_values() -> None:
    spec = renders({"job": {"backoffLimit": 3, "activeDeadlineSeconds": 7200}}).job["spec"]
    assert spec["backoffLimit"] == 3
    assert spec["activeDeadlineSeconds"] == 7200
    spec = renders().job["spec"]
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"]) == (1, 10800)


def test_ttl_is_rendered_only_when_set() -> None:
    assert "ttlSecondsAfterFinished" not in renders().job["spec"]
    assert renders({"job": {"ttlSecondsAfterFinished": 3600}}).job["spec"]["ttlSecondsAfterFinished"] == 3600
    assert renders({"job": {"ttlSecondsAfterFinished": 0}}).job["spec"]["ttlSecondsAfterFinished"] == 0


def test_pod_failure_policy_fails_fast_on_the_runtimes_deterministic_codes() -> None:
    rules = renders().job["spec"]["podFailurePolicy"]["rules"]
    assert rules == [
        {
            "action": "FailJob",
            "onExitCodes": {
                "containerName": "aicr-runner",
                "operator": "In",
                "values": list(DETERMINISTIC_EXIT_CODES),
            },
        },
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    ]


def test_pod_is_locked_down() -> None:
    result = renders()
    pod = result.pod
    assert pod["restartPolicy"] == "Never"
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert result.container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["enableServiceLinks"] is False


def test_container_runs_the_image_entrypoint_with_run() -> None:
    container = renders().container
    assert container["name"] == "aicr-runner"
    assert container["args"] == ["run"]
    assert "command" not in container
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["resources"] == {
        "requests": {"cpu": "200m", "memory": "256Mi"},
        "limits": {"cpu": "1000m", "memory": "2048Mi"},
    }


def test_image_defaults_to_app_version_and_uses_a_digest_when_given() -> None:
    assert renders().container["image"] == "ghcr.io/nvidia-aicr/aicr-runner:0.1.0"
    assert renders({"image": {"tag": "0.2.0"}}).container["image"] == "ghcr.io/nvidia-aicr/aicr-runner:0.2.0"
    digest = "sha256:" + "b" * 64
    assert renders({"image": {"tag": "0.2.0", "digest": digest}}).container["image"] == (
        f"ghcr.io/nvidia-aicr/aicr-runner@{digest}"
    )
    assert renders({"image": {"pullPolicy": "Always"}}).container["imagePullPolicy"] == "Always"


def test_image_pull_secrets_only_when_set() -> None:
    assert "imagePullSecrets" not in renders().pod
    assert renders({"imagePullSecrets": [{"name": "regcred"}]}).pod["imagePullSecrets"] == [{"name": "regcred"}]


def test_global_image_pull_secrets_come_first_as_names_or_references_each_once() -> None:
    pod = renders(
        {
            "global": {"imagePullSecrets": ["fleet", {"name": "mirror"}]},
            "imagePullSecrets": [{"name": "mirror"}, {"name": "own"}],
        }
    ).pod
    assert pod["imagePullSecrets"] == [{"name": "fleet"}, {"name": "mirror"}, {"name": "own"}]
    assert renders({"global": {"imagePullSecrets": ["fleet"]}}).pod["imagePullSecrets"] == [{"name": "fleet"}]


@pytest.mark.parametrize(
    ("registry", "repository", "image"),
    [
        ("", "ghcr.io/nvidia-aicr/aicr-runner", "ghcr.io/nvidia-aicr/aicr-runner:0.1.0"),
        ("mirror.example.com", "ghcr.io/nvidia-aicr/aicr-runner", "mirror.example.com/nvidia-aicr/aicr-runner:0.1.0"),
        (
            "harbor.example.com/ghcr/",
            "ghcr.io/nvidia-aicr/aicr-runner",
            "harbor.example.com/ghcr/nvidia-aicr/aicr-runner:0.1.0",
        ),
        ("mirror.example.com:5000", "localhost:5000/aicr-runner", "mirror.example.com:5000/aicr-runner:0.1.0"),
        ("mirror.example.com", "localhost/aicr-runner", "mirror.example.com/aicr-runner:0.1.0"),
        # No registry in the repository: the registry is a prefix.
        ("mirror.example.com", "nvidia-aicr/aicr-runner", "mirror.example.com/nvidia-aicr/aicr-runner:0.1.0"),
        ("mirror.example.com", "aicr-runner", "mirror.example.com/aicr-runner:0.1.0"),
    ],
)
def test_global_image_registry_replaces_the_registry_of_the_repository(
    registry: str, repository: str, image: str
) -> None:
    values = {"global": {"imageRegistry": registry}, "image": {"repository": repository}}
    assert renders(values).container["image"] == image
    digest = "sha256:" + "e" * 64
    by_digest = renders(merge(values, {"image": {"digest": digest}})).container["image"]
    assert by_digest == image.rsplit(":", 1)[0] + "@" + digest


def test_a_new_image_registry_is_a_new_job() -> None:
    assert job_name({"global": {"imageRegistry": "mirror.example.com"}}) != job_name()


def test_scheduling_is_rendered_only_when_set() -> None:
    pod = renders().pod
    for key in ("nodeSelector", "tolerations", "affinity", "priorityClassName"):
        assert key not in pod
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "node-role", "operator": "In", "values": ["infra"]}]}
                ]
            }
        }
    }
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    pod = renders(
        {
            "job": {
                "nodeSelector": {"pool": "system"},
                "tolerations": tolerations,
                "affinity": affinity,
                "priorityClassName": "system-cluster-critical",
            }
        }
    ).pod
    assert pod["nodeSelector"] == {"pool": "system"}
    assert pod["tolerations"] == tolerations
    assert pod["affinity"] == affinity
    assert pod["priorityClassName"] == "system-cluster-critical"


def test_pod_annotations_only_when_set() -> None:
    assert "annotations" not in renders().job["spec"]["template"]["metadata"]
    meta = renders({"job": {"podAnnotations": {"example.com/team": "gpu"}}}).job["spec"]["template"]["metadata"]
    assert meta["annotations"] == {"example.com/team": "gpu"}


def test_pod_labels_are_added_to_the_charts_own() -> None:
    meta = renders({"job": {"podLabels": {"example.com/team": "gpu", "cost-center": "42"}}}).job["spec"]["template"][
        "metadata"
    ]
    assert meta["labels"] == STABLE_LABELS | {
        "app.kubernetes.io/component": "installer",
        "example.com/team": "gpu",
        "cost-center": "42",
    }


def test_extra_volumes_and_mounts_follow_the_charts_own() -> None:
    volumes = [
        {"name": "sigstore-root", "configMap": {"name": "sigstore-trusted-root"}},
        {"name": "ca", "secret": {"secretName": "corp-ca"}},
    ]
    mounts = [
        {"name": "sigstore-root", "mountPath": "/etc/sigstore", "readOnly": True},
        {"name": "ca", "mountPath": "/etc/ssl/corp"},
    ]
    result = renders(
        {
            "job": {"extraVolumes": volumes, "extraVolumeMounts": mounts},
            "aicrProvenance": {"trustedRoot": "/etc/sigstore/trusted_root.json"},
        }
    )
    assert result.pod["volumes"][-2:] == volumes
    assert [v["name"] for v in result.pod["volumes"][:3]] == ["tmp", "work", "home"]
    assert result.container["volumeMounts"][-2:] == mounts
    assert result.env["AICR_RUNNER_AICR__PROVENANCE__TRUSTED_ROOT"] == "/etc/sigstore/trusted_root.json"
    assert renders().volumes.keys() == {"tmp", "work", "home"}


def test_termination_grace_leaves_the_runtime_15_seconds() -> None:
    result = renders()
    assert result.pod["terminationGracePeriodSeconds"] == 1260, "covers one helm operation (20 min) plus 15 s"
    assert result.env["AICR_RUNNER_SHUTDOWN_GRACE_SECONDS"] == "1245"
    result = renders({"job": {"terminationGracePeriodSeconds": 600}})
    assert (
        result.pod["terminationGracePeriodSeconds"],
        result.env["AICR_RUNNER_SHUTDOWN_GRACE_SECONDS"],
    ) == (600, "585")
    assert renders({"job": {"terminationGracePeriodSeconds": 10}}).env["AICR_RUNNER_SHUTDOWN_GRACE_SECONDS"] == "0"


# -- volumes and writable paths ----------------------------------------------------------------------


def test_writable_paths_are_empty_dirs_and_nothing_else_by_default() -> None:
    result = renders()
    assert result.volumes == {name: {"name": name, "emptyDir": {}} for name in ("tmp", "work", "home")}
    assert {name: m["mountPath"] for name, m in result.mounts.items()} == {
        "tmp": "/tmp",
        "work": "/work",
        "home": "/home/aicr",
    }
    env = result.env
    assert env["HOME"] == "/home/aicr"
    assert env["TMPDIR"] == "/tmp"
    assert env["AICR_RUNNER_WORK_DIR"] == "/work"
    for var in ("XDG_CACHE_HOME", "HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME", "KUBECACHEDIR"):
        assert env[var].startswith("/home/aicr/"), var


def test_job_work_size_limit_bounds_the_work_volume_only() -> None:
    result = renders({"job": {"workSizeLimit": "2Gi"}})
    assert result.volumes["work"] == {"name": "work", "emptyDir": {"sizeLimit": "2Gi"}}
    assert result.volumes["tmp"] == {"name": "tmp", "emptyDir": {}}
    assert result.volumes["home"] == {"name": "home", "emptyDir": {}}


def test_job_work_size_limit_must_be_a_quantity() -> None:
    rejects_by_schema({"job": {"workSizeLimit": "two gigs"}}, "/job/workSizeLimit", "does not match")


# -- data pack credentials -------------------------------------------------------------------------------


def expect_pack_auth_mount(result: Any, secret: str) -> None:
    assert secret_volume(result, "pack-auth") == {
        "secretName": secret,
        "items": [{"key": ".dockerconfigjson", "path": "config.json", "mode": 0o440}],
    }
    assert result.mounts["pack-auth"] == {
        "name": "pack-auth",
        "mountPath": "/etc/aicr-runner/pack-auth",
        "readOnly": True,
    }
    assert result.env["AICR_RUNNER_PACK__CREDENTIALS_FILE"] == "/etc/aicr-runner/pack-auth/config.json"


def test_no_pack_means_no_credentials() -> None:
    result = renders()
    assert "pack-auth" not in result.volumes
    assert "pack-auth" not in result.mounts
    assert result.env["AICR_RUNNER_PACK__REF"] == ""
    assert result.env["AICR_RUNNER_PACK__CREDENTIALS_FILE"] == ""
    assert result.maybe("Secret") is None


def test_a_public_pack_is_pulled_anonymously() -> None:
    result = renders({"dataPack": PACK})
    assert result.env["AICR_RUNNER_PACK__REF"] == PACK
    assert result.env["AICR_RUNNER_PACK__CREDENTIALS_FILE"] == ""
    assert "pack-auth" not in result.volumes
    assert result.maybe("Secret") is None


def test_an_existing_pack_secret_is_mounted_as_a_file() -> None:
    result = renders({"dataPack": PACK, "dataPackSecret": "acme-registry-cred"})
    expect_pack_auth_mount(result, "acme-registry-cred")
    assert result.maybe("Secret") is None


def test_pack_auth_creates_the_secret_the_job_mounts() -> None:
    result = renders({"dataPack": PACK, "dataPackAuth": {"dockerconfigjson": AUTH}})
    secret = result.one("Secret")
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    assert secret["stringData"] == {".dockerconfigjson": AUTH}
    assert secret["metadata"]["name"] == f"{RELEASE}-pack-auth"
    assert secret["metadata"]["namespace"] == NAMESPACE
    expect_pack_auth_mount(result, secret["metadata"]["name"])


def test_pack_transport_flags_reach_the_runtime_as_true_or_false() -> None:
    result = renders({"dataPack": PACK, "dataPackPlainHTTP": True, "dataPackInsecureTLS": True})
    assert result.env["AICR_RUNNER_PACK__PLAIN_HTTP"] == "true"
    assert result.env["AICR_RUNNER_PACK__INSECURE_TLS"] == "true"
    result = renders({"dataPack": PACK})
    assert result.env["AICR_RUNNER_PACK__PLAIN_HTTP"] == "false"
    assert result.env["AICR_RUNNER_PACK__INSECURE_TLS"] == "false"


# -- publishing credentials -------------------------------------------------------------------------------


def test_signed_publish_mounts_the_token_as_a_file_and_never_as_env() -> None:
    result = renders(SIGNED)
    assert secret_volume(result, "identity-token") == {
        "secretName": "oidc-token",
        "items": [{"key": "jwt", "path": "token", "mode": 0o440}],
    }
    assert result.mounts["identity-token"]["mountPath"] == "/etc/aicr-runner/identity-token"
    assert result.mounts["identity-token"]["readOnly"] is True
    assert result.env["AICR_RUNNER_VALIDATE__PUBLISH__IDENTITY_TOKEN_FILE"] == "/etc/aicr-runner/identity-token/token"
    assert result.env["AICR_RUNNER_VALIDATE__PUBLISH__MODE"] == "signed"
    names = [entry["name"] for entry in result.env_list]
    assert "COSIGN_IDENTITY_TOKEN" not in names
    from_secrets = [entry for entry in result.env_list if "secretKeyRef" in entry.get("valueFrom", {})]
    assert from_secrets == [], "no Secret reaches the environment"
    assert all("secretRef" not in source for source in result.container.get("envFrom") or [])


def test_unsigned_publish_has_no_token_file() -> None:
    result = renders(UNSIGNED)
    assert "identity-token" not in result.volumes
    assert "identity-token" not in result.mounts
    assert result.env["AICR_RUNNER_VALIDATE__PUBLISH__IDENTITY_TOKEN_FILE"] == ""
    assert result.env["AICR_RUNNER_VALIDATE__PUBLISH__MODE"] == "unsigned"
    assert "COSIGN_IDENTITY_TOKEN" not in [entry["name"] for entry in result.env_list]


def test_the_push_credential_is_mounted_only_when_publishing_with_a_registry_secret() -> None:
    result = renders(UNSIGNED)
    assert secret_volume(result, "publish-auth") == {
        "secretName": "push-cred",
        "items": [{"key": ".dockerconfigjson", "path": "config.json", "mode": 0o440}],
    }
    assert result.mounts["publish-auth"] == {
        "name": "publish-auth",
        "mountPath": "/etc/aicr-runner/publish-auth",
        "readOnly": True,
    }
    assert result.env["AICR_RUNNER_VALIDATE__PUBLISH__REGISTRY_CONFIG_DIR"] == "/etc/aicr-runner/publish-auth"
    anonymous = renders(merge(UNSIGNED, {"validate": {"publish": {"registrySecret": ""}}}))
    assert "publish-auth" not in anonymous.volumes
    assert "publish-auth" not in anonymous.mounts
    assert anonymous.env["AICR_RUNNER_VALIDATE__PUBLISH__REGISTRY_CONFIG_DIR"] == ""
    assert renders().env["AICR_RUNNER_VALIDATE__PUBLISH__REGISTRY_CONFIG_DIR"] == ""


def test_publish_settings_reach_the_runtime() -> None:
    env = renders(merge(UNSIGNED, {"validate": {"publish": {"failOnError": True, "plainHTTP": True}}})).env
    assert env["AICR_RUNNER_VALIDATE__PUBLISH__ENABLED"] == "true"
    assert env["AICR_RUNNER_VALIDATE__PUBLISH__REF"] == "ghcr.io/acme/aicr-evidence"
    assert env["AICR_RUNNER_VALIDATE__PUBLISH__FAIL_ON_ERROR"] == "true"
    assert env["AICR_RUNNER_VALIDATE__PUBLISH__PLAIN_HTTP"] == "true"
    assert env["AICR_RUNNER_VALIDATE__PUBLISH__INSECURE_TLS"] == "false"


# -- environment ------------------------------------------------------------------------------------------


def test_extra_env_is_appended_after_the_chart_env() -> None:
    extra = [
        {"name": "AICR_NCCL_FABRIC", "value": "roce"},
        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    ]
    env_list = renders({"job": {"extraEnv": extra}}).env_list
    assert env_list[-2:] == extra
    # The same entries before them; only the Job name (holder identity) differs, extraEnv being part of the identity.
    strip = [e for e in env_list[:-2] if e["name"] != "AICR_RUNNER_LEASE__JOB_NAME"]
    assert strip == [e for e in renders().env_list if e["name"] != "AICR_RUNNER_LEASE__JOB_NAME"]


def test_lists_reach_the_runtime_as_json_with_every_character_kept() -> None:
    args = ["--set", "gpuoperator:driver.version=580.1 'beta'", "*.yaml", "4"]
    env = renders(
        {
            "recipeArgs": args,
            "bundleArgs": ["--storage-class", "fast ssd"],
            "validateArgs": ["--namespace", "aicr"],
            "deployArgs": ["--retries", "1"],
            "recipe": {"expect": {"minComponents": 11, "components": ["gpu-operator"], "overlays": ["h100-any"]}},
        }
    ).env
    assert json.loads(env["AICR_RUNNER_RECIPE__ARGS"]) == args
    assert json.loads(env["AICR_RUNNER_BUNDLE__ARGS"]) == ["--storage-class", "fast ssd"]
    assert json.loads(env["AICR_RUNNER_VALIDATE__ARGS"]) == ["--namespace", "aicr"]
    assert json.loads(env["AICR_RUNNER_DEPLOY__ARGS"]) == ["--retries", "1"]
    assert env["AICR_RUNNER_RECIPE__EXPECT__MIN_COMPONENTS"] == "11"
    assert json.loads(env["AICR_RUNNER_RECIPE__EXPECT__COMPONENTS"]) == ["gpu-operator"]
    assert json.loads(env["AICR_RUNNER_RECIPE__EXPECT__OVERLAYS"]) == ["h100-any"]


def test_phases_drop_empty_entries() -> None:
    env = renders({"validate": {"enabled": True, "phases": ["", "deployment", "", "performance"]}}).env
    assert json.loads(env["AICR_RUNNER_VALIDATE__PHASES"]) == ["deployment", "performance"]
    assert json.loads(renders().env["AICR_RUNNER_VALIDATE__PHASES"]) == ["deployment"]


def test_booleans_are_exactly_true_or_false() -> None:
    on = renders(
        {
            "environment": {"preinstalledDriver": True},
            "deploy": {"enabled": False},
            "validate": {"enabled": True, "failOnError": True, "emitEvidence": True},
        }
    ).env
    assert on["AICR_RUNNER_ENVIRONMENT__PREINSTALLED_DRIVER"] == "true"
    assert on["AICR_RUNNER_DEPLOY__ENABLED"] == "false"
    assert on["AICR_RUNNER_VALIDATE__ENABLED"] == "true"
    assert on["AICR_RUNNER_VALIDATE__FAIL_ON_ERROR"] == "true"
    assert on["AICR_RUNNER_VALIDATE__EMIT_EVIDENCE"] == "true"
    off = renders().env
    assert off["AICR_RUNNER_ENVIRONMENT__PREINSTALLED_DRIVER"] == "false"
    assert off["AICR_RUNNER_DEPLOY__ENABLED"] == "true"
    assert off["AICR_RUNNER_VALIDATE__ENABLED"] == "false"
    bool_values = {v for k, v in off.items() if k.endswith(("ENABLED", "ERROR", "EVIDENCE", "HTTP", "TLS", "DRIVER"))}
    assert bool_values <= {"true", "false"}


def test_values_reach_the_runtime_verbatim() -> None:
    env = renders(
        {
            "service": "eks",
            "accelerator": "h100",
            "intent": "training",
            "os": "ubuntu",
            "platform": "kubeflow",
            "aicrVersion": "1.2.0",
            "aicrArch": "arm64",
            "aicrSha256": {"amd64": "a" * 64, "arm64": "b" * 64},
            "mirror": {"registry": "mirror.example:5000/air", "chartRepository": "https://charts.mirror.example"},
            "aicrReleaseBaseUrl": "https://mirror.example.com/aicr",
            "aicrBinary": {"path": "/opt/aicr/aicr", "sha256": "c" * 64},
            "aicrDownload": {"attempts": 3, "timeoutSeconds": 30, "budgetSeconds": 120},
            "aicrProvenance": {
                "mode": "warn",
                "identity": "https://github.com/acme/aicr/.github/workflows/on-tag.yaml@refs/tags/{version}",
                "issuer": "https://token.example.com",
                "trustedRoot": "/etc/sigstore/trusted_root.json",
            },
            "recipeFlags": "--nodes 4",
            "bundleFlags": "--vendor-charts",
            "validateFlags": "--timeout 10m",
            "deployFlags": "--retries 1",
            "deploy": {"failOnComponentFailure": True, "helmApply": "auto"},
            "storageClass": "gp3",
            "recipeConfigMap": "r",
            "validate": {"resultConfigMap": "v", "evidenceConfigMap": "e"},
            "statusConfigMap": "s",
            "logFormat": "json",
            "reports": {"api": "wgpolicy"},
            "upgradeCheck": {"onUnknown": "warn", "requireAssessment": True},
        },
        namespace="gpu-system",
    ).env
    assert {k: env[k] for k in env if k.startswith("AICR_RUNNER_") and not k.endswith(("ARGS", "PHASES"))} == {
        "AICR_RUNNER_CRITERIA__SERVICE": "eks",
        "AICR_RUNNER_CRITERIA__ACCELERATOR": "h100",
        "AICR_RUNNER_CRITERIA__INTENT": "training",
        "AICR_RUNNER_CRITERIA__OS": "ubuntu",
        "AICR_RUNNER_CRITERIA__PLATFORM": "kubeflow",
        "AICR_RUNNER_PACK__REF": "",
        "AICR_RUNNER_PACK__CREDENTIALS_FILE": "",
        "AICR_RUNNER_PACK__PLAIN_HTTP": "false",
        "AICR_RUNNER_PACK__INSECURE_TLS": "false",
        "AICR_RUNNER_PACK__PULL_BUDGET_SECONDS": "600",
        "AICR_RUNNER_AICR__RELEASE_REF": "",
        "AICR_RUNNER_AICR__VERSION": "1.2.0",
        "AICR_RUNNER_AICR__ARCH": "arm64",
        "AICR_RUNNER_AICR__SHA256__AMD64": "a" * 64,
        "AICR_RUNNER_AICR__SHA256__ARM64": "b" * 64,
        "AICR_RUNNER_AICR__RELEASE_BASE_URL": "https://mirror.example.com/aicr",
        "AICR_RUNNER_AICR__BINARY": "/opt/aicr/aicr",
        "AICR_RUNNER_AICR__BINARY_SHA256": "c" * 64,
        "AICR_RUNNER_AICR__DOWNLOAD_ATTEMPTS": "3",
        "AICR_RUNNER_AICR__DOWNLOAD_TIMEOUT_SECONDS": "30",
        "AICR_RUNNER_AICR__DOWNLOAD_BUDGET_SECONDS": "120",
        "AICR_RUNNER_AICR__PROVENANCE__MODE": "warn",
        "AICR_RUNNER_AICR__PROVENANCE__IDENTITY": "https://github.com/acme/aicr/.github/workflows/on-tag.yaml@refs/tags/{version}",
        "AICR_RUNNER_AICR__PROVENANCE__ISSUER": "https://token.example.com",
        "AICR_RUNNER_AICR__PROVENANCE__TRUSTED_ROOT": "/etc/sigstore/trusted_root.json",
        "AICR_RUNNER_RECIPE__FLAGS": "--nodes 4",
        "AICR_RUNNER_RECIPE__CONFIGMAP": "r",
        "AICR_RUNNER_RECIPE__EXPECT__MIN_COMPONENTS": "0",
        "AICR_RUNNER_RECIPE__EXPECT__COMPONENTS": "[]",
        "AICR_RUNNER_RECIPE__EXPECT__OVERLAYS": "[]",
        "AICR_RUNNER_BUNDLE__FLAGS": "--vendor-charts",
        "AICR_RUNNER_BUNDLE__STORAGE_CLASS": "gp3",
        "AICR_RUNNER_DEPLOY__ENABLED": "true",
        "AICR_RUNNER_DEPLOY__FLAGS": "--retries 1",
        "AICR_RUNNER_DEPLOY__FAIL_ON_COMPONENT_FAILURE": "true",
        "AICR_RUNNER_DEPLOY__HELM_APPLY": "auto",
        "AICR_RUNNER_ENVIRONMENT__PREINSTALLED_DRIVER": "false",
        "AICR_RUNNER_VALIDATE__ENABLED": "false",
        "AICR_RUNNER_VALIDATE__FAIL_ON_ERROR": "false",
        "AICR_RUNNER_VALIDATE__EMIT_EVIDENCE": "false",
        "AICR_RUNNER_VALIDATE__RESULT_CONFIGMAP": "v",
        "AICR_RUNNER_VALIDATE__EVIDENCE_CONFIGMAP": "e",
        "AICR_RUNNER_VALIDATE__FLAGS": "--timeout 10m",
        "AICR_RUNNER_VALIDATE__PUBLISH__ENABLED": "false",
        "AICR_RUNNER_VALIDATE__PUBLISH__MODE": "signed",
        "AICR_RUNNER_VALIDATE__PUBLISH__REF": "",
        "AICR_RUNNER_VALIDATE__PUBLISH__FAIL_ON_ERROR": "false",
        "AICR_RUNNER_VALIDATE__PUBLISH__INSECURE_TLS": "false",
        "AICR_RUNNER_VALIDATE__PUBLISH__PLAIN_HTTP": "false",
        "AICR_RUNNER_VALIDATE__PUBLISH__REGISTRY_CONFIG_DIR": "",
        "AICR_RUNNER_VALIDATE__PUBLISH__IDENTITY_TOKEN_FILE": "",
        "AICR_RUNNER_UPGRADE_CHECK__ACKNOWLEDGE": "[]",
        "AICR_RUNNER_UPGRADE_CHECK__ON_UNKNOWN": "warn",
        "AICR_RUNNER_UPGRADE_CHECK__REQUIRE_ASSESSMENT": "true",
        "AICR_RUNNER_STATUS_CONFIGMAP": "s",
        "AICR_RUNNER_REPORTS__API": "wgpolicy",
        "AICR_RUNNER_REPORTS__NAME": f"aicr-{RELEASE}",
        "AICR_RUNNER_REPORTS__RELEASE": RELEASE,
        "AICR_RUNNER_NAMESPACE": "gpu-system",
        "AICR_RUNNER_WORK_DIR": "/work",
        "AICR_RUNNER_LOG_FORMAT": "json",
        "AICR_RUNNER_TERMINATION_MESSAGE_PATH": "/dev/termination-log",
        "AICR_RUNNER_SHUTDOWN_GRACE_SECONDS": "1245",
        "AICR_RUNNER_LEASE__NAME": "t-install",
        "AICR_RUNNER_LEASE__DURATION_SECONDS": "60",
        "AICR_RUNNER_LEASE__WAIT_SECONDS": "7200",
        "AICR_RUNNER_KUBE_WRITE_BUDGET_SECONDS": "120",
        "AICR_RUNNER_VALIDATE__HISTORY_LIMIT": "20",
        "AICR_RUNNER_SNAPSHOT__ENABLED": "false",
        "AICR_RUNNER_SNAPSHOT__CONFIGMAP": "aicr-cluster-snapshot",
        "AICR_RUNNER_MIRROR__REGISTRY": "mirror.example:5000/air",
        "AICR_RUNNER_MIRROR__CHART_REPOSITORY": "https://charts.mirror.example",
        # aicrVersion without its "v": aicr's image tag has one all the same
        "AICR_RUNNER_SNAPSHOT__IMAGE": "ghcr.io/nvidia/aicr:v1.2.0",
        "AICR_RUNNER_SNAPSHOT__NAMESPACE": "aicr-validation",
        "AICR_RUNNER_SNAPSHOT__NODE_SELECTOR": "[]",
        "AICR_RUNNER_SNAPSHOT__PRIVILEGED": "true",
        "AICR_RUNNER_SNAPSHOT__TIMEOUT_SECONDS": "300",
        "AICR_RUNNER_SNAPSHOT__TOLERATIONS": "[]",
    }


def test_the_pod_reads_its_job_name_from_the_job_controllers_label() -> None:
    # The name is a hash of the pod template, so the template cannot hold it; the
    # Job controller labels every pod it creates with its Job's name.
    [entry] = [e for e in renders().env_list if e["name"] == "AICR_RUNNER_LEASE__JOB_NAME"]
    assert entry == {
        "name": "AICR_RUNNER_LEASE__JOB_NAME",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['batch.kubernetes.io/job-name']"}},
    }


def test_default_config_map_names_and_versions() -> None:
    env = renders().env
    assert env["AICR_RUNNER_RECIPE__CONFIGMAP"] == "aicr-recipe"
    assert env["AICR_RUNNER_VALIDATE__RESULT_CONFIGMAP"] == "aicr-validate-result"
    assert env["AICR_RUNNER_VALIDATE__EVIDENCE_CONFIGMAP"] == "aicr-evidence-bundle"
    assert env["AICR_RUNNER_STATUS_CONFIGMAP"] == "aicr-run-status"
    assert env["AICR_RUNNER_AICR__VERSION"] == "v1.2.0"
    assert env["AICR_RUNNER_AICR__ARCH"] == "", "empty: the runtime fetches the node's architecture"
    assert env["AICR_RUNNER_AICR__RELEASE_BASE_URL"] == "https://github.com/NVIDIA/aicr/releases/download"
    assert env["AICR_RUNNER_DEPLOY__FLAGS"] == "--best-effort --no-wait"
    assert env["AICR_RUNNER_CRITERIA__SERVICE"] == "any"
    assert env["AICR_RUNNER_LOG_FORMAT"] == "console"
    assert env["AICR_RUNNER_NAMESPACE"] == NAMESPACE


def test_the_strict_pin_never_crosses_architectures() -> None:
    env = renders({"aicrArch": "arm64", "aicrSha256": {"amd64": "a" * 64, "arm64": ""}}).env
    assert env["AICR_RUNNER_AICR__ARCH"] == "arm64"
    assert env["AICR_RUNNER_AICR__SHA256__ARM64"] == ""
    assert env["AICR_RUNNER_AICR__SHA256__AMD64"] == "a" * 64


# -- NOTES -------------------------------------------------------------------------------------------------


def notes(*sets: str) -> str:
    """NOTES.txt as `helm install --dry-run=client` prints it. Helm 4 only (tests
    using this are marked one_helm): Helm 3's --dry-run=client still contacts the
    cluster, and `helm template` does not render NOTES.txt."""
    proc = helm(
        "install",
        RELEASE,
        str(CHART),
        "-n",
        NAMESPACE,
        "--dry-run=client",
        "--set",
        "criteria.accelerator=h100",
        *sets,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("NOTES:", 1)[1]


#: NOTES' budget: the commands that come next and a link, whatever the values
#: (30, and 2 for a re-validation schedule: its CronJob and the command that starts one now).
NOTES_LINES = 32
#: The README's install: every component installed, deployment-phase validation passed.
PROVING = ("--set", "deploy.failOnComponentFailure=true,validate.enabled=true,validate.failOnError=true")
#: Every value that adds a line to NOTES, at once.
MOST_LINES = (
    "--set", f"dataPack={PACK}", "--set", "dataPackSecret=acme-cred", "--set", "rbac.create=false",
    "--set", "serviceAccount.create=false", "--set", "serviceAccount.name=platform",
    "--set", "aicrProvenance.mode=off", "--set", "validate.enabled=true", "--set", "validate.emitEvidence=true",
    "--set", "validate.publish.enabled=true", "--set", "validate.publish.ref=ghcr.io/acme/evidence",
    "--set", "validate.publish.mode=unsigned", "--set", "revalidate.schedule=0 */6 * * *",
)  # fmt: skip
NOTES_CASES = {
    "defaults": (),
    "proving posture": PROVING,
    "every optional line": MOST_LINES,
    **{f"examples/values/{p.name}": ("-f", str(p)) for p in sorted((ROOT / "examples" / "values").glob("*.yaml"))},
}


@pytest.mark.one_helm  # see notes(); e2e/test_notes.py renders them with Helm 3 against a real API server
@pytest.mark.parametrize("case", NOTES_CASES)
def test_notes_fit_in_30_lines(case: str) -> None:
    text = notes(*NOTES_CASES[case])
    lines = text.strip("\n").splitlines()
    assert len(lines) <= NOTES_LINES, text
    if case == "every optional line":
        assert len(lines) == NOTES_LINES, "every optional line is in this case: it is the budget's worst case"


@pytest.mark.one_helm  # see notes()
def test_notes_give_the_commands_that_come_next_and_a_link_to_the_rest() -> None:
    text = notes(*PROVING)
    job = job_name({"deploy": {"failOnComponentFailure": True}, "validate": {"enabled": True, "failOnError": True}})
    # The log follow waits for the container first (a Pending pod has no log yet).
    assert (
        f"kubectl wait -n {NAMESPACE} pod -l job-name={job} --for=create "
        f"--for=jsonpath='{{.status.containerStatuses[0].containerID}}' --timeout=30m "
        f"&& kubectl logs -n {NAMESPACE} -f job/{job}"
    ) in text
    # The wait ends on failure too (e2e/test_run_events.py runs it against a real API server).
    assert f"kubectl wait -n {NAMESPACE} job/{job} --for=condition=Complete --timeout=10s" in text
    assert (
        f"kubectl wait -n {NAMESPACE} job/{job} --for=condition=Failed --timeout=0 >/dev/null 2>&1 "
        '&& { echo "Job failed"; exit 1; }'
    ) in text
    assert 'case "$outcome" in SucceededWithFailures|SucceededInconclusive) exit 3;; esac; exit 0' in text
    assert f"kubectl get -n {NAMESPACE} job/{job} >/dev/null || exit 2" in text
    assert f"kubectl get cm -n {NAMESPACE} aicr-run-status -o jsonpath='{{.data.phase}}'" in text
    assert f"kubectl get cm -n {NAMESPACE} aicr-run-status -o jsonpath='{{.data.summary\\.txt}}'" in text
    assert f"kubectl get pod -n {NAMESPACE} -l job-name={job} -o jsonpath=" in text
    assert "  steps: recipe, bundle, verify, deploy, validate" in text
    [link] = re.findall(re.escape(HOME) + r"\S*", text)
    assert link == f"{HOME}/blob/main/docs/runs.md"
    assert problem(Link(ROOT / "chart" / "templates" / "NOTES.txt", 1, link)) is None
    assert 'README "Change safety"' in text
    assert 'README "Uninstalling"' in text
    assert "pack" not in text.lower()
    assert "rbac.create=false" not in text
    assert "existing ServiceAccount" not in text
    assert "WARNING" not in text


@pytest.mark.one_helm  # see notes()
def test_notes_read_the_status_configmap_the_values_name() -> None:
    assert "kubectl get cm -n aicr my-status -o jsonpath='{.data.phase}'" in notes("--set", "statusConfigMap=my-status")
    assert "Read its status" not in notes("--set", "statusConfigMap=")


@pytest.mark.one_helm  # see notes()
def test_notes_say_who_binds_the_account_when_the_chart_does_not() -> None:
    text = notes(
        "--set", "rbac.create=false", "--set", "serviceAccount.create=false", "--set", "serviceAccount.name=platform"
    )
    assert (
        "The chart created no RBAC (rbac.create=false): bind the ServiceAccount "
        f'{NAMESPACE}/platform before the pod starts (README "Permissions").'
    ) in text
    assert f"The Job runs as the existing ServiceAccount {NAMESPACE}/platform:" in text
    off = notes("--set", "aicrProvenance.mode=off", "--set", "rbac.clusterAdmin=false")
    assert "aicr runs with the installer's cluster-wide permissions without proof of who built it" in off


@pytest.mark.one_helm  # see notes()
def test_notes_say_whether_aicrs_provenance_is_enforced() -> None:
    assert (
        "  aicr provenance: verified offline before aicr runs (signer "
        "https://github.com/NVIDIA/aicr/.github/workflows/on-tag.yaml@refs/tags/v1.2.0); exit 29 if it does not verify"
    ) in notes()
    acme = notes(
        "--set", "aicrVersion=1.3.0",
        "--set", "aicrProvenance.identity=https://github.com/acme/aicr/.github/workflows/r.yaml@refs/tags/{version}",
    )  # fmt: skip
    assert "(signer https://github.com/acme/aicr/.github/workflows/r.yaml@refs/tags/v1.3.0)" in acme
    warn = notes("--set", "aicr.provenance.mode=warn")
    assert "WARNING: checked but not enforced (aicr.provenance.mode=warn)" in warn
    # The earlier name gives the same NOTES, in the new name's words.
    assert notes("--set", "aicrProvenance.mode=warn") == warn
    off = notes("--set", "aicrProvenance.mode=off")
    assert "WARNING: not checked (aicr.provenance.mode=off)" in off
    assert "verified offline" not in off


@pytest.mark.one_helm  # see notes()
def test_notes_say_the_runtime_checks_a_packs_criteria() -> None:
    text = notes("--set", f"dataPack={PACK}", "--set", "dataPackSecret=acme-cred")
    assert "the runtime checks them against the pack, and a refusal fails the Job with exit 2" in text
    assert "The pod starts only once these Secrets exist in aicr: acme-cred." in text


@pytest.mark.one_helm  # see notes()
def test_notes_warn_of_an_anonymous_evidence_push() -> None:
    publish = (
        "--set", "validate.enabled=true", "--set", "validate.emitEvidence=true",
        "--set", "validate.publish.enabled=true", "--set", "validate.publish.ref=ghcr.io/acme/evidence",
    )  # fmt: skip
    text = notes(*publish, "--set", "validate.publish.mode=unsigned")
    assert "WARNING: no validate.publish.registrySecret: the push is anonymous and usually fails;" in text
    assert ", publish evidence (unsigned) to ghcr.io/acme/evidence" in text
    pushed = notes(*publish, "--set", "validate.publish.mode=unsigned", "--set", "validate.publish.registrySecret=push")
    assert "WARNING" not in pushed
    assert "The pod starts only once these Secrets exist in aicr: push." in pushed
