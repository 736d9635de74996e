// kubeforms answers, for each JSON line {"kind": "quantity"|"duration"|"envVarName", "value": "..."} on stdin,
// whether upstream's own code takes the value and what it means: resource.ParseQuantity (k8s.io/apimachinery,
// the API server's own), model.ParseDuration (github.com/prometheus/common, Prometheus' own) and
// validation.IsRelaxedEnvVarName (apimachinery: the API server's check of a pod env var's name from
// Kubernetes 1.34). tests/chart feeds it the forms a user may write and holds the values schema and the
// chart's arithmetic to its answers.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

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
		default:
			fmt.Fprintf(os.Stderr, "kubeforms: unknown kind %q\n", q.Kind)
			os.Exit(2)
		}
		if err := out.Encode(a); err != nil {
			os.Exit(1)
		}
	}
}
