// Command kindnode is one multi-call binary holding the Kubernetes programs a
// kind node image needs: kubelet, kubeadm, kubectl, kube-proxy,
// kube-apiserver, kube-controller-manager, kube-scheduler and etcd, and the
// subset of crictl that kind uses (crictl.go).
//
// It picks the program from the base name of argv[0], so an image holds one
// copy and symlinks (/usr/bin/kubelet -> kindnode, ...). Called as kindnode,
// the first argument names the program instead ("kindnode kubelet --help").
// One program compiles the shared Kubernetes packages once, which keeps the
// cold build on a two-core machine in minutes rather than an hour.
//
// Build it with the version stamped (kubeadm and the kubelet read it):
//
//	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w \
//	  -X k8s.io/component-base/version.gitVersion=v1.35.4 \
//	  -X k8s.io/component-base/version.gitMajor=1 \
//	  -X k8s.io/component-base/version.gitMinor=35 \
//	  -X k8s.io/component-base/version.gitTreeState=clean" -o kindnode .
//
// kind-configs/node-image.sh does this.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	_ "time/tzdata" // CronJob time zones (kube-controller-manager, kube-apiserver)

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubeadm "k8s.io/kubernetes/cmd/kubeadm/app"
	kubeadmerrors "k8s.io/kubernetes/cmd/kubeadm/app/util/errors"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl's client auth plugins
)

var programs = []string{
	"kubelet", "kubeadm", "kubectl", "kube-proxy",
	"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd",
	"crictl",
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: kindnode %s [flags]\n(or a symlink named after one of them)\n", strings.Join(programs, "|"))
	os.Exit(2)
}

func main() {
	name := filepath.Base(os.Args[0])
	if strings.HasPrefix(name, "kindnode") { // kindnode, kindnode-v1.35.4, ...
		if len(os.Args) < 2 {
			usage()
		}
		name = os.Args[1]
		os.Args = append([]string{name}, os.Args[2:]...)
	}
	switch name {
	case "kubelet":
		os.Exit(cli.Run(kubelet.NewKubeletCommand(context.Background())))
	case "kubeadm":
		kubeadmerrors.HandleError(kubeadm.Run())
	case "kubectl":
		logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) // nolint:errcheck
		if err := cli.RunNoErrOutput(kubectlcmd.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
	case "kube-proxy":
		os.Exit(cli.Run(proxy.NewProxyCommand()))
	case "kube-apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kube-scheduler":
		os.Exit(cli.Run(scheduler.NewSchedulerCommand()))
	case "etcd":
		etcdmain.Main(os.Args)
	case "crictl":
		os.Exit(runCrictl(os.Args[1:]))
	default:
		fmt.Fprintf(os.Stderr, "kindnode: unknown program %q\n", name)
		usage()
	}
}
