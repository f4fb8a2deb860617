package main

// A minimal crictl: kind runs `crictl inspecti IMAGE` on its nodes (kind load
// docker-image: is the image there, under which tags) and `crictl images`
// (kind export logs). cri-tools cannot be fetched from the Go module proxy
// here, so this file answers those two commands (plus `version`) from the
// node's CRI image service with the same JSON fields.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
)

const crictlUsage = "usage: crictl [-r ENDPOINT] inspecti IMAGE... | images [-q] | version\n" +
	"(a subset of cri-tools' crictl, built into kindnode)\n"

func runCrictl(args []string) int {
	endpoint := os.Getenv("CONTAINER_RUNTIME_ENDPOINT")
	if endpoint == "" {
		endpoint = "unix:///run/containerd/containerd.sock"
	}
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch {
		case (args[0] == "-r" || args[0] == "--runtime-endpoint" || args[0] == "-i" || args[0] == "--image-endpoint") && len(args) > 1:
			endpoint = args[1]
			args = args[2:]
		case strings.HasPrefix(args[0], "--runtime-endpoint=") || strings.HasPrefix(args[0], "--image-endpoint="):
			endpoint = args[0][strings.Index(args[0], "=")+1:]
			args = args[1:]
		default:
			args = args[1:] // --debug, --timeout ...: ignored
		}
	}
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, crictlUsage)
		return 2
	}
	svc, err := remote.NewRemoteImageService(endpoint, 10*time.Second, nil, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "crictl: connect to %s: %v\n", endpoint, err)
		return 1
	}
	ctx := context.Background()
	switch args[0] {
	case "inspecti":
		if len(args) < 2 {
			fmt.Fprint(os.Stderr, crictlUsage)
			return 2
		}
		code := 0
		for _, image := range args[1:] {
			resp, err := svc.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: image}, false)
			if err != nil {
				fmt.Fprintf(os.Stderr, "crictl: image status for %q: %v\n", image, err)
				code = 1
				continue
			}
			if resp.GetImage() == nil {
				fmt.Fprintf(os.Stderr, "crictl: no such image %q present\n", image)
				code = 1
				continue
			}
			out, _ := json.MarshalIndent(map[string]any{"status": imageJSON(resp.GetImage())}, "", "  ")
			fmt.Println(string(out))
		}
		return code
	case "images", "image", "img":
		quiet := len(args) > 1 && args[1] == "-q"
		images, err := svc.ListImages(ctx, &runtimeapi.ImageFilter{})
		if err != nil {
			fmt.Fprintf(os.Stderr, "crictl: list images: %v\n", err)
			return 1
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', 0)
		if !quiet {
			fmt.Fprintln(w, "IMAGE\tTAG\tIMAGE ID\tSIZE")
		}
		for _, im := range images {
			if quiet {
				fmt.Println(im.GetId())
				continue
			}
			id := strings.TrimPrefix(im.GetId(), "sha256:")
			if len(id) > 13 {
				id = id[:13]
			}
			tags := im.GetRepoTags()
			if len(tags) == 0 {
				tags = []string{"<none>:<none>"}
			}
			for _, t := range tags {
				repo, tag := t, "<none>"
				if i := strings.LastIndex(t, ":"); i > strings.LastIndex(t, "/") {
					repo, tag = t[:i], t[i+1:]
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%.1fMB\n", repo, tag, id, float64(im.GetSize())/1e6)
			}
		}
		w.Flush()
		return 0
	case "version":
		fmt.Println("crictl version: kindnode subset")
		return 0
	default:
		fmt.Fprintf(os.Stderr, "crictl: command %q is not in this subset\n%s", args[0], crictlUsage)
		return 2
	}
}

func imageJSON(im *runtimeapi.Image) map[string]any {
	return map[string]any{
		"id":          im.GetId(),
		"repoTags":    im.GetRepoTags(),
		"repoDigests": im.GetRepoDigests(),
		"size":        fmt.Sprint(im.GetSize()),
		"username":    im.GetUsername(),
		"pinned":      im.GetPinned(),
	}
}
