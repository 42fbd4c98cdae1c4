// Command image-tools is helm, kubectl, cosign and oras in one binary, for the
// aicr-runner image: the four share most of their code (client-go, the
// Kubernetes API types, cobra, protobuf, the registry clients: oras-go is also
// helm's), and one binary holds it once. /usr/local/bin/helm, kubectl, cosign
// and oras are links to it; the name it is started under picks the tool
// ("image-tools TOOL ARGS..." works too). oras is there for `aicr-runner mirror`
// run from the image, which copies with it.
//
// Each tool's function below is its upstream main at the version pinned in
// tools/versions.env, unchanged but for the name (and cosign's deprecated-flag
// warnings, which print through an internal package of cosign's). It is built by
// scripts/bootstrap-tools.sh (target image-tools) with -trimpath and -s -w; the
// version stamps are the upstream release builds' own -X flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	helmcmd "helm.sh/helm/v4/pkg/cmd"
	"helm.sh/helm/v4/pkg/kube"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"

	cosigncli "github.com/sigstore/cosign/v3/cmd/cosign/cli"
	cosignError "github.com/sigstore/cosign/v3/cmd/cosign/errors"

	orasroot "oras.land/oras/cmd/oras/root"

	// Import to initialize client auth plugins (helm's and kubectl's main both do).
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

var tools = map[string]func(){"helm": helm, "kubectl": kubectl, "cosign": cosign, "oras": oras}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := tools[name]; !ok && len(os.Args) > 1 {
		// "image-tools helm version": the tool is the first argument.
		name = os.Args[1]
		os.Args = os.Args[1:]
	}
	run, ok := tools[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "image-tools: start me as helm, kubectl, cosign or oras (a link named so, or 'image-tools <tool> ...'), not %q\n", name)
		os.Exit(2)
	}
	run()
}

// helm: helm.sh/helm/v4/cmd/helm/helm.go.
func helm() {
	kube.ManagedFieldsManager = "helm"

	cmd, err := helmcmd.NewRootCmd(os.Stdout, os.Args[1:], helmcmd.SetupLogging)
	if err != nil {
		slog.Warn("command failed", slog.Any("error", err))
		os.Exit(1)
	}

	if err := cmd.Execute(); err != nil {
		if cerr, ok := errors.AsType[helmcmd.CommandError](err); ok {
			os.Exit(cerr.ExitCode)
		}
		os.Exit(1)
	}
}

// kubectl: k8s.io/kubernetes/cmd/kubectl/kubectl.go.
func kubectl() {
	logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	command := kubectlcmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}

// cosign: github.com/sigstore/cosign/v3/cmd/cosign/main.go, without the KMS
// provider plugins (AWS, Azure, GCP, Vault: signing keys held in a cloud KMS,
// which verifying a Sigstore bundle never uses). The deprecation warnings print
// as cosign's internal ui package prints them.
func cosign() {
	for i, arg := range os.Args {
		if (strings.HasPrefix(arg, "-") && len(arg) == 2) || (strings.HasPrefix(arg, "--") && len(arg) >= 4) {
			continue
		}
		if strings.HasPrefix(arg, "--") && len(arg) == 3 {
			newArg := fmt.Sprintf("-%c", arg[2])
			warnf("the flag %s is deprecated and will be removed in a future release. Please use the flag %s.", arg, newArg)
			os.Args[i] = newArg
		} else if strings.HasPrefix(arg, "-") && len(arg) > 1 {
			newArg := fmt.Sprintf("-%s", arg)
			newArgType := "flag"
			if newArg == "--version" {
				newArg = "version"
				newArgType = "subcommand"
			}
			warnf("the %s flag is deprecated and will be removed in a future release. "+
				"Please use the %s %s instead.",
				arg, newArg, newArgType,
			)
			os.Args[i] = newArg
		}
	}

	if err := cosigncli.New().Execute(); err != nil {
		var cosignError *cosignError.CosignError
		if errors.As(err, &cosignError) {
			log.Printf("error during command execution: %v", err)
			os.Exit(cosignError.ExitCode())
		}
		log.Fatalf("error during command execution: %v", err)
	}
}

func warnf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "WARNING: "+format+"\n", args...)
}

// oras: oras.land/oras/cmd/oras/main.go.
func oras() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	if err := orasroot.New().ExecuteContext(ctx); err != nil {
		os.Exit(1)
	}
}
