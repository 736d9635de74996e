// CoreDNS with the plugins the testbed's Corefile uses and no others (testbed/node.sh writes the Corefile):
// the stock build links every plugin, each cloud provider's SDK among them, and takes many minutes on two cores.
// The order below is the plugin chain's, as in CoreDNS's own plugin.cfg.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "cache", "kubernetes"}
	coremain.Run()
}
