// Command pause is the sandbox ("pause") container of every pod on the kind
// nodes kind-configs/node-image.sh builds: it holds the pod's namespaces open,
// sleeps, reaps the zombies it inherits as PID 1, and exits on SIGINT/SIGTERM,
// as Kubernetes' own pause.c does. Built static (CGO_ENABLED=0), standard
// library only.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		os.Stdout.WriteString("pause (multikueue kind node)\n")
		return
	}
	if os.Getpid() != 1 {
		os.Stderr.WriteString("Warning: pause should be the first process\n")
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		switch s {
		case syscall.SIGCHLD:
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		default:
			os.Exit(0)
		}
	}
}
