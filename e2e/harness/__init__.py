"""Real components for the end-to-end tests: an API server (etcd + kube-apiserver)
with RBAC and a ServiceAccount token issuer, an htpasswd-protected OCI registry,
the Go oras and helm CLIs, and a real node (containerd, kubelet, kube-scheduler)
that runs the pods."""
