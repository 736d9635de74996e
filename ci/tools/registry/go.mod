// Pinned OCI registry for the chart's package/push/pull round trip on loopback (make package).
module github.com/miles-k8s/ci/tools/registry

go 1.26.0

tool github.com/google/go-containerregistry/cmd/registry

require github.com/google/go-containerregistry v0.22.1 // indirect
