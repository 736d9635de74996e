// The upstream parsers tests/chart checks the values schema against (ci/kubeforms/main.go): the API server's
// resource.Quantity and Prometheus' duration, at the versions the testbed's Kubernetes (ci/tools/kubernetes)
// builds with.
module github.com/miles-k8s/ci/kubeforms

go 1.24.0

require (
	github.com/prometheus/common v0.62.0
	k8s.io/apimachinery v0.34.4
	k8s.io/utils v0.0.0-20250604170112-4c0f3b243397
)

require (
	github.com/fxamacker/cbor/v2 v2.9.0 // indirect
	github.com/go-logr/logr v1.4.2 // indirect
	github.com/gogo/protobuf v1.3.2 // indirect
	github.com/prometheus/client_model v0.6.1 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	google.golang.org/protobuf v1.36.5 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	k8s.io/klog/v2 v2.130.1 // indirect
	sigs.k8s.io/json v0.0.0-20241014173422-cfa47c3a1cc8 // indirect
)
