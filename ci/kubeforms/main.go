// kubeforms answers, for each JSON line {"kind": "quantity"|"duration"|"envVarName"|"blockedCidr", "value": "..."}
// on stdin,
// whether upstream's own code takes the value and what it means: resource.ParseQuantity (k8s.io/apimachinery,
// the API server's own), model.ParseDuration (github.com/prometheus/common, Prometheus' own) and
// validation.IsRelaxedEnvVarName (apimachinery: the API server's check of a pod env var's name from
// Kubernetes 1.34), and for a CIDR the chart puts in an ipBlock's except under 0.0.0.0/0 or ::/0,
// ValidateIPBlock's two checks (k8s.io/kubernetes pkg/apis/networking/validation, v1.34.4, lines 259-272):
// apimachinery's IsValidCIDRForLegacyField with StrictIPCIDRValidation off (alpha), and a strict subset of the
// cidr by k8s.io/utils' ParseCIDRSloppy. tests/chart feeds it the forms a user may write and holds the values schema and the
// chart's arithmetic to its answers.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"
)

// blockedCIDR: the errors ValidateIPBlock gives an except entry of the chart's egress policy.
func blockedCIDR(value string) string {
	cidr := "0.0.0.0/0"
	if strings.Contains(value, ":") { // the chart's family split (templates/networkpolicy/_networkpolicy.tpl)
		cidr = "::/0"
	}
	if errs := validation.IsValidCIDRForLegacyField(field.NewPath("except"), value, false, nil); len(errs) > 0 {
		return errs[0].Error()
	}
	_, outer, _ := netutils.ParseCIDRSloppy(cidr)
	_, inner, err := netutils.ParseCIDRSloppy(value)
	if err != nil {
		return err.Error()
	}
	outerLen, _ := outer.Mask.Size()
	innerLen, _ := inner.Mask.Size()
	if !outer.Contains(inner.IP) || outerLen >= innerLen {
		return "must be a strict subset of `cidr` " + cidr
	}
	return ""
}

type question struct {
	Kind  string `json:"kind"`
	Value string `json:"value"`
}

type answer struct {
	Value string  `json:"value"`
	OK    bool    `json:"ok"`
	Error string  `json:"error,omitempty"`
	Float float64 `json:"float"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var q question
		if err := json.Unmarshal(in.Bytes(), &q); err != nil {
			fmt.Fprintln(os.Stderr, "kubeforms:", err)
			os.Exit(2)
		}
		a := answer{Value: q.Value}
		switch q.Kind {
		case "quantity":
			if v, err := resource.ParseQuantity(q.Value); err != nil {
				a.Error = err.Error()
			} else {
				a.OK, a.Float = true, v.AsApproximateFloat64()
			}
		case "duration":
			if d, err := model.ParseDuration(q.Value); err != nil {
				a.Error = err.Error()
			} else {
				a.OK, a.Float = true, float64(d)/1e9
			}
		case "envVarName":
			if errs := validation.IsRelaxedEnvVarName(q.Value); len(errs) > 0 {
				a.Error = errs[0]
			} else {
				a.OK = true
			}
		case "blockedCidr":
			a.Error = blockedCIDR(q.Value)
			a.OK = a.Error == ""
		default:
			fmt.Fprintf(os.Stderr, "kubeforms: unknown kind %q\n", q.Kind)
			os.Exit(2)
		}
		if err := out.Encode(a); err != nil {
			os.Exit(1)
		}
	}
}
